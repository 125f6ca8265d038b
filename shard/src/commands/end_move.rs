//! `_shardsvrEndMove: coll, id`: forgets the intent to move document `id` (see
//! `doc_moves`), once a move found the document changed and undid its insert on the
//! recipient. A completed move needs no call: its delete removed the intent.

use bson::doc;
use bson::Document;
use storage::WriteBatch;
use wire::{MongoError, MongoResult};

use super::args::{collection_name, existing};
use crate::error::storage_to_mongo;
use crate::migrations::doc_moves::{key, TABLE};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let id = cmd
        .get("id")
        .ok_or_else(|| MongoError::failed_to_parse("'id' must be the moved document's _id"))?;
    let Some(meta) = existing(ctx, coll) else {
        return Ok(doc! {"n": 0});
    };
    let intent_key = key(&meta, id);
    if ctx
        .engine
        .get(TABLE, &intent_key)
        .map_err(storage_to_mongo)?
        .is_none()
    {
        return Ok(doc! {"n": 0});
    }
    crate::control::ops::check_before_write()?;
    let mut batch = WriteBatch::default();
    batch.delete(TABLE, intent_key);
    ctx.engine.write_owned(batch).map_err(storage_to_mongo)?;
    Ok(doc! {"n": 1})
}
