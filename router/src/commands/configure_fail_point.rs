//! `configureFailPoint` (test commands only; see `fail_point.rs`).

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    if !session.state.config.enable_test_commands {
        return Err(MongoError::new(
            ErrorCode::CommandNotFound,
            "no such command: 'configureFailPoint' (test commands are disabled)",
        ));
    }
    if db != "admin" {
        return Err(MongoError::new(
            ErrorCode::Unauthorized,
            "configureFailPoint may only be run against the admin database.",
        ));
    }
    let count = session.state.fail_points.configure(cmd)?;
    Ok(doc! {"count": count})
}
