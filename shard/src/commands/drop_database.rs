//! `dropDatabase`: drop every collection of the database, and what a `movePrimary` left
//! here about it (the router then records the dropped version on every shard).

use bson::{doc, Document};
use wire::MongoResult;

use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    for meta in ctx.node.catalog.list(ctx.db) {
        let lock = meta.write_lock.clone();
        let _guard = ctx.node.catalog.exclusive(&lock);
        ctx.node.catalog.drop_collection(ctx.engine, &meta.ns())?;
    }
    ctx.node.catalog.clear_placement(ctx.engine, ctx.db)?;
    Ok(doc! {"dropped": ctx.db})
}
