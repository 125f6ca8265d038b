//! Commit decisions of transactions across shards, kept by their coordinator shard.
//!
//! A cross-shard commit prepares every participant, then commits the coordinator (the
//! first participant that prepared) first, with its decision recorded in the same entry;
//! only then the others (`router::transactions`). So the transaction committed if and
//! only if its coordinator holds a decision for it. A participant left prepared (its
//! router died) is resolved by asking the coordinator (`decideTransaction`): a decision
//! there means commit at its time; none means abort, made final by aborting the
//! coordinator's part first.
//!
//! A decision is kept while a participant may still need it: the config server's
//! recovery, which lists every shard's prepared transactions, deletes decisions older
//! than [`RETENTION`] only in a pass that heard from every shard, and never one a
//! participant still holds prepared (`pruneTransactionDecisions`).

use std::time::Duration;

use bson::{doc, Document};
use storage::{Engine, KeyRange, Timestamp, WriteBatch};
use wire::MongoResult;

use crate::error::storage_to_mongo;

/// Table of decisions, by session key and `txnNumber`.
pub const TABLE: &str = "_txn_decisions";
/// How long a decision is kept at least.
pub const RETENTION: Duration = Duration::from_secs(600);

fn key(session: &[u8], number: i64) -> Vec<u8> {
    [session, &number.to_be_bytes()].concat()
}

/// Adds the decision to commit transaction `number` of `session` at `at` to `side`.
pub fn record(
    side: &mut WriteBatch,
    session: &[u8],
    number: i64,
    at: Timestamp,
) -> MongoResult<()> {
    let row = doc! {"c": proto::cluster_clock::to_bson(at), "u": bson::DateTime::now()};
    let bytes = bson::to_vec(&row)
        .map_err(|e| wire::MongoError::new(wire::ErrorCode::InternalError, e.to_string()))?;
    side.put(TABLE, key(session, number), bytes);
    Ok(())
}

/// The commit time of transaction `number` of `session`, if this shard decided to commit it.
pub fn committed_at(
    engine: &dyn Engine,
    session: &[u8],
    number: i64,
) -> MongoResult<Option<Timestamp>> {
    let row = engine
        .get(TABLE, &key(session, number))
        .map_err(storage_to_mongo)?;
    Ok(row
        .and_then(|b| Document::from_reader(&mut b.as_slice()).ok())
        .and_then(|d| d.get_timestamp("c").ok())
        .map(|t| proto::cluster_clock::pack(t.time, t.increment)))
}

/// Deletes the decisions older than [`RETENTION`] except those of `keep` (session key,
/// number: transactions some participant holds prepared); how many went. The primary's
/// deletions replicate.
pub fn prune(engine: &dyn Engine, keep: &[(Vec<u8>, i64)]) -> MongoResult<usize> {
    let cutoff = bson::DateTime::from_millis(
        bson::DateTime::now().timestamp_millis() - RETENTION.as_millis() as i64,
    );
    let kept: std::collections::HashSet<Vec<u8>> = keep.iter().map(|(s, n)| key(s, *n)).collect();
    let rows = engine
        .scan(TABLE, &KeyRange::all(), false, 10_000)
        .map_err(storage_to_mongo)?;
    let mut batch = WriteBatch::new();
    for (k, v) in rows {
        let old = Document::from_reader(&mut v.as_slice())
            .ok()
            .and_then(|d| d.get_datetime("u").ok().copied())
            .is_none_or(|u| u < cutoff);
        if old && !kept.contains(&k) {
            batch.delete(TABLE, k);
        }
    }
    let n = batch.len();
    if n > 0 {
        engine.write_owned(batch).map_err(storage_to_mongo)?;
    }
    Ok(n)
}
