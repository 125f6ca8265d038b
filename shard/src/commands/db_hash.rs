//! `dbHash`: an MD5 of each collection of a database and one over them all, in mongod's
//! reply shape, so that the members of a replica set can be compared.
//!
//! A collection's hash covers its documents, each as the BSON stored, in `_id` order (the
//! order of its record table, which is the same on every member), followed by the
//! definition of each secondary index (its `listIndexes` document) in catalog order. A
//! collection without secondary indexes hashes exactly as mongod hashes it (an empty one
//! is `d41d8cd98f00b204e9800998ecf8427e`). Index entries are not covered: `validate`
//! checks them against the documents. `md5` is the MD5 of every collection's name and
//! hash, in name order, as mongod computes it.
//!
//! Each collection is read under its write lock, held exclusively, as mongod holds its
//! database's lock: on a primary no write lands in it meanwhile. A secondary applies
//! replicated writes without that lock, so compare members once writes have stopped.

use std::time::Instant;

use bson::{doc, Bson, Document};
use md5::{Digest, Md5};
use wire::{MongoError, MongoResult};

use super::args::opt_array;
use crate::catalog::CollectionMeta;
use crate::execution::scan::each_row;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let started = Instant::now();
    let wanted = wanted_collections(cmd)?;
    let (mut hashes, mut uuids, mut capped) = (Document::new(), Document::new(), Vec::new());
    let mut all = Md5::new();
    ctx.node.await_catalog();
    for meta in ctx.node.catalog.list(ctx.db) {
        if wanted.as_ref().is_some_and(|w| !w.contains(&meta.name)) {
            continue;
        }
        let hash = collection_hash(ctx, &meta)?;
        all.update(meta.name.as_bytes());
        all.update(hash.as_bytes());
        if meta.options.get_bool("capped") == Ok(true) {
            capped.push(meta.name.clone());
        }
        uuids.insert(meta.name.clone(), meta.uuid);
        hashes.insert(meta.name.clone(), hash);
    }
    let millis = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
    Ok(doc! {
        "host": ctx.node.host_name(), "collections": hashes, "capped": capped,
        "uuids": uuids, "md5": hex(&all.finalize()), "timeMillis": millis,
    })
}

/// The `collections` filter: `None` hashes every collection.
fn wanted_collections(cmd: &Document) -> MongoResult<Option<Vec<String>>> {
    let Some(names) = opt_array(cmd, "collections")? else {
        return Ok(None);
    };
    names
        .iter()
        .map(|n| match n {
            Bson::String(s) => Ok(s.clone()),
            _ => Err(MongoError::bad_value(
                "collections entries have to be strings",
            )),
        })
        .collect::<MongoResult<Vec<String>>>()
        .map(Some)
}

/// The MD5 (hex) of `meta`'s documents in `_id` order, then of its secondary indexes'
/// definitions.
fn collection_hash(ctx: &Ctx, meta: &CollectionMeta) -> MongoResult<String> {
    let _quiet = ctx.node.catalog.exclusive(&meta.write_lock);
    let mut md5 = Md5::new();
    each_row(ctx.engine, &meta.table, &ctx.deadline, |_, document| {
        md5.update(document);
        Ok(())
    })?;
    for index in &meta.indexes {
        let mut spec = Vec::new();
        index
            .spec
            .to_writer(&mut spec)
            .map_err(|e| MongoError::internal(format!("index {}: {e}", index.name)))?;
        md5.update(&spec);
    }
    Ok(hex(&md5.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
