//! `_shardsvrMoveClone`: one batch of a range's documents, in `_id` order from `after`
//! (the last record key of the previous batch), for the recipient of a migration.
//! Orphans are included: the range is read as stored. Without `min` and `max`, the whole
//! collection, sharded or not (`movePrimary` copies unsharded collections).

use std::ops::Bound;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use storage::KeyRange;
use wire::MongoResult;

use super::args::{collection_name, existing_or};
use crate::error::storage_to_mongo;
use crate::execution::write_path::decode_document;
use crate::migrations::migration::{expect_version, in_range, owned, range};
use crate::node::Ctx;

/// A batch stops at this many bytes of documents, well under the 16 MB reply limit.
const BATCH_BYTES: usize = 4 << 20;
/// Records read per storage scan call.
const PAGE: usize = 512;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (meta, range) = if cmd.contains_key("min") {
        let (meta, owner) = owned(ctx, cmd)?;
        expect_version(&meta, &owner, cmd)?;
        (meta, Some((owner, range(cmd)?)))
    } else {
        let coll = collection_name(cmd)?;
        let meta = existing_or(ctx, coll, |ns| format!("{ns} does not exist"))?;
        (meta, None)
    };
    let mut scan = KeyRange::all();
    if let Ok(after) = cmd.get_binary_generic("after") {
        scan.start = Bound::Excluded(after.clone());
    }
    let mut docs = Vec::new();
    let mut bytes = 0;
    let mut last: Option<Vec<u8>> = None;
    let mut done = false;
    while bytes < BATCH_BYTES {
        crate::control::ops::check_interrupted()?;
        let page = ctx
            .engine
            .scan(&meta.table, &scan, false, PAGE)
            .map_err(storage_to_mongo)?;
        done = page.len() < PAGE;
        for (k, v) in page {
            let d = decode_document(&v)?;
            if range
                .as_ref()
                .is_none_or(|(owner, (min, max))| in_range(owner, &d, min, max))
            {
                bytes += v.len();
                docs.push(d);
            }
            last = Some(k);
        }
        match &last {
            Some(k) if !done => scan.start = Bound::Excluded(k.clone()),
            _ => break,
        }
    }
    let next = match (done, last) {
        (false, Some(k)) => Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: k,
        }),
        _ => Bson::Null,
    };
    Ok(doc! {"docs": docs, "next": next})
}
