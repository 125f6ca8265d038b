//! The router's command table. Commands answered by the router itself are registered in
//! `LOCAL`; every other command is forwarded to the shard that owns the data.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::conn::Session;
use crate::counters::Op;

mod build_info;
mod connection_status;
mod forward;
mod get_cmd_line_opts;
mod get_parameter;
mod hello;
mod host_info;
mod list_commands;
mod ping;
mod search_indexes;
mod server_status;
mod sessions;
mod whatsmyuri;

type LocalFn = fn(&mut Session, &str, &Document) -> MongoResult<Document>;

/// Commands the router answers without a shard.
const LOCAL: &[(&str, LocalFn)] = &[
    ("hello", hello::run),
    ("isMaster", hello::run),
    ("ismaster", hello::run),
    ("ping", ping::run),
    ("buildInfo", build_info::run),
    ("buildinfo", build_info::run),
    ("getParameter", get_parameter::run),
    ("getCmdLineOpts", get_cmd_line_opts::run),
    ("serverStatus", server_status::run),
    ("whatsmyuri", whatsmyuri::run),
    ("connectionStatus", connection_status::run),
    ("logout", connection_status::logout),
    ("endSessions", sessions::end_sessions),
    ("killAllSessions", sessions::kill_sessions),
    ("killAllSessionsByPattern", sessions::kill_sessions),
    ("killSessions", sessions::kill_sessions),
    ("refreshSessions", sessions::refresh_sessions),
    ("startSession", sessions::start_session),
    ("hostInfo", host_info::run),
    ("listCommands", list_commands::run),
    ("createSearchIndexes", search_indexes::run),
    ("updateSearchIndex", search_indexes::run),
    ("dropSearchIndex", search_indexes::run),
];

/// Commands forwarded to the shard, with the counter they bump.
pub const FORWARDED: &[(&str, Op)] = &[
    ("insert", Op::Insert),
    ("update", Op::Update),
    ("delete", Op::Delete),
    ("find", Op::Query),
    ("getMore", Op::GetMore),
    ("findAndModify", Op::Command),
    ("findandmodify", Op::Command),
    ("killCursors", Op::Command),
    ("count", Op::Command),
    ("distinct", Op::Command),
    ("aggregate", Op::Command),
    ("explain", Op::Command),
    ("create", Op::Command),
    ("drop", Op::Command),
    ("dropDatabase", Op::Command),
    ("renameCollection", Op::Command),
    ("listCollections", Op::Command),
    ("listDatabases", Op::Command),
    ("createIndexes", Op::Command),
    ("listIndexes", Op::Command),
    ("dropIndexes", Op::Command),
    ("deleteIndexes", Op::Command),
    ("collStats", Op::Command),
    ("dbStats", Op::Command),
    ("replSetGetStatus", Op::Command),
    ("replSetStepDown", Op::Command),
    ("replSetStepUp", Op::Command),
];

pub async fn dispatch(
    session: &mut Session,
    db: &str,
    name: &str,
    cmd: Document,
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
    if let Some((_, run)) = LOCAL.iter().find(|(n, _)| *n == name) {
        session.state.counters.add(session.id, Op::Command, 1);
        return run(session, db, &cmd);
    }
    if let Some((_, op)) = FORWARDED.iter().find(|(n, _)| *n == name) {
        session.state.counters.add(session.id, *op, 1);
        return forward::run(session, db, cmd).await;
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
