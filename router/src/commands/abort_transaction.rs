//! `abortTransaction`, sent to the shard the transaction runs on (`transactions.rs`).

use bson::Document;
use wire::MongoResult;

use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    super::commit_transaction::end(session, db, cmd, "abortTransaction").await
}
