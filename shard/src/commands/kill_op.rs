//! `killOp` on a member: tells one operation to stop. A queued operation leaves the queue
//! at once; a running one stops at its next yield point with `Interrupted` (11601).

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use super::args::opt_count;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let opid = opt_count(cmd, "op")?.ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'killOp.op' is missing but a required field")
    })?;
    // mongod answers the same whether or not the operation was still running.
    let found = ctx.node.ops.kill(opid);
    Ok(doc! {"info": "attempting to kill op", "found": found})
}
