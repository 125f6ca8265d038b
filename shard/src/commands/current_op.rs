//! `currentOp` on a member: every operation in progress here, with the phase it is in
//! and how long it has queued, run and waited for replication so far. The router joins
//! these entries to its own (`routerOpid`).

use bson::{doc, Bson, Document};
use wire::MongoResult;

use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let host = ctx.node.host_name();
    let inprog: Vec<Bson> = ctx
        .node
        .ops
        .all()
        .iter()
        // The request asking is not one of the operations it asks about.
        .filter(|op| op.describe.name != "currentOp")
        .map(|op| Bson::Document(op.to_document(&host)))
        .collect();
    Ok(doc! {
        "inprog": inprog,
        "interruptedTotal": ctx.node.ops.interrupted_total() as i64,
    })
}
