//! `whatsmyuri`: the client's address as the router sees it.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub async fn run(session: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    Ok(doc! {"you": &session.peer_text})
}
