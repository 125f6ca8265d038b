//! The router's command table. Commands answered by the router itself are registered in
//! `LOCAL`; every other command is forwarded to the shard that owns the data.

use std::future::Future;
use std::pin::Pin;

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::authz::{self, acts, Rule};
use crate::auth::roles::Action::*;
use crate::context::Session;
use crate::counters::Op;

mod add_shard;
mod add_shard_to_zone;
mod authenticate;
mod balancer_mode;
mod balancer_status;
mod build_info;
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
mod update_role;
mod update_user;
mod update_zone_key_range;
mod users_info;
mod whatsmyuri;

type LocalFn = fn(&mut Session, &str, &Document) -> MongoResult<Document>;
type BoxFuture<'a> = Pin<Box<dyn Future<Output = MongoResult<Document>> + Send + 'a>>;
type AsyncFn = for<'a> fn(&'a mut Session, &'a str, &'a Document) -> BoxFuture<'a>;

/// Wraps an `async fn(&mut Session, &str, &Document)` handler as a table entry.
macro_rules! async_cmd {
    ($f:path) => {{
        fn call<'a>(s: &'a mut Session, db: &'a str, cmd: &'a Document) -> BoxFuture<'a> {
            Box::pin($f(s, db, cmd))
        }
        call as AsyncFn
    }};
}

/// Commands the router answers without a shard, with what they need when auth is on
/// (MongoDB's `requiresAuth`/`checkAuthForOperation` for each).
const LOCAL: &[(&str, LocalFn, Rule)] = &[
    ("ping", ping::run, Rule::Open),
    (
        "configureFailPoint",
        configure_fail_point::run,
        Rule::Authenticated,
    ),
    ("buildInfo", build_info::run, Rule::Open),
    ("buildinfo", build_info::run, Rule::Open),
    (
        "getParameter",
        get_parameter::run,
        Rule::Cluster(acts(&[GetParameter])),
    ),
    (
        "getCmdLineOpts",
        get_cmd_line_opts::run,
        Rule::Cluster(acts(&[GetCmdLineOpts])),
    ),
    ("whatsmyuri", whatsmyuri::run, Rule::Open),
    ("connectionStatus", connection_status::run, Rule::Open),
    ("logout", connection_status::logout, Rule::Open),
    ("endSessions", sessions::end_sessions, Rule::Open),
    (
        "killAllSessions",
        sessions::kill_all_sessions,
        Rule::Cluster(acts(&[KillAnySession])),
    ),
    (
        "killAllSessionsByPattern",
        sessions::kill_all_sessions,
        Rule::Cluster(acts(&[KillAnySession])),
    ),
    ("killSessions", sessions::kill_sessions, Rule::Authenticated),
    (
        "refreshSessions",
        sessions::refresh_sessions,
        Rule::Authenticated,
    ),
    ("startSession", sessions::start_session, Rule::Authenticated),
    ("hostInfo", host_info::run, Rule::Cluster(acts(&[HostInfo]))),
    ("listCommands", list_commands::run, Rule::Open),
    (
        "createSearchIndexes",
        search_indexes::run,
        Rule::Authenticated,
    ),
    (
        "updateSearchIndex",
        search_indexes::run,
        Rule::Authenticated,
    ),
    ("dropSearchIndex", search_indexes::run, Rule::Authenticated),
];

/// Router-answered commands that wait on something (the user store).
const ASYNC: &[(&str, AsyncFn, Rule)] = &[
    ("hello", async_cmd!(sasl::hello), Rule::Open),
    ("isMaster", async_cmd!(sasl::hello), Rule::Open),
    ("ismaster", async_cmd!(sasl::hello), Rule::Open),
    ("saslStart", async_cmd!(sasl::start), Rule::Open),
    ("authenticate", async_cmd!(authenticate::run), Rule::Open),
    ("saslContinue", async_cmd!(sasl::cont), Rule::Open),
    ("createUser", async_cmd!(create_user::run), Rule::Handler),
    ("updateUser", async_cmd!(update_user::run), Rule::Handler),
    ("dropUser", async_cmd!(drop_user::run), Rule::Handler),
    (
        "dropAllUsersFromDatabase",
        async_cmd!(drop_user::drop_all),
        Rule::Handler,
    ),
    ("usersInfo", async_cmd!(users_info::run), Rule::Handler),
    (
        "grantRolesToUser",
        async_cmd!(grant_roles::grant),
        Rule::Handler,
    ),
    (
        "revokeRolesFromUser",
        async_cmd!(grant_roles::revoke),
        Rule::Handler,
    ),
    ("createRole", async_cmd!(create_role::run), Rule::Handler),
    ("updateRole", async_cmd!(update_role::run), Rule::Handler),
    (
        "grantRolesToRole",
        async_cmd!(grant_roles::grant_to_role),
        Rule::Handler,
    ),
    (
        "revokeRolesFromRole",
        async_cmd!(grant_roles::revoke_from_role),
        Rule::Handler,
    ),
    (
        "grantPrivilegesToRole",
        async_cmd!(grant_privileges::grant),
        Rule::Handler,
    ),
    (
        "revokePrivilegesFromRole",
        async_cmd!(grant_privileges::revoke),
        Rule::Handler,
    ),
    ("dropRole", async_cmd!(drop_role::run), Rule::Handler),
    ("rolesInfo", async_cmd!(roles_info::run), Rule::Handler),
    (
        "serverStatus",
        async_cmd!(server_status::run),
        Rule::Cluster(acts(&[ServerStatus])),
    ),
    ("currentOp", async_cmd!(current_op::command), Rule::Handler),
    ("killOp", async_cmd!(kill_op::run), Rule::Handler),
    (
        "shardCollection",
        async_cmd!(shard_collection::run),
        Rule::Named(acts(&[EnableSharding])),
    ),
    (
        "shardcollection",
        async_cmd!(shard_collection::run),
        Rule::Named(acts(&[EnableSharding])),
    ),
    (
        "enableSharding",
        async_cmd!(enable_sharding::run),
        Rule::Named(acts(&[EnableSharding])),
    ),
    (
        "enablesharding",
        async_cmd!(enable_sharding::run),
        Rule::Named(acts(&[EnableSharding])),
    ),
    (
        "addShard",
        async_cmd!(add_shard::run),
        Rule::Cluster(acts(&[AddShard])),
    ),
    (
        "addshard",
        async_cmd!(add_shard::run),
        Rule::Cluster(acts(&[AddShard])),
    ),
    (
        "listShards",
        async_cmd!(list_shards::run),
        Rule::Cluster(acts(&[ListShards])),
    ),
    (
        "listshards",
        async_cmd!(list_shards::run),
        Rule::Cluster(acts(&[ListShards])),
    ),
    (
        "addShardToZone",
        async_cmd!(add_shard_to_zone::add),
        Rule::ConfigDb(acts(&[EnableSharding])),
    ),
    (
        "removeShardFromZone",
        async_cmd!(add_shard_to_zone::remove),
        Rule::ConfigDb(acts(&[EnableSharding])),
    ),
    (
        "updateZoneKeyRange",
        async_cmd!(update_zone_key_range::run),
        Rule::Named(acts(&[EnableSharding])),
    ),
    (
        "split",
        async_cmd!(split::run),
        Rule::Named(acts(&[SplitChunk])),
    ),
    (
        "moveChunk",
        async_cmd!(move_chunk::move_chunk),
        Rule::Named(acts(&[MoveChunk])),
    ),
    (
        "movePrimary",
        async_cmd!(move_primary::run),
        Rule::Named(acts(&[MoveChunk])),
    ),
    (
        "moveRange",
        async_cmd!(move_chunk::move_range),
        Rule::Named(acts(&[MoveChunk])),
    ),
    (
        "balancerStart",
        async_cmd!(balancer_mode::start),
        Rule::ConfigDb(acts(&[EnableSharding])),
    ),
    (
        "balancerStop",
        async_cmd!(balancer_mode::stop),
        Rule::ConfigDb(acts(&[EnableSharding])),
    ),
    (
        "balancerStatus",
        async_cmd!(balancer_status::run),
        Rule::Cluster(acts(&[ListShards])),
    ),
    (
        "removeShard",
        async_cmd!(remove_shard::run),
        Rule::Cluster(acts(&[RemoveShard])),
    ),
    (
        "flushRouterConfig",
        async_cmd!(flush_router_config::run),
        Rule::Cluster(acts(&[FlushRouterConfig])),
    ),
];

/// Commands forwarded to the shard, with the counter they bump and what they need.
pub const FORWARDED: &[(&str, Op, Rule)] = &[
    ("insert", Op::Insert, Rule::Collection(acts(&[Insert]))),
    ("update", Op::Update, Rule::Custom(authz::update_needs)),
    ("delete", Op::Delete, Rule::Collection(acts(&[Remove]))),
    ("find", Op::Query, Rule::Collection(acts(&[Find]))),
    ("getMore", Op::GetMore, Rule::Custom(authz::get_more_needs)),
    (
        "findAndModify",
        Op::Command,
        Rule::Custom(authz::find_and_modify_needs),
    ),
    (
        "findandmodify",
        Op::Command,
        Rule::Custom(authz::find_and_modify_needs),
    ),
    (
        "killCursors",
        Op::Command,
        Rule::Collection(acts(&[KillCursors])),
    ),
    ("count", Op::Command, Rule::Collection(acts(&[Find]))),
    ("distinct", Op::Command, Rule::Collection(acts(&[Find]))),
    (
        "aggregate",
        Op::Command,
        Rule::Custom(crate::auth::aggregate_needs::aggregate_needs),
    ),
    ("explain", Op::Command, Rule::Custom(authz::explain_needs)),
    (
        "create",
        Op::Command,
        Rule::Collection(acts(&[CreateCollection])),
    ),
    (
        "drop",
        Op::Command,
        Rule::Collection(acts(&[DropCollection])),
    ),
    ("dropDatabase", Op::Command, Rule::Db(acts(&[DropDatabase]))),
    (
        "renameCollection",
        Op::Command,
        Rule::Decide(authz::rename_allowed),
    ),
    (
        "listCollections",
        Op::Command,
        Rule::Db(acts(&[ListCollections])),
    ),
    (
        "listDatabases",
        Op::Command,
        Rule::Custom(authz::list_databases_needs),
    ),
    (
        "createIndexes",
        Op::Command,
        Rule::Collection(acts(&[CreateIndex])),
    ),
    (
        "listIndexes",
        Op::Command,
        Rule::Collection(acts(&[ListIndexes])),
    ),
    (
        "dropIndexes",
        Op::Command,
        Rule::Collection(acts(&[DropIndex])),
    ),
    (
        "deleteIndexes",
        Op::Command,
        Rule::Collection(acts(&[DropIndex])),
    ),
    (
        "collStats",
        Op::Command,
        Rule::Collection(acts(&[CollStats])),
    ),
    ("dbStats", Op::Command, Rule::Db(acts(&[DbStats]))),
    ("dbHash", Op::Command, Rule::Db(acts(&[DbHash]))),
    ("validate", Op::Command, Rule::Collection(acts(&[Validate]))),
    (
        "replSetGetStatus",
        Op::Command,
        Rule::Cluster(acts(&[ReplSetGetStatus])),
    ),
    (
        "replSetStepDown",
        Op::Command,
        Rule::Cluster(acts(&[ReplSetStateChange])),
    ),
    (
        "replSetStepUp",
        Op::Command,
        Rule::Cluster(acts(&[ReplSetStateChange])),
    ),
    (
        "replSetFreeze",
        Op::Command,
        Rule::Cluster(acts(&[ReplSetStateChange])),
    ),
    // MongoDB's test command; forwarded only with test commands enabled (`dispatch`).
    ("sleep", Op::Command, Rule::Authenticated),
];

/// The authorization rule of a command, for commands that wrap others (`explain`).
pub fn rule_for(name: &str) -> Option<Rule> {
    let local = LOCAL.iter().find(|e| e.0 == name).map(|e| e.2);
    let asynchronous = || ASYNC.iter().find(|e| e.0 == name).map(|e| e.2);
    let forwarded = || FORWARDED.iter().find(|e| e.0 == name).map(|e| e.2);
    local.or_else(asynchronous).or_else(forwarded)
}

/// True for the data commands the router forwards to shards (the ones it sheds under
/// load, see `Session::shed`).
pub fn is_forwarded(name: &str) -> bool {
    FORWARDED.iter().any(|e| e.0 == name)
}

pub async fn dispatch(
    session: &mut Session,
    db: &str,
    name: &str,
    cmd: Document,
    sequences: Vec<wire::DocSequence>,
) -> MongoResult<Document> {
    if let Some(Bson::Boolean(true)) = cmd.get("startTransaction") {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "multi-document transactions are not supported yet",
        ));
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
    if let Some((_, run, rule)) = LOCAL.iter().find(|e| e.0 == name) {
        session.state.counters.add(session.id, Op::Command, 1);
        authz::authorize(session, db, name, &cmd, *rule).await?;
        return run(session, db, &cmd);
    }
    if let Some((_, run, rule)) = ASYNC.iter().find(|e| e.0 == name) {
        session.state.counters.add(session.id, Op::Command, 1);
        authz::authorize(session, db, name, &cmd, *rule).await?;
        return run(session, db, &cmd).await;
    }
    if let Some((_, op, rule)) = FORWARDED.iter().find(|e| e.0 == name) {
        session.state.counters.add(session.id, *op, 1);
        wire::command_fields::check(name, &cmd)?;
        if let Some(coll) = crate::sharding::collection_of(name, &cmd) {
            wire::namespace::check(db, coll)?;
        }
        // As mongos: the catalog and the users live there.
        if name == "dropDatabase" && matches!(db, "admin" | "config") {
            return Err(MongoError::new(
                ErrorCode::IllegalOperation,
                format!("Cannot drop the '{db}' database"),
            ));
        }
        authz::authorize(session, db, name, &cmd, *rule).await?;
        // Boxed: inline, every command's future (a refused one's too, and those the
        // router answers itself) would be the size of a forwarded one's, and be moved in
        // whole at each level (`forward`).
        let mut reply = Box::pin(forward::run(session, db, cmd, sequences)).await?;
        if name == "listDatabases" {
            authz::filter_databases(session, &mut reply);
        }
        return Ok(reply);
    }
    Err(MongoError::new(
        ErrorCode::CommandNotFound,
        format!("no such command: '{name}'"),
    ))
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
