//! `_shardsvrBeginMove: coll, pre, post, session, record`: records on the donor that the
//! router is about to move the document `pre` (as `post`) to the shard owning `post`'s
//! key, for the statement of the retryable write `session` (`lsid`, `txnNumber`,
//! `stmtIds`), answering it with `record` when given (a `findAndModify` reply). Only if
//! the stored document is still exactly `pre` and no other move of it is in flight:
//! `began: false` otherwise, and the router starts the update again. See `doc_moves`.

use bson::{doc, Document};
use storage::WriteBatch;
use wire::{MongoError, MongoResult};

use super::args::{collection_name, existing};
use crate::error::storage_to_mongo;
use crate::migrations::doc_moves::{key, stored_exactly, TABLE};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let doc_field = |f: &str| {
        cmd.get_document(f)
            .map_err(|_| MongoError::failed_to_parse(format!("'{f}' must be a document")))
    };
    let (pre, post, session) = (doc_field("pre")?, doc_field("post")?, doc_field("session")?);
    let id = pre
        .get("_id")
        .ok_or_else(|| MongoError::failed_to_parse("'pre' has no _id"))?;
    let Some(meta) = existing(ctx, coll) else {
        return Ok(doc! {"began": false});
    };
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    let unchanged = stored_exactly(ctx.engine, &meta, pre)?;
    let intent_key = key(&meta, id);
    let in_flight = ctx
        .engine
        .get(TABLE, &intent_key)
        .map_err(storage_to_mongo)?
        .is_some();
    if !unchanged || in_flight {
        return Ok(doc! {"began": false});
    }
    let mut intent = doc! {
        "db": ctx.db, "coll": coll, "uuid": meta.uuid, "pre": pre.clone(), "post": post.clone(),
        "session": session.clone(), "since": bson::DateTime::now(),
    };
    if let Ok(r) = cmd.get_document("record") {
        intent.insert("record", r.clone());
    }
    let bytes = bson::to_vec(&intent)
        .map_err(|e| MongoError::internal(format!("encoding the move: {e}")))?;
    crate::control::ops::check_before_write()?;
    let mut batch = WriteBatch::default();
    batch.put(TABLE, intent_key, bytes);
    ctx.engine.write_owned(batch).map_err(storage_to_mongo)?;
    Ok(doc! {"began": true})
}
