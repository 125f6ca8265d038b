//! What the migration commands share: the range they name, the collection's ownership,
//! and installing a new ownership through the replicated catalog.
//!
//! The config server primary coordinates a migration (`configsvr/src/migrate.rs`); the
//! shards only do the steps it asks for: the donor records changes, hands out the range's
//! documents and changes, enters its critical section and deletes the range once it is
//! no longer its own; the recipient applies what it is sent. Documents a shard holds
//! outside its ranges are orphans, which reads skip (see `execution/scan.rs`).

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use query::order::compare_arrays;
use query::ownership::{Ownership, ShardVersion};
use query::shard_key::KeyValue;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::catalog::CollectionMeta;
use crate::commands::args::collection_name;
use crate::node::Ctx;
use crate::repl::events::Kind;

/// A migration step names the collection version its coordinator began at: refused with
/// `ConflictingOperationInProgress` once this shard holds another. A router that recovers
/// an abandoned migration moves the version on first, so a coordinator that stalled past
/// its lease cannot change anything here afterwards. Steps without a version (`null`:
/// tests, tools, a coordinator that still holds its lock) are not checked.
pub fn expect_version(meta: &CollectionMeta, owner: &Ownership, cmd: &Document) -> MongoResult<()> {
    let Some(v) = cmd.get("version").filter(|v| **v != Bson::Null) else {
        return Ok(());
    };
    let expected = ShardVersion::from_document(
        v.as_document()
            .ok_or_else(|| MongoError::failed_to_parse("'version' must be an object"))?,
    )?;
    if owner.version == expected {
        return Ok(());
    }
    Err(MongoError::new(
        ErrorCode::ConflictingOperationInProgress,
        format!(
            "{} is at version {:?}, not {:?}: the migration's state changed",
            meta.ns(),
            owner.version.version,
            expected.version
        ),
    ))
}

/// `[min, max)` as the command gives it (`min` and `max`: arrays of key values).
pub fn range(cmd: &Document) -> MongoResult<(KeyValue, KeyValue)> {
    let bound = |f: &str| {
        cmd.get_array(f).cloned().map_err(|_| {
            MongoError::failed_to_parse(format!("'{f}' must be an array of key values"))
        })
    };
    Ok((bound("min")?, bound("max")?))
}

/// Whether `doc`'s key value lies in `[min, max)`.
pub fn in_range(owner: &Ownership, doc: &Document, min: &[Bson], max: &[Bson]) -> bool {
    owner.key.value_of(doc).is_ok_and(|k| {
        compare_arrays(&k, min) != Ordering::Less && compare_arrays(&k, max) == Ordering::Less
    })
}

/// The collection the command names and this shard's ownership of it.
pub fn owned(ctx: &Ctx, cmd: &Document) -> MongoResult<(Arc<CollectionMeta>, Arc<Ownership>)> {
    let coll = collection_name(cmd)?;
    let ns = format!("{}.{coll}", ctx.db);
    let meta = ctx.node.catalog.get(&ns).ok_or_else(|| {
        MongoError::new(ErrorCode::NamespaceNotFound, format!("{ns} does not exist"))
    })?;
    let owner = meta.ownership.clone().ok_or_else(|| {
        MongoError::new(
            ErrorCode::IllegalOperation,
            format!("{ns} is not sharded on this shard"),
        )
    })?;
    Ok((meta, owner))
}

/// Replaces the ownership of `meta`'s collection (the caller holds its write lock). The
/// first ownership of a collection that owns chunks here (the database's primary shard,
/// when the collection is sharded) records the `shardCollection` change event.
pub fn install(ctx: &Ctx, meta: &CollectionMeta, ownership: Ownership) -> MongoResult<()> {
    let sharded_here = meta.ownership.is_none() && !ownership.ranges.is_empty();
    let key = ownership.key.pattern().clone();
    let updated = meta.with_ownership(ownership);
    let mut batch = storage::WriteBatch::default();
    ctx.node.catalog.stage(&mut batch, &updated);
    if sharded_here {
        let detail = doc! {"shardKey": key, "unique": false, "presplitHashedZones": false};
        crate::execution::change_events::ddl(
            &mut batch,
            (Kind::ShardCollection, &meta.ns(), Some(meta.uuid)),
            Some(&detail),
        );
    }
    ctx.engine
        .write(&batch)
        .map_err(crate::error::storage_to_mongo)?;
    ctx.node.catalog.install(updated);
    Ok(())
}

/// The documents stored under `ids`, as they are now (`None`: deleted).
pub fn current(
    ctx: &Ctx,
    meta: &CollectionMeta,
    ids: &[Bson],
) -> MongoResult<Vec<(Bson, Option<Document>)>> {
    ids.iter()
        .map(|id| {
            let stored = ctx
                .engine
                .get(&meta.table, &crate::catalog::keys::id_key(id))
                .map_err(crate::error::storage_to_mongo)?;
            let doc = stored
                .map(|b| crate::execution::write_path::decode_document(&b))
                .transpose()?;
            Ok((id.clone(), doc))
        })
        .collect()
}
