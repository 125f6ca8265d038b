//! `ping`.

use bson::Document;
use wire::MongoResult;

use crate::context::Session;

pub async fn run(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    Ok(Document::new())
}
