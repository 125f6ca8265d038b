//! `_shardsvrMoveSessions`: one batch of the donor's session records (retryable-write
//! history), in key order from `after`, for the recipient of a migration. A retry of a
//! write that ran here must find its record on the shard its document now lives on, or
//! it would run twice. Records are not per document, so all of them go (the recipient
//! merges them: `retry::merge_record`).

use std::ops::Bound;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use storage::KeyRange;
use wire::MongoResult;

use crate::error::storage_to_mongo;
use crate::execution::write_path::decode_document;
use crate::node::Ctx;
use crate::sessions::retry::TXN_TABLE;

/// Records per batch.
const BATCH: usize = 1000;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let mut scan = KeyRange::all();
    if let Ok(after) = cmd.get_binary_generic("after") {
        scan.start = Bound::Excluded(after.clone());
    }
    let page = ctx
        .engine
        .scan(TXN_TABLE, &scan, false, BATCH)
        .map_err(storage_to_mongo)?;
    let binary = |bytes: Vec<u8>| {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes,
        })
    };
    let next = match page.last() {
        Some((k, _)) if page.len() == BATCH => binary(k.clone()),
        _ => Bson::Null,
    };
    let records = page
        .into_iter()
        .map(|(k, v)| {
            Ok(Bson::Document(
                doc! {"k": binary(k), "v": decode_document(&v)?},
            ))
        })
        .collect::<MongoResult<Vec<_>>>()?;
    Ok(doc! {"records": records, "next": next})
}
