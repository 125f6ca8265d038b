//! `dbStats`: collection, object and size totals for one database.

use bson::{doc, Document};
use wire::MongoResult;

use super::coll_stats::storage_stats;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let (mut objects, mut data, mut indexes, mut index_size) = (0i64, 0i64, 0i64, 0i64);
    let colls = ctx.node.catalog.list(ctx.db);
    for meta in &colls {
        let s = storage_stats(ctx, meta)?;
        objects += s.get_i64("count").unwrap_or(0);
        data += s.get_i64("size").unwrap_or(0);
        indexes += i64::from(s.get_i32("nindexes").unwrap_or(0));
        index_size += s.get_i64("totalIndexSize").unwrap_or(0);
    }
    Ok(doc! {
        "db": ctx.db, "collections": colls.len() as i64, "views": 0i64, "objects": objects,
        "avgObjSize": if objects > 0 { data as f64 / objects as f64 } else { 0.0 },
        "dataSize": data, "storageSize": data, "indexes": indexes, "indexSize": index_size,
        "totalSize": data + index_size, "scaleFactor": 1i64,
    })
}
