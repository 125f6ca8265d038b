//! Logical session commands. The router keeps no server-side session state yet (no
//! transactions, no retryable-write table), so ending or killing sessions has nothing to
//! release; `startSession` hands out a fresh id as mongos does.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use crate::conn::Session;

fn session_list<'a>(cmd: &'a Document, name: &str) -> MongoResult<&'a Vec<Bson>> {
    match cmd.get(name) {
        Some(Bson::Array(a)) => Ok(a),
        _ => Err(MongoError::type_mismatch(format!(
            "BSON field '{name}' is the wrong type, expected type 'array'"
        ))),
    }
}

pub fn end_sessions(_: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    session_list(cmd, "endSessions")?;
    Ok(Document::new())
}

pub fn kill_sessions(_: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = cmd.keys().next().map(String::as_str).unwrap_or_default();
    session_list(cmd, name)?;
    Ok(Document::new())
}

pub fn refresh_sessions(_: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    session_list(cmd, "refreshSessions")?;
    Ok(Document::new())
}

pub fn start_session(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    Ok(
        doc! {"id": {"id": bson::Binary {subtype: bson::spec::BinarySubtype::Uuid, bytes: bson::Uuid::new().bytes().to_vec()}}, "timeoutMinutes": 30},
    )
}
