//! `dropDatabase`: drop every collection of the database, and what a `movePrimary` left
//! here about it (the router then records the dropped version on every shard).

use bson::{doc, Document};
use wire::MongoResult;

use storage::WriteBatch;

use crate::error::storage_to_mongo;
use crate::execution::change_events;
use crate::node::Ctx;
use crate::repl::events::Kind;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let collections = ctx.node.catalog.list(ctx.db);
    for meta in &collections {
        let lock = meta.write_lock.clone();
        let _guard = ctx.node.catalog.exclusive(&lock);
        ctx.node.catalog.drop_collection(ctx.engine, &meta.ns())?;
    }
    if !collections.is_empty() {
        // A stream over the database ends with this event (after one drop per collection).
        let mut batch = WriteBatch::new();
        change_events::ddl(&mut batch, (Kind::DropDatabase, ctx.db, None), None);
        ctx.engine.write_owned(batch).map_err(storage_to_mongo)?;
    }
    ctx.node.catalog.clear_placement(ctx.engine, ctx.db)?;
    Ok(doc! {"dropped": ctx.db})
}
