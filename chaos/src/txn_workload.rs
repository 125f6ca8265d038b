//! Transactions in the chaos run: a worker per site runs list-append transactions
//! (Elle's workload: reads of whole lists and appends of values unique per key, a few
//! to a transaction) on `chaos.txn_lists`, for the snapshot-isolation checker
//! ([`crate::check::si`]).
//!
//! A transaction that failed before its commit was sent certainly did not commit; one
//! whose commit failed without `TransientTransactionError` may have. Only committed
//! transactions' reads count.

use std::time::Duration;

use bson::{doc, Document};
use mongodb::error::TRANSIENT_TRANSACTION_ERROR;
use mongodb::options::ReadConcern;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::check::si::{MicroOp, Txn};
use crate::history::Outcome;
use crate::workload::Worker;

pub const TXN_KEYS: u32 = 6;
const COLLECTION: &str = "txn_lists";
/// Each step of a transaction: longer than a failover, so most fail with an answer.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// One list per key, empty.
pub fn initial_lists() -> Vec<Document> {
    (0..TXN_KEYS)
        .map(|k| doc! {"_id": i64::from(k), "l": []})
        .collect()
}

pub fn collection(client: &mongodb::Client) -> mongodb::Collection<Document> {
    client.database("chaos").collection(COLLECTION)
}

/// Runs transactions until `stop`; returns them in the order they ran.
pub async fn worker(w: Worker) -> Vec<Txn> {
    let coll = collection(&w.client);
    let mut rng = StdRng::seed_from_u64(w.seed);
    let mut history = Vec::new();
    let mut seq: i64 = 0;
    while !w.stop.is_cancelled() {
        let plan: Vec<(bool, u32)> = (0..rng.gen_range(1..=4))
            .map(|_| (rng.gen_bool(0.5), rng.gen_range(0..TXN_KEYS)))
            .collect();
        let invoked = w.clock.now();
        let mut values = std::iter::from_fn(|| {
            seq += 1;
            // Unique in the run: the worker id in the high bits.
            Some((i64::from(w.id) << 32) | seq)
        });
        let (ops, outcome) = one_txn(&w.client, &coll, &plan, &mut values).await;
        history.push(Txn {
            client: w.id,
            ops,
            outcome,
            invoked,
            completed: w.clock.now(),
        });
        tokio::time::sleep(w.think).await;
    }
    history
}

/// One transaction of `plan` (append or read, key), appending values from `values`: its
/// micro-operations and outcome.
pub async fn one_txn(
    client: &mongodb::Client,
    coll: &mongodb::Collection<Document>,
    plan: &[(bool, u32)],
    values: &mut impl Iterator<Item = i64>,
) -> (Vec<MicroOp>, Outcome) {
    let Ok(mut s) = client.start_session().await else {
        return (Vec::new(), Outcome::Fail);
    };
    one_txn_in(&mut s, coll, plan, values).await
}

/// [`one_txn`] in session `s` (whose operation time then says when it committed).
pub async fn one_txn_in(
    s: &mut mongodb::ClientSession,
    coll: &mongodb::Collection<Document>,
    plan: &[(bool, u32)],
    values: &mut impl Iterator<Item = i64>,
) -> (Vec<MicroOp>, Outcome) {
    let mut ops = Vec::new();
    if s.start_transaction().await.is_err() {
        return (ops, Outcome::Fail);
    }
    for &(append, key) in plan {
        let id = i64::from(key);
        let step = if append {
            let value = values.next().unwrap_or_default();
            ops.push(MicroOp::Append { key, value });
            let update = coll
                .update_one(doc! {"_id": id}, doc! {"$push": {"l": value}})
                .session(&mut *s);
            timed(update).await.map(drop)
        } else {
            let read = coll.find_one(doc! {"_id": id}).session(&mut *s);
            timed(read).await.map(|d| {
                ops.push(MicroOp::Read {
                    key,
                    value: Some(list_of(d.as_ref())),
                })
            })
        };
        if step.is_err() {
            let _ = timed(s.abort_transaction()).await;
            return (forget_reads(ops), Outcome::Fail);
        }
    }
    match timed(s.commit_transaction()).await {
        Ok(()) => (ops, Outcome::Ok),
        Err(Some(e)) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
            (forget_reads(ops), Outcome::Fail)
        }
        Err(_) => (forget_reads(ops), Outcome::Unknown),
    }
}

/// A step within [`STEP_TIMEOUT`]: its error, or `None` when it timed out.
pub(crate) async fn timed<T>(
    step: impl std::future::IntoFuture<Output = mongodb::error::Result<T>>,
) -> Result<T, Option<mongodb::error::Error>> {
    match tokio::time::timeout(STEP_TIMEOUT, step.into_future()).await {
        Ok(r) => r.map_err(Some),
        Err(_) => Err(None),
    }
}

/// A transaction that did not certainly commit says nothing by its reads.
fn forget_reads(ops: Vec<MicroOp>) -> Vec<MicroOp> {
    ops.into_iter()
        .map(|op| match op {
            MicroOp::Read { key, .. } => MicroOp::Read { key, value: None },
            append => append,
        })
        .collect()
}

/// The list in a key's document.
pub fn list_of(d: Option<&Document>) -> Vec<i64> {
    d.and_then(|d| d.get_array("l").ok())
        .map(|l| l.iter().filter_map(|v| v.as_i64()).collect())
        .unwrap_or_default()
}

/// Every list after the run, read at majority, as one committed read-only transaction
/// at `at` that the checker orders after everything it read.
pub async fn final_reads(client: &mongodb::Client, at: u64) -> anyhow::Result<Txn> {
    use futures::TryStreamExt;
    let docs: Vec<Document> = collection(client)
        .find(doc! {})
        .read_concern(ReadConcern::majority())
        .await?
        .try_collect()
        .await?;
    let ops = (0..TXN_KEYS)
        .map(|key| {
            let d = docs
                .iter()
                .find(|d| d.get_i64("_id").ok() == Some(i64::from(key)));
            MicroOp::Read {
                key,
                value: Some(list_of(d)),
            }
        })
        .collect();
    Ok(Txn {
        client: u32::MAX,
        ops,
        outcome: Outcome::Ok,
        invoked: at,
        completed: at,
    })
}
