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
    if let Some(at) = reach_time(cmd)? {
        // A router merging change streams waits on this member's events up to `at`.
        let replica = super::args::replica(ctx)?;
        let reached = replica.reach_time(at, std::time::Duration::from_secs(5));
        if let Err(e) = reached {
            ctx.node.cursors.park(id, ns.clone(), source, false)?;
            return Err(e.into());
        }
    }
    source.await_data(opt_count(cmd, "maxTimeMS")?.map(std::time::Duration::from_millis));
    batch_reply(ctx.node, &ns, source, Some(id), max, false, &ctx.deadline)
}

/// The cluster time a router's change-stream `getMore` asks this member to reach first.
fn reach_time(cmd: &Document) -> MongoResult<Option<u64>> {
    match cmd.get("$_reachTime") {
        None => Ok(None),
        Some(Bson::Timestamp(t)) => Ok(Some((u64::from(t.time) << 32) | u64::from(t.increment))),
        Some(_) => Err(MongoError::type_mismatch("$_reachTime must be a timestamp")),
    }
}
