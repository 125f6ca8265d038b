//! `_shardsvrRangeReaders: coll, uuid, min, max`: how many ownerships of the collection
//! that own part of `[min, max)` are still read with on this member. A donor's primary
//! asks its secondaries before deleting a range that migrated away (`range_deleter`): a
//! cursor opened on a secondary before the migration committed keeps reading the range
//! there, and the deletion, once replicated, would pull its later batches from under it.
//!
//! The member's current ownership counts when it still owns part of the range: this
//! member has not applied the migration's commit yet, so its newest cursors read the
//! range too. Runs in any member state; it reads only memory.

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use super::args::collection_name;
use crate::migrations::migration::range;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let ns = format!("{}.{}", ctx.db, collection_name(cmd)?);
    let uuid = cmd
        .get_binary_generic("uuid")
        .map_err(|_| MongoError::failed_to_parse("'uuid' must be the collection's UUID"))?;
    let (min, max) = range(cmd)?;
    let Some(meta) = ctx
        .node
        .catalog
        .get(&ns)
        .filter(|m| m.uuid.bytes().as_slice() == uuid.as_slice())
    else {
        // Not here (dropped, or not yet created): nothing here reads it.
        return Ok(doc! {"readers": 0});
    };
    let older = meta
        .older_readers()
        .iter()
        .filter(|o| o.owns_part_of(&min, &max))
        .count();
    let behind = meta
        .ownership
        .as_ref()
        .is_some_and(|o| o.owns_part_of(&min, &max));
    Ok(doc! {"readers": (older + usize::from(behind)) as i64})
}
