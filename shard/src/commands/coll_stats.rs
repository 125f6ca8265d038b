//! `collStats` (deprecated in MongoDB but still used by tools) and the data behind `$collStats`.

use bson::{doc, Document};
use wire::MongoResult;

use super::args::{collection_name, existing_or};
use crate::catalog::CollectionMeta;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let meta = existing_or(ctx, coll, |ns| format!("Collection [{ns}] not found."))?;
    storage_stats(ctx, &meta)
}

/// Sizes and counts in collStats' shape.
pub fn storage_stats(ctx: &Ctx, meta: &CollectionMeta) -> MongoResult<Document> {
    let engine = ctx.engine;
    let s = engine
        .stats(&meta.table)
        .map_err(crate::error::storage_to_mongo)?;
    let mut index_sizes = Document::new();
    let mut total_index = 0i64;
    index_sizes.insert("_id_", 0i64);
    for i in &meta.indexes {
        let b = engine.stats(&i.table).map(|s| s.bytes as i64).unwrap_or(0);
        total_index += b;
        index_sizes.insert(i.name.clone(), b);
    }
    let count = s.entries as i64;
    let size = s.bytes as i64;
    Ok(doc! {
        "ns": meta.ns(), "count": count, "size": size,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": size, "nindexes": meta.indexes.len() as i32 + 1,
        "totalIndexSize": total_index, "indexSizes": index_sizes,
        "totalSize": size + total_index, "capped": false,
    })
}
