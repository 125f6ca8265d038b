//! `_shardsvrApplyMoved`: the recipient of a migration stores documents of the range
//! (inserted, or replacing the copy it has) and deletes the ids the donor reports gone.
//! The range is not yet this shard's, so what it holds of it stays invisible to reads.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, create_on_write, opt_array};
use crate::catalog::CollectionMeta;
use crate::execution::write_path::{delete_document, insert_documents, replace_document};
use crate::migrations::migration::{current, expect_version, range};
use crate::migrations::range_deleter::pending_overlaps;
use crate::node::Ctx;

/// Documents that arrive by migration produce no change events: they moved, and the
/// donor's stream already showed how they came to be.
pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    crate::repl::events::silent(|| apply(ctx, cmd))
}

fn apply(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let docs: Vec<Document> = opt_array(cmd, "docs")?
        .map(|a| a.iter().filter_map(|d| d.as_document().cloned()).collect())
        .unwrap_or_default();
    let deletes: Vec<Bson> = opt_array(cmd, "deletes")?.cloned().unwrap_or_default();
    let meta = create_on_write(ctx, coll)?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    if cmd.contains_key("min") {
        arriving_range_is_clear(ctx, &meta, cmd)?;
    }
    let ids: Vec<Bson> = docs
        .iter()
        .map(|d| {
            d.get("_id")
                .cloned()
                .ok_or_else(|| MongoError::internal("moved document without _id"))
        })
        .collect::<MongoResult<_>>()?;
    let mut fresh = Vec::new();
    for ((_, old), new) in current(ctx, &meta, &ids)?.into_iter().zip(docs) {
        match old {
            Some(old) => {
                replace_document(ctx.engine, &ctx.node.catalog, &meta, (&old, &new), None)?
            }
            None => fresh.push(new),
        }
    }
    let failed = insert_documents(ctx.engine, &ctx.node.catalog, &meta, &fresh, true, &|_| {});
    if let Some((_, e)) = failed.into_iter().next() {
        return Err(e);
    }
    for (_, old) in current(ctx, &meta, &deletes)? {
        if let Some(old) = old {
            delete_document(ctx.engine, &meta, &old)?;
        }
    }
    Ok(doc! {"applied": (ids.len() + deletes.len()) as i64})
}

/// A migration's documents may arrive only at the coordinator's version (see
/// `expect_version`) and only into a range no waiting deletion covers.
fn arriving_range_is_clear(ctx: &Ctx, meta: &CollectionMeta, cmd: &Document) -> MongoResult<()> {
    let (min, max) = range(cmd)?;
    if let Some(owner) = &meta.ownership {
        expect_version(meta, owner, cmd)?;
    }
    if pending_overlaps(ctx.engine, meta, &min, &max)? {
        return Err(MongoError::new(
            ErrorCode::ConflictingOperationInProgress,
            format!(
                "{}: a deletion of an overlapping range still waits for older readers on this \
                 shard; the migration can run once it is done",
                meta.ns()
            ),
        ));
    }
    Ok(())
}
