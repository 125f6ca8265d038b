//! `flushRouterConfig`: this router forgets its cached routing and reads it again on
//! next use.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub async fn run(session: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    if let Some(cluster) = &session.state.cluster {
        cluster.flush();
    }
    Ok(doc! {"flushed": true})
}
