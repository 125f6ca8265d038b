//! Deleting a range this shard no longer owns (the donor's copy after a migration, the
//! recipient's partial copy after an abandoned one) without pulling documents from under
//! a reader that still reads at an older ownership.
//!
//! A cursor keeps the ownership it was opened with (`execution/scan.rs`), so a cursor
//! opened on the donor before a migration committed still returns the moved range, and
//! only from here: the recipient's cursors, at the same old version, skip it. Deleting the
//! range while such a cursor lives would make its later batches miss documents. So a
//! document an older ownership still in use owns (`CollectionMeta::older_readers`) is
//! kept, and the range is recorded in `_range_deletions` (replicated, so a new primary
//! finishes it); the background pass (`run_pending`) deletes it once those readers are
//! gone, as MongoDB's range deleter waits for queries that began before the migration.
//!
//! The same holds on the donor's secondaries, which serve cursors of their own
//! (`readPreference: secondary`, site-local reads) and apply the deletion once it is
//! replicated. So before deleting, the primary asks each of them whether anything there
//! still reads the range (`_shardsvrRangeReaders`), and leaves the range to the
//! background pass while one does. A member it cannot reach may be serving a cursor to a
//! router in its own site; the range waits for it up to `UNREACHABLE_WAIT`, MongoDB's
//! `orphanCleanupDelaySecs` default (the time mongod gives secondaries' queries).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, spec::BinarySubtype, Binary};
use query::ownership::Ownership;
use query::shard_key::KeyValue;
use storage::{Engine, KeyRange, WriteBatch};
use wire::{MongoError, MongoResult};

use super::migration::in_range;
use crate::catalog::CollectionMeta;
use crate::error::storage_to_mongo;
use crate::execution::write_path::{decode_document, stage_delete};
use crate::Node;

/// Ranges waiting for older readers, one record per range.
pub const TABLE: &str = "_range_deletions";
/// Documents deleted per batch (one replicated write).
const BATCH: usize = 500;
/// How long a deletion request waits for commands still reading at an older ownership
/// before it leaves the range to the background pass: a command in flight ends within
/// moments; a cursor may live for minutes.
const READERS_WAIT: Duration = Duration::from_secs(1);
/// How long a range waits for a secondary this primary cannot reach.
pub const UNREACHABLE_WAIT: Duration = Duration::from_secs(900);
/// How long a secondary has to answer whether it still reads a range.
const ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// What the donor's secondaries say of a range about to be deleted.
#[derive(Debug, PartialEq, Eq)]
pub enum SecondaryReaders {
    /// None of them reads it (or there are none).
    None,
    /// One still reads it (a cursor, or a member that has not applied the commit yet).
    Reading,
    /// One could not be asked.
    Unknown,
}

/// Asks the other data-bearing members of this shard's replica set whether anything there
/// still reads `[min, max)` of `meta`'s collection. Blocks up to `ASK_TIMEOUT`.
pub fn secondary_readers(
    node: &Node,
    meta: &CollectionMeta,
    min: &KeyValue,
    max: &KeyValue,
) -> SecondaryReaders {
    let Some(replica) = node.replica.as_ref() else {
        return SecondaryReaders::None;
    };
    let ask = doc! {
        "_shardsvrRangeReaders": &meta.name,
        "uuid": uuid_binary(meta),
        "min": min.clone(),
        "max": max.clone(),
    };
    let mut verdict = SecondaryReaders::None;
    for (member, answer) in replica.peers.ask_all(&meta.db, &ask, ASK_TIMEOUT) {
        let answer = answer.map(|d| {
            (
                d.get_f64("ok").is_ok_and(|ok| ok == 1.0),
                crate::commands::args::opt_i64(&d, "readers").ok().flatten(),
            )
        });
        match answer {
            Ok((true, Some(n))) => {
                if n > 0 {
                    tracing::debug!(member, ns = %meta.ns(), n, "a secondary still reads a range to delete");
                    return SecondaryReaders::Reading;
                }
            }
            Ok(_) | Err(_) => verdict = SecondaryReaders::Unknown,
        }
    }
    verdict
}

/// The collection's UUID as generic binary (what `get_binary_generic` reads back).
fn uuid_binary(meta: &CollectionMeta) -> Binary {
    Binary {
        subtype: BinarySubtype::Generic,
        bytes: meta.uuid.bytes().to_vec(),
    }
}

/// What one batch did.
pub struct Batch {
    pub deleted: usize,
    /// More of the range may remain: call again, from `next`.
    pub more: bool,
    /// The last record key this batch looked at: the next batch starts after it, so a
    /// range's deletion reads the collection once rather than once per batch.
    pub next: Option<Vec<u8>>,
    /// Documents were kept because an older reader may still return them.
    pub kept: bool,
}

/// Waits, up to `READERS_WAIT`, until nothing reads `meta`'s collection at an older
/// ownership.
pub fn wait_for_older_readers(meta: &CollectionMeta) {
    let until = Instant::now() + READERS_WAIT;
    while !meta.older_readers().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Deletes one batch of `[min, max)` that `owner` (the current ownership) does not own and
/// no older reader owns, looking at records after `after` (from the start if `None`).
/// The caller holds the collection's write lock. Nothing lands in the range meanwhile
/// (writes to a range a shard does not own are refused, and so are migrations into one
/// whose deletion waits), so what a batch passed over stays done.
pub fn delete_batch(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    owner: &Ownership,
    min: &KeyValue,
    max: &KeyValue,
    after: Option<&[u8]>,
) -> MongoResult<Batch> {
    let older: Vec<Arc<Ownership>> = meta.older_readers();
    let mut scan = KeyRange::all();
    if let Some(after) = after {
        scan.start = std::ops::Bound::Excluded(after.to_vec());
    }
    let mut batch = WriteBatch::default();
    let mut deleted = 0usize;
    let mut kept = false;
    let mut more = true;
    while deleted < BATCH && more {
        crate::control::ops::check_interrupted()?;
        let page = engine
            .scan(&meta.table, &scan, false, BATCH)
            .map_err(storage_to_mongo)?;
        more = page.len() == BATCH;
        for (k, v) in &page {
            let d = decode_document(v)?;
            if in_range(owner, &d, min, max) && !owner.owns(&d) {
                if older.iter().any(|o| o.owns(&d)) {
                    kept = true;
                } else {
                    // A range that left is not a deletion of its documents.
                    crate::repl::events::silent(|| stage_delete(meta, &d, &mut batch))?;
                    deleted += 1;
                }
            }
            scan.start = std::ops::Bound::Excluded(k.clone());
        }
    }
    if deleted > 0 {
        crate::control::ops::check_before_write()?;
        engine.write_owned(batch).map_err(storage_to_mongo)?;
    }
    let next = match &scan.start {
        std::ops::Bound::Excluded(k) if more => Some(k.clone()),
        _ => None,
    };
    Ok(Batch {
        deleted,
        more,
        next,
        kept,
    })
}

fn key(meta: &CollectionMeta, min: &KeyValue) -> MongoResult<Vec<u8>> {
    let mut key = meta.uuid.bytes().to_vec();
    key.extend(
        bson::to_vec(&doc! {"min": min.clone()})
            .map_err(|e| MongoError::internal(format!("range deletion key: {e}")))?,
    );
    Ok(key)
}

/// Records `[min, max)` of `meta`'s collection for the background pass.
pub fn defer(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    min: &KeyValue,
    max: &KeyValue,
) -> MongoResult<()> {
    let key = key(meta, min)?;
    // When it was first deferred: how long an unreachable secondary is waited for, which
    // deferring the same range again must not restart.
    let since = engine
        .get(TABLE, &key)
        .map_err(storage_to_mongo)?
        .and_then(|v| decode_document(&v).ok())
        .and_then(|r| r.get_datetime("since").ok().copied())
        .unwrap_or_else(bson::DateTime::now);
    let record = doc! {
        "ns": meta.ns(),
        "uuid": uuid_binary(meta),
        "min": min.clone(),
        "max": max.clone(),
        "since": since,
    };
    let mut batch = WriteBatch::default();
    batch.put(TABLE, key, bson::to_vec(&record).unwrap());
    engine.write(&batch).map_err(storage_to_mongo)
}

/// Whether a deletion still waiting here overlaps `[min, max)` of `meta`'s collection. A
/// migration must not bring documents into such a range: the waiting deletion would take
/// them once its readers are gone, before the migration commits them (MongoDB's recipient
/// waits for overlapping range deletions for the same reason).
pub fn pending_overlaps(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    min: &KeyValue,
    max: &KeyValue,
) -> MongoResult<bool> {
    let records = engine
        .scan(TABLE, &KeyRange::all(), false, usize::MAX)
        .map_err(storage_to_mongo)?;
    for (_, v) in records {
        let record = decode_document(&v)?;
        let same = record
            .get_binary_generic("uuid")
            .is_ok_and(|u| u.as_slice() == meta.uuid.bytes());
        if let (true, Ok(lo), Ok(hi)) = (same, record.get_array("min"), record.get_array("max")) {
            let cmp = query::order::compare_arrays;
            if cmp(lo, max).is_lt() && cmp(min, hi).is_lt() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// On the primary: deletes every recorded range whose older readers are gone, and forgets
/// ranges of collections that no longer exist. Returns the documents deleted.
pub fn run_pending(node: &Node) -> MongoResult<usize> {
    if node.replica.as_ref().is_some_and(|r| !r.status().writable) {
        return Ok(0);
    }
    let engine = node.engine.as_ref();
    let mut deleted = 0;
    for (k, v) in engine
        .scan(TABLE, &KeyRange::all(), false, usize::MAX)
        .map_err(storage_to_mongo)?
    {
        let record = decode_document(&v)?;
        let ns = record.get_str("ns").unwrap_or_default();
        let uuid = record.get_binary_generic("uuid").ok();
        let meta = node
            .catalog
            .get(ns)
            .filter(|m| uuid.is_some_and(|u| u.as_slice() == m.uuid.bytes()));
        let done = match (meta, record.get_array("min"), record.get_array("max")) {
            (Some(meta), Ok(min), Ok(max)) => {
                let waited = record.get_datetime("since").map_or(UNREACHABLE_WAIT, |t| {
                    Duration::from_millis(
                        (bson::DateTime::now().timestamp_millis() - t.timestamp_millis()).max(0)
                            as u64,
                    )
                });
                match secondary_readers(node, &meta, min, max) {
                    SecondaryReaders::Reading => false,
                    SecondaryReaders::Unknown if waited < UNREACHABLE_WAIT => false,
                    _ => {
                        let (n, finished) = delete_range(node, &meta, min, max)?;
                        deleted += n;
                        finished
                    }
                }
            }
            // The collection was dropped (or is no longer sharded): nothing to delete.
            _ => true,
        };
        if done {
            let mut batch = WriteBatch::default();
            batch.delete(TABLE, k);
            engine.write(&batch).map_err(storage_to_mongo)?;
        }
    }
    Ok(deleted)
}

/// Deletes what it can of the range, batch by batch; whether all of it is gone.
fn delete_range(
    node: &Node,
    meta: &Arc<CollectionMeta>,
    min: &KeyValue,
    max: &KeyValue,
) -> MongoResult<(usize, bool)> {
    let mut deleted = 0;
    let mut after: Option<Vec<u8>> = None;
    let mut kept = false;
    loop {
        let lock = meta.write_lock.clone();
        let _guard = node.catalog.exclusive(&lock);
        // Ownership changes under this lock: read the newest snapshot now.
        let current = match node.catalog.get(&meta.ns()) {
            Some(m) if m.uuid == meta.uuid => m,
            _ => return Ok((deleted, true)),
        };
        let Some(owner) = current.ownership.clone() else {
            return Ok((deleted, true));
        };
        let b = delete_batch(
            node.engine.as_ref(),
            &current,
            &owner,
            min,
            max,
            after.as_deref(),
        )?;
        deleted += b.deleted;
        kept |= b.kept;
        if !b.more {
            return Ok((deleted, !kept));
        }
        after = b.next;
    }
}
