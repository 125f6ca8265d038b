//! `_shardsvrReachTime: 1, time: <Timestamp>`: a router merging change streams asks this
//! set to reach a cluster time, so that its stream's `postBatchResumeToken` passes an
//! event another shard returned at that time. The primary replicates one empty entry
//! after the time if nothing later applied (`Replica::reach_time`), which also wakes the
//! router's waiting `getMore` on this shard.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::replica;
use crate::node::Ctx;

/// How long the primary waits for its entry to be applied.
const REACH_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let at = match cmd.get("time") {
        Some(Bson::Timestamp(t)) => (u64::from(t.time) << 32) | u64::from(t.increment),
        _ => return Err(MongoError::type_mismatch("'time' must be a timestamp")),
    };
    let reached = replica(ctx)?.reach_time(at, REACH_WITHIN)?;
    let mut reply = Document::new();
    reply.insert("reached", reached);
    Ok(reply)
}
