//! `getMore`: the next batch of an open cursor.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::batch_reply;
use super::args::{opt_count, type_name};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(v) => {
            return Err(MongoError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                type_name(v)
            )))
        }
        None => return Err(MongoError::failed_to_parse("missing cursor id")),
    };
    let coll = match cmd.get("collection") {
        Some(Bson::String(c)) => c,
        Some(v) => {
            return Err(MongoError::type_mismatch(format!(
                "BSON field 'getMore.collection' is the wrong type '{}', expected type 'string'",
                type_name(v)
            )))
        }
        None => {
            return Err(MongoError::failed_to_parse(
                "BSON field 'getMore.collection' is missing but a required field",
            ))
        }
    };
    let max = opt_count(cmd, "batchSize")?
        .filter(|&b| b > 0)
        .map(|b| b as usize)
        .unwrap_or(usize::MAX);
    let ns = format!("{}.{}", ctx.db, coll);
    let mut source = ctx.node.cursors.take(id, &ns)?;
    let wait = opt_count(cmd, "maxTimeMS")?.map(std::time::Duration::from_millis);
    // A router merging change streams learns of this member's progress at once.
    let on_progress = matches!(cmd.get(RETURN_ON_PROGRESS), Some(Bson::Boolean(true)));
    source.await_data(wait, on_progress);
    batch_reply(ctx.node, &ns, source, Some(id), max, false, &ctx.deadline)
}

/// The field of a router's change-stream `getMore` that asks for a batch, empty or not, as
/// soon as the stream has read further in the log (its `postBatchResumeToken` moved).
pub const RETURN_ON_PROGRESS: &str = "$_returnOnProgress";
