//! `drop`: remove a collection and its indexes. Dropping a missing collection succeeds (7.0+).

use bson::{doc, Document};
use wire::MongoResult;

use super::args::{collection_name, ns};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let ns = ns(ctx, coll);
    let Some(meta) = ctx.node.catalog.get(&ns) else {
        return Ok(Document::new());
    };
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let dropped = ctx.node.catalog.drop_collection(ctx.engine, &ns)?;
    let was = dropped.map(|m| m.indexes.len() as i32 + 1).unwrap_or(0);
    Ok(doc! {"nIndexesWas": was, "ns": ns})
}
