//! `_shardsvrDeleteIfUnchanged: coll, doc`: deletes the stored document with `doc`'s `_id`
//! only if it is exactly `doc` (byte for byte), under the collection's write lock.
//!
//! A router moving a document whose shard key an update changed to another shard's range
//! (after `WouldChangeOwningShard`) inserts the new document there and then deletes the
//! old one here with this, as the update's statement of its retryable write: the deletion
//! records the update's outcome, so a retry of the update is recognised here and applies
//! once (`record`, when given, is recorded instead: a `findAndModify`'s reply). Without a
//! session it undoes the router's insert on the other shard when the old
//! document changed in between (`n: 0`), and the router starts the update again. The
//! move's intent (`doc_moves`) is removed in the same write as the document.

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use super::args::{collection_name, existing};
use super::update::Outcome;
use crate::execution::write_path::delete_document_with;
use crate::node::Ctx;
use storage::WriteBatch;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let expected = cmd
        .get_document("doc")
        .map_err(|_| MongoError::failed_to_parse("'doc' must be the document to delete"))?;
    let id = expected
        .get("_id")
        .ok_or_else(|| MongoError::failed_to_parse("'doc' has no _id"))?;
    // Recorded already: this statement moved the document before.
    if ctx.begin_statement(0).is_some() {
        return Ok(doc! {"n": 1});
    }
    let Some(meta) = existing(ctx, coll) else {
        return Ok(doc! {"n": 0});
    };
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    if !crate::migrations::doc_moves::stored_exactly(ctx.engine, &meta, expected)? {
        return Ok(doc! {"n": 0});
    }
    crate::control::ops::check_before_write()?;
    // What a retry of the command that moved the document must answer: `record` (a
    // `findAndModify` reply), else the update's outcome.
    let record = match cmd.get_document("record") {
        Ok(r) => bson::Bson::Document(r.clone()),
        Err(_) => Outcome {
            matched: 1,
            modified: 1,
            upserted_id: None,
        }
        .record(),
    };
    ctx.record(|| record);
    // The move's intent, if the router recorded one, goes in the same write: a move is
    // either still to finish (intent here) or done (document and intent gone).
    let intent_key = crate::migrations::doc_moves::key(&meta, id);
    let mut also = WriteBatch::default();
    if ctx
        .engine
        .get(crate::migrations::doc_moves::TABLE, &intent_key)
        .map_err(crate::error::storage_to_mongo)?
        .is_some()
    {
        also.delete(crate::migrations::doc_moves::TABLE, intent_key);
    }
    delete_document_with(ctx.engine, &meta, expected, also)?;
    Ok(doc! {"n": 1})
}
