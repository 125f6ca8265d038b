//! `serverStatus` on a member: its admission pools (tickets, free, queued, whether the
//! read count is probed, the mean ticket hold), its operations and its open
//! transactions, so the router's `serverStatus` can show where commands wait on each
//! member right now.

use bson::{doc, Document};
use wire::MongoResult;

use crate::control::admission::Pool;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let node = ctx.node;
    let a = &node.admission;
    let pool = |p: &Pool| {
        doc! {
            "tickets": p.limit() as i64,
            "available": p.available() as i64,
            "queued": p.queued() as i64,
            "meanTicketHoldMicros": p.mean_service().as_micros() as i64,
        }
    };
    let mut read = pool(&a.reads);
    read.insert("probing", a.probing());
    Ok(doc! {
        "host": node.host_name(),
        "admission": {"read": read, "write": pool(&a.writes)},
        "operations": {
            "inProgress": node.ops.all().len() as i64,
            "interruptedTotal": node.ops.interrupted_total() as i64,
        },
        "transactions": {"currentOpen": node.transactions.len() as i64},
    })
}
