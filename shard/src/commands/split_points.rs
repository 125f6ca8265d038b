//! `_shardsvrSplitPoints`: where to split a range so that no part holds more than
//! `maxBytes` of documents (the balancer's automatic split by size). Reads the range's
//! key values once, in key order, and returns the key starting each new part.

use bson::{doc, Bson, Document};
use query::order::compare_arrays;
use storage::KeyRange;
use wire::{MongoError, MongoResult};

use crate::error::storage_to_mongo;
use crate::execution::write_path::decode_document;
use crate::migrations::migration::{in_range, owned, range};
use crate::node::Ctx;

const PAGE: usize = 1024;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (meta, owner) = owned(ctx, cmd)?;
    let (min, max) = range(cmd)?;
    let max_bytes = super::args::opt_i64(cmd, "maxBytes")?
        .filter(|b| *b > 0)
        .ok_or_else(|| MongoError::bad_value("'maxBytes' must be a positive number"))?;
    let mut keys: Vec<(Vec<Bson>, usize)> = Vec::new();
    let mut scan = KeyRange::all();
    loop {
        crate::control::ops::check_interrupted()?;
        let page = ctx
            .engine
            .scan(&meta.table, &scan, false, PAGE)
            .map_err(storage_to_mongo)?;
        let done = page.len() < PAGE;
        for (k, v) in &page {
            let d = decode_document(v)?;
            if in_range(&owner, &d, &min, &max) {
                keys.push((owner.key.value_of(&d)?, v.len()));
            }
            scan.start = std::ops::Bound::Excluded(k.clone());
        }
        if done {
            break;
        }
    }
    keys.sort_by(|a, b| compare_arrays(&a.0, &b.0));
    let total: usize = keys.iter().map(|(_, n)| n).sum();
    let mut points: Vec<Bson> = Vec::new();
    let mut part = 0usize;
    for (i, (key, n)) in keys.iter().enumerate() {
        // A part never ends between equal keys: a key value cannot be split.
        let new_key = i > 0 && compare_arrays(&keys[i - 1].0, key).is_lt();
        if part >= max_bytes as usize && new_key {
            points.push(Bson::Array(key.clone()));
            part = 0;
        }
        part += n;
    }
    Ok(doc! {"points": points, "size": total as i64, "count": keys.len() as i64})
}
