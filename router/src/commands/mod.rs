//! The router's commands: one file per command the router answers itself, the command
//! table (`table.rs`), and `dispatch`, which runs a command by the table: answered here,
//! or forwarded to the shard that owns the data (`forward.rs`).

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::authz::{self, Rule};
use crate::context::Session;
use crate::counters::Op;

mod abort_transaction;
mod add_shard;
mod add_shard_to_zone;
mod authenticate;
mod balancer_mode;
mod balancer_status;
mod build_info;
mod commit_transaction;
mod configure_fail_point;
mod connection_status;
mod create_role;
mod create_user;
mod current_op;
mod drop_role;
mod drop_user;
mod enable_sharding;
mod flush_router_config;
mod forward;
mod get_cmd_line_opts;
mod get_log;
mod get_parameter;
mod grant_privileges;
mod grant_roles;
mod hello;
mod host_info;
mod kill_op;
mod list_commands;
mod list_shards;
mod move_chunk;
mod move_primary;
mod ping;
mod remove_shard;
mod roles_info;
mod sasl;
mod search_indexes;
mod server_status;
mod sessions;
pub mod shard_collection;
mod split;
pub mod table;
mod update_role;
mod update_user;
mod update_zone_key_range;
mod users_info;
mod whatsmyuri;

pub use table::{collection_of, find};

pub async fn dispatch(
    session: &mut Session,
    db: &str,
    name: &str,
    cmd: Document,
    sequences: Vec<wire::DocSequence>,
) -> MongoResult<Document> {
    if crate::transactions::in_transaction(&cmd) {
        crate::transactions::check_statement(name, &cmd)?;
    }
    if name == "aggregate" && starts_with_stage(&cmd, "$listSearchIndexes") {
        return Err(MongoError::new(
            ErrorCode::SearchNotEnabled,
            search_indexes::NOT_ENABLED,
        ));
    }
    if let Some(lsid) = cmd.get("lsid") {
        sessions::touch(session, lsid)?;
    }
    if name == "aggregate" && starts_with_stage(&cmd, "$listLocalSessions") {
        session.state.counters.add(session.id, Op::Command, 1);
        authz::authorize(session, db, name, &cmd, Rule::Authenticated).await?;
        return Box::pin(sessions::list_local_sessions(session, db, &cmd)).await;
    }
    if name == "aggregate" && starts_with_stage(&cmd, "$currentOp") {
        session.state.counters.add(session.id, Op::Command, 1);
        return Box::pin(current_op::aggregate(session, db, &cmd)).await;
    }
    if name == "sleep" && !session.state.config.enable_test_commands {
        return Err(MongoError::new(
            ErrorCode::CommandNotFound,
            "no such command: 'sleep' (a test command: enable test commands to use it)",
        ));
    }
    let Some(command) = table::find(name) else {
        return Err(MongoError::new(
            ErrorCode::CommandNotFound,
            format!("no such command: '{name}'"),
        ));
    };
    let op = match command.run {
        table::Run::Router(_) => Op::Command,
        table::Run::Forward(op) => op,
    };
    session.state.counters.add(session.id, op, 1);
    if let table::Run::Router(run) = command.run {
        authz::authorize(session, db, name, &cmd, command.rule).await?;
        return run(session, db, &cmd).await;
    }
    wire::command_fields::check(name, &cmd)?;
    // A cursor over a whole database's change stream continues (and is killed) as
    // `$cmd.aggregate`.
    let cursor_command = matches!(name, "getMore" | "killCursors");
    let named = command.collection(&cmd);
    if let Some(coll) = named.filter(|c| !(cursor_command && *c == "$cmd.aggregate")) {
        wire::namespace::check(db, coll)?;
    }
    // As mongos: the catalog and the users live there.
    if name == "dropDatabase" && matches!(db, "admin" | "config") {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            format!("Cannot drop the '{db}' database"),
        ));
    }
    authz::authorize(session, db, name, &cmd, command.rule).await?;
    // Boxed: inline, every command's future (a refused one's too, and those the
    // router answers itself) would be the size of a forwarded one's, and be moved in
    // whole at each level (`forward`).
    let txn = match crate::transactions::in_transaction(&cmd) {
        true => Some(crate::transactions::named(
            &cmd,
            sessions::connection_uid(session),
        )?),
        false => None,
    };
    let mut reply = Box::pin(forward::run(session, command, db, cmd, sequences)).await?;
    if let Some((key, number)) = txn {
        let state = session.state.clone();
        if let Some(Bson::Timestamp(at)) = reply.remove(wire::command_fields::TXN_READ_TIME) {
            state.transactions.started(&key, number, at);
        }
        // Boxed, as `forward` is: the catalog lookup would grow every command's future.
        let token = Box::pin(commit_transaction::recovery_token(&state, &key, number));
        if let Some(token) = token.await {
            reply.insert("recoveryToken", token);
        }
    }
    if name == "listDatabases" {
        authz::filter_databases(session, &mut reply);
    }
    Ok(reply)
}

fn starts_with_stage(cmd: &Document, stage: &str) -> bool {
    match cmd.get("pipeline") {
        Some(Bson::Array(stages)) => stages
            .first()
            .and_then(Bson::as_document)
            .is_some_and(|s| s.contains_key(stage)),
        _ => false,
    }
}
