//! The bank in the chaos run: a worker per site moves money between accounts in
//! transactions and reads every balance at one snapshot, for the bank checker
//! ([`crate::check::bank`]). In the sharded layout the accounts are split over both
//! shards, so most transfers are cross-shard transactions.
//!
//! Three kinds of step, at random:
//! - a transfer: read both accounts, then move at most the sender's balance, in one
//!   transaction (what it read is what it writes, so snapshot isolation keeps every
//!   balance non-negative);
//! - a read of every account inside one transaction, by `_id` or in one `find` (a
//!   statement over both shards, read in batches of 3); the reads of a transaction that
//!   committed count;
//! - a `find` of every account with read concern `snapshot` outside a transaction, a
//!   scatter at one cluster time.

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::error::TRANSIENT_TRANSACTION_ERROR;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::history::{Nanos, Outcome};
use crate::txn_workload::timed;
use crate::workload::Worker;

pub const ACCOUNTS: i64 = 8;
/// Every account's balance at the start.
pub const START: i64 = 100;
const COLLECTION: &str = "bank";

/// Every account, with [`START`].
pub fn initial_accounts() -> Vec<Document> {
    (0..ACCOUNTS).map(|a| doc! {"_id": a, "n": START}).collect()
}

pub fn collection(client: &mongodb::Client) -> mongodb::Collection<Document> {
    client.database("chaos").collection(COLLECTION)
}

/// One step of a bank worker.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum BankOp {
    Transfer {
        from: i64,
        to: i64,
        amount: i64,
        outcome: Outcome,
        /// Why it failed or may have, if it did.
        error: Option<String>,
    },
    /// Balances by account, read at one snapshot; `how` says which kind of read.
    Read {
        how: &'static str,
        balances: Vec<(i64, i64)>,
    },
}

/// A step and when it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub client: u32,
    pub invoked: Nanos,
    pub completed: Nanos,
    pub op: BankOp,
}

/// Runs steps until `stop`; returns those that say something: every transfer (with its
/// outcome) and the reads that completed.
pub async fn worker(w: Worker) -> Vec<Step> {
    let coll = collection(&w.client);
    let mut rng = StdRng::seed_from_u64(w.seed);
    let mut steps = Vec::new();
    while !w.stop.is_cancelled() {
        let invoked = w.clock.now();
        let op = match rng.gen_range(0..5) {
            0 => read_in_transaction(&w.client, &coll, false).await,
            1 => read_in_transaction(&w.client, &coll, true).await,
            2 => snapshot_find(&w.client, &coll).await,
            _ => {
                // Half the accounts are on each shard in the sharded layout: pick one
                // from each half, in either direction.
                let (a, b) = (
                    rng.gen_range(0..ACCOUNTS / 2),
                    rng.gen_range(ACCOUNTS / 2..ACCOUNTS),
                );
                let (from, to) = if rng.gen_bool(0.5) { (a, b) } else { (b, a) };
                Some(transfer(&w.client, &coll, from, to, rng.gen_range(1..=20)).await)
            }
        };
        if let Some(op) = op {
            steps.push(Step {
                client: w.id,
                invoked,
                completed: w.clock.now(),
                op,
            });
        }
        tokio::time::sleep(w.think).await;
    }
    steps
}

/// Moves up to `wanted` from `from` to `to` (no more than `from` holds).
async fn transfer(
    client: &mongodb::Client,
    coll: &mongodb::Collection<Document>,
    from: i64,
    to: i64,
    wanted: i64,
) -> BankOp {
    let mut amount = 0;
    let (outcome, error) = async {
        let mut s = match client.start_session().await {
            Ok(s) => s,
            Err(e) => return (Outcome::Fail, Some(e)),
        };
        if let Err(e) = s.start_transaction().await {
            return (Outcome::Fail, Some(e));
        }
        let staged = async {
            let have = balance(timed(coll.find_one(doc! {"_id": from}).session(&mut s)).await?);
            timed(coll.find_one(doc! {"_id": to}).session(&mut s)).await?;
            amount = wanted.min(have);
            for (id, by) in [(from, -amount), (to, amount)] {
                let update = coll
                    .update_one(doc! {"_id": id}, doc! {"$inc": {"n": by}})
                    .session(&mut s);
                timed(update).await?;
            }
            Ok::<_, Option<mongodb::error::Error>>(())
        };
        if let Err(e) = staged.await {
            let _ = timed(s.abort_transaction()).await;
            return (Outcome::Fail, e);
        }
        let commit = timed(s.commit_transaction()).await;
        let error = commit.as_ref().err().cloned().flatten();
        (commit_outcome(commit), error)
    }
    .await;
    BankOp::Transfer {
        from,
        to,
        amount,
        outcome,
        error: error.map(|e| e.to_string()),
    }
}

/// What a commit's answer says about the transaction.
fn commit_outcome(commit: Result<(), Option<mongodb::error::Error>>) -> Outcome {
    match commit {
        Ok(()) => Outcome::Ok,
        Err(Some(e)) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => Outcome::Fail,
        Err(_) => Outcome::Unknown,
    }
}

fn balance(d: Option<Document>) -> i64 {
    d.and_then(|d| d.get_i64("n").ok()).unwrap_or(0)
}

/// Every account in one transaction, by `_id` one at a time or in one `find` (over both
/// shards at once in the sharded layout); the balances if it committed.
async fn read_in_transaction(
    client: &mongodb::Client,
    coll: &mongodb::Collection<Document>,
    one_find: bool,
) -> Option<BankOp> {
    let mut s = client.start_session().await.ok()?;
    s.start_transaction().await.ok()?;
    let read = async {
        if one_find {
            let mut cursor = coll.find(doc! {}).batch_size(3).session(&mut s).await?;
            let docs: Vec<Document> = cursor.stream(&mut s).try_collect().await?;
            return Ok(balances_of(&docs));
        }
        let mut balances = Vec::new();
        for id in 0..ACCOUNTS {
            let d = coll.find_one(doc! {"_id": id}).session(&mut s).await?;
            balances.push((id, balance(d)));
        }
        Ok::<_, mongodb::error::Error>(balances)
    };
    let Ok(balances) = timed(read).await else {
        let _ = timed(s.abort_transaction()).await;
        return None;
    };
    timed(s.commit_transaction()).await.ok()?;
    Some(BankOp::Read {
        how: if one_find {
            "transaction find"
        } else {
            "transaction by _id"
        },
        balances,
    })
}

/// Every account in one `find` at read concern `snapshot` (a snapshot session).
async fn snapshot_find(
    client: &mongodb::Client,
    coll: &mongodb::Collection<Document>,
) -> Option<BankOp> {
    let mut s = client.start_session().snapshot(true).await.ok()?;
    let read = async {
        let mut cursor = coll.find(doc! {}).session(&mut s).await?;
        let docs: Vec<Document> = cursor.stream(&mut s).try_collect().await?;
        Ok::<_, mongodb::error::Error>(docs)
    };
    let docs = timed(read).await.ok()?;
    Some(BankOp::Read {
        how: "snapshot find",
        balances: balances_of(&docs),
    })
}

fn balances_of(docs: &[Document]) -> Vec<(i64, i64)> {
    docs.iter()
        .filter_map(|d| Some((d.get_i64("_id").ok()?, d.get_i64("n").ok()?)))
        .collect()
}

/// Every balance after the run, read at majority.
pub async fn final_balances(client: &mongodb::Client) -> anyhow::Result<Vec<(i64, i64)>> {
    let docs: Vec<Document> = collection(client)
        .find(doc! {})
        .read_concern(mongodb::options::ReadConcern::majority())
        .await?
        .try_collect()
        .await?;
    Ok(balances_of(&docs))
}
