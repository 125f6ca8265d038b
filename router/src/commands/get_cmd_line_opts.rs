//! `getCmdLineOpts`: the process arguments and the parsed router configuration.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub async fn run(session: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    let argv: Vec<String> = std::env::args().collect();
    let parsed = bson::to_document(&session.state.config.redacted()).unwrap_or_default();
    Ok(doc! {"argv": argv, "parsed": parsed})
}
