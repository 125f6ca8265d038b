//! `_shardsvrMoveMods`: the changes to a migrating range since the last call, as the
//! documents are now: `upserts` (in the range) and `deletes` (ids gone, or moved out of
//! the range). Fails when this member is not recording, so the migration is abandoned
//! rather than missing a change: the coordinator asks only while it keeps the donor
//! recording, so a primary that is not recording became primary (or restarted) after the
//! migration began, and the reply says so with `InterruptedDueToReplStateChange`, which
//! a caller retries, as MongoDB's `moveChunk` fails when its donor steps down.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::migrations::migration::{current, expect_version, in_range, owned, range};
use crate::node::Ctx;

/// Changes returned per call; the rest wait for the next.
const MAX_CHANGES: usize = 1000;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (meta, owner) = owned(ctx, cmd)?;
    expect_version(&meta, &owner, cmd)?;
    let (min, max) = range(cmd)?;
    let ids = meta.moves.drain(MAX_CHANGES).ok_or_else(|| {
        MongoError::new(
            ErrorCode::InterruptedDueToReplStateChange,
            format!(
                "no migration of {} is recording on this member: its primary changed after \
                 the migration began; retry it",
                meta.ns()
            ),
        )
    })?;
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    for (id, doc) in current(ctx, &meta, &ids)? {
        match doc {
            Some(d) if in_range(&owner, &d, &min, &max) => upserts.push(Bson::Document(d)),
            _ => deletes.push(id),
        }
    }
    Ok(doc! {"upserts": upserts, "deletes": deletes, "pending": meta.moves.pending() as i64})
}
