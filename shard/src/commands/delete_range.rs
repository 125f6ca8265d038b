//! `_shardsvrDeleteRange`: deletes one batch of a range's documents that this shard does
//! not own: the donor's copy after a migration committed, or the recipient's partial
//! copy after one was abandoned. A document the shard owns is never deleted here.

use bson::{doc, Document};
use storage::{KeyRange, WriteBatch};
use wire::MongoResult;

use crate::error::storage_to_mongo;
use crate::migration::{in_range, owned, range};
use crate::node::Ctx;
use crate::write_path::{decode_document, stage_delete};

/// Documents deleted per call (one replicated batch).
const BATCH: usize = 500;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (meta, _) = owned(ctx, cmd)?;
    let (min, max) = range(cmd)?;
    let lock = meta.write_lock.clone();
    let _guard = lock.write().unwrap();
    let (meta, owner) = owned(ctx, cmd)?;
    let mut scan = KeyRange::all();
    let mut batch = WriteBatch::default();
    let mut deleted = 0usize;
    let mut more = true;
    while deleted < BATCH && more {
        crate::ops::check_interrupted()?;
        let page = ctx
            .engine
            .scan(&meta.table, &scan, false, BATCH)
            .map_err(storage_to_mongo)?;
        more = page.len() == BATCH;
        for (k, v) in &page {
            let d = decode_document(v)?;
            if in_range(&owner, &d, &min, &max) && !owner.owns(&d) {
                stage_delete(&meta, &d, &mut batch)?;
                deleted += 1;
            }
            scan.start = std::ops::Bound::Excluded(k.clone());
        }
    }
    if deleted > 0 {
        crate::ops::check_before_write()?;
        ctx.engine.write_owned(batch).map_err(storage_to_mongo)?;
    }
    Ok(doc! {"deleted": deleted as i64, "more": more})
}
