//! Multi-document transactions on one replica set, through a router, with the `mongodb`
//! driver: all or nothing, reads at one time with the transaction's own writes, the
//! first committer wins, and the errors and labels a driver's retry loop needs.

use std::time::Duration;

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::error::{Error, ErrorKind, WriteFailure, TRANSIENT_TRANSACTION_ERROR};
use tests::replica_set::TestReplicaSet;

const LIVENESS: Duration = Duration::from_secs(30);

fn code(e: &Error) -> Option<i32> {
    match &*e.kind {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

async fn started() -> (TestReplicaSet, mongodb::Client) {
    let set = TestReplicaSet::start().await;
    set.wait_for_primary(LIVENESS).await.expect("primary");
    let client = set.client(0, "").await;
    (set, client)
}

/// A committed transaction's writes appear together; an aborted one's never do; inside
/// it, reads see its own writes over a snapshot that others' later writes do not reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_commits_all_or_nothing_and_reads_its_own_writes() {
    let (_set, client) = started().await;
    let coll = client.database("bank").collection::<Document>("accounts");
    coll.insert_many(vec![doc! {"_id": "a", "n": 100}, doc! {"_id": "b", "n": 0}])
        .await
        .unwrap();

    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "a"}, doc! {"$inc": {"n": -30}})
        .session(&mut s)
        .await
        .unwrap();
    coll.update_one(doc! {"_id": "b"}, doc! {"$inc": {"n": 30}})
        .session(&mut s)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": "log1", "moved": 30})
        .session(&mut s)
        .await
        .unwrap();
    // Written outside the transaction after it started: not in its snapshot.
    coll.insert_one(doc! {"_id": "outside"}).await.unwrap();
    let inside: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .session(&mut s)
        .await
        .unwrap()
        .stream(&mut s)
        .try_collect()
        .await
        .unwrap();
    let ids: Vec<&str> = inside.iter().map(|d| d.get_str("_id").unwrap()).collect();
    assert_eq!(ids, ["a", "b", "log1"], "{inside:?}");
    assert_eq!(inside[0].get_i32("n"), Ok(70));
    // Not visible outside before the commit.
    let b = coll.find_one(doc! {"_id": "b"}).await.unwrap().unwrap();
    assert_eq!(b.get_i32("n"), Ok(0));
    s.commit_transaction().await.unwrap();
    let after: Vec<Document> = coll
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let total: i32 = after.iter().filter_map(|d| d.get_i32("n").ok()).sum();
    assert_eq!(total, 100, "{after:?}");
    assert_eq!(after.len(), 4, "{after:?}");

    s.start_transaction().await.unwrap();
    coll.delete_many(doc! {}).session(&mut s).await.unwrap();
    coll.insert_one(doc! {"_id": "never"})
        .session(&mut s)
        .await
        .unwrap();
    s.abort_transaction().await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 4);
    assert!(coll
        .find_one(doc! {"_id": "never"})
        .await
        .unwrap()
        .is_none());
}

/// Two transactions write the same document: the first to commit wins, and the other
/// gets WriteConflict labelled TransientTransactionError, which the driver's
/// `with_transaction`-style loop runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_first_committer_wins_and_the_loser_is_told_to_run_again() {
    let (_set, client) = started().await;
    let coll = client.database("t").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();

    let mut first = client.start_session().await.unwrap();
    let mut second = client.start_session().await.unwrap();
    first.start_transaction().await.unwrap();
    second.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .session(&mut first)
        .await
        .unwrap();
    // Read before the first commits: the second's snapshot is older than that commit.
    coll.find_one(doc! {"_id": 1})
        .session(&mut second)
        .await
        .unwrap();
    first.commit_transaction().await.unwrap();
    let lost = coll
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 10}})
        .session(&mut second)
        .await
        .expect_err("a write over a newer commit");
    assert_eq!(code(&lost), Some(112), "{lost:?}");
    assert!(lost.contains_label(TRANSIENT_TRANSACTION_ERROR), "{lost:?}");
    // The transaction is over on the shard; the driver's abort is answered.
    let _ = second.abort_transaction().await;
    let n = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(n.get_i32("n"), Ok(1));

    // A write outside any transaction after a transaction read also beats it at commit.
    first.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"mine": true}})
        .session(&mut first)
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 100}})
        .await
        .unwrap();
    let lost = first
        .commit_transaction()
        .await
        .expect_err("commit over a newer write");
    assert_eq!(code(&lost), Some(112), "{lost:?}");
    assert!(lost.contains_label(TRANSIENT_TRANSACTION_ERROR), "{lost:?}");
    let n = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(n.get_i32("n"), Ok(101));
    assert!(!n.contains_key("mine"), "{n:?}");

    // Two open transactions write one document: the second writer is refused at once.
    first.start_transaction().await.unwrap();
    second.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .session(&mut first)
        .await
        .unwrap();
    let lost = coll
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .session(&mut second)
        .await
        .expect_err("the document is another open transaction's");
    assert_eq!(code(&lost), Some(112), "{lost:?}");
    assert!(lost.contains_label(TRANSIENT_TRANSACTION_ERROR), "{lost:?}");
    let _ = second.abort_transaction().await;
    first.commit_transaction().await.unwrap();
    let n = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(n.get_i32("n"), Ok(102));
}

/// The driver's callback API runs the transaction again after a conflict until it
/// commits: concurrent increments through it all count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_read_modify_write_transactions_lose_no_increment() {
    let (_set, client) = started().await;
    let coll = client.database("t").collection::<Document>("counter");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    const WORKERS: usize = 4;
    const EACH: usize = 10;
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (client, coll) = (client.clone(), coll.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = client.start_session().await.unwrap();
            for _ in 0..EACH {
                s.start_transaction()
                    .and_run(coll.clone(), |s, coll| {
                        Box::pin(async move {
                            let d = coll.find_one(doc! {"_id": 1}).session(&mut *s).await?;
                            let n = d.and_then(|d| d.get_i32("n").ok()).unwrap_or(0);
                            coll.update_one(doc! {"_id": 1}, doc! {"$set": {"n": n + 1}})
                                .session(&mut *s)
                                .await?;
                            Ok(())
                        })
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("bounded")
            .unwrap();
    }
    let n = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(n.get_i32("n"), Ok((WORKERS * EACH) as i32));
}

/// What a transaction refuses, with MongoDB's codes; and a failed statement ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_and_a_failed_statement_end_the_transaction() {
    let (_set, client) = started().await;
    let db = client.database("t");
    let coll = db.collection::<Document>("r");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let mut s = client.start_session().await.unwrap();

    // DDL is not run inside a transaction here: a new collection is refused (263).
    s.start_transaction().await.unwrap();
    let e = db
        .collection::<Document>("brand_new")
        .insert_one(doc! {"x": 1})
        .session(&mut s)
        .await
        .expect_err("implicit create in a transaction");
    assert_eq!(code(&e), Some(263), "{e:?}");
    let _ = s.abort_transaction().await;

    // count is not allowed in a transaction (263).
    s.start_transaction().await.unwrap();
    let e = db
        .run_command(doc! {"count": "r"})
        .session(&mut s)
        .await
        .expect_err("count in a transaction");
    assert_eq!(code(&e), Some(263), "{e:?}");
    let _ = s.abort_transaction().await;

    // A duplicate key fails its statement and aborts the transaction.
    s.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 2})
        .session(&mut s)
        .await
        .unwrap();
    let e = coll
        .insert_one(doc! {"_id": 1})
        .session(&mut s)
        .await
        .expect_err("duplicate key");
    assert!(e.to_string().contains("E11000"), "{e:?}");
    let e = s
        .commit_transaction()
        .await
        .expect_err("the transaction was aborted");
    assert_eq!(code(&e), Some(251), "{e:?}");
    assert!(coll.find_one(doc! {"_id": 2}).await.unwrap().is_none());

    // A statement after the aborting one: the transaction is gone (251), and the error
    // says the whole transaction may run again.
    s.start_transaction().await.unwrap();
    let e = coll
        .insert_one(doc! {"_id": 1})
        .session(&mut s)
        .await
        .expect_err("duplicate key");
    assert_eq!(code(&e), Some(11000), "{e:?}");
    let e = coll
        .find_one(doc! {"_id": 1})
        .session(&mut s)
        .await
        .expect_err("the transaction was aborted");
    assert_eq!(code(&e), Some(251), "{e:?}");
    assert!(e.contains_label(TRANSIENT_TRANSACTION_ERROR), "{e:?}");
    let _ = s.abort_transaction().await;
}

/// Transactions of reads and list appends over a few keys from several clients, with
/// the primary killed part way: the history they leave, checked by `chaos::check::si`
/// (Elle's inference for list-append), shows no anomaly snapshot isolation forbids, and
/// no acknowledged append is lost from the final lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_append_transactions_stay_snapshot_isolated_across_a_failover() {
    use chaos::check::si::{self, MicroOp, Txn};
    use chaos::history::Outcome;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    const KEYS: u32 = 6;
    const CLIENTS: u32 = 4;
    const ATTEMPTS: usize = 40;
    let seed: u64 = std::env::var("TXN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u32>() as u64);
    println!("list-append seed {seed} (TXN_SEED={seed} repeats it)");
    let (mut set, client) = started().await;
    let coll = client.database("si").collection::<Document>("lists");
    let empty: Vec<Document> = (0..KEYS).map(|k| doc! {"_id": k as i64, "l": []}).collect();
    coll.insert_many(empty).await.unwrap();
    let start = std::time::Instant::now();
    let next_value = Arc::new(AtomicI64::new(1));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (client, coll, next_value) = (client.clone(), coll.clone(), next_value.clone());
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 31 + u64::from(c));
            let mut history = Vec::new();
            for _ in 0..ATTEMPTS {
                let plan: Vec<(bool, u32)> = (0..rng.gen_range(1..=4))
                    .map(|_| (rng.gen_bool(0.5), rng.gen_range(0..KEYS)))
                    .collect();
                let invoked = start.elapsed().as_nanos() as u64;
                let (ops, outcome) = one_list_txn(&client, &coll, &plan, &next_value).await;
                let completed = start.elapsed().as_nanos() as u64;
                history.push(Txn {
                    client: c,
                    ops,
                    outcome,
                    invoked,
                    completed,
                });
                done.fetch_add(1, Ordering::Relaxed);
            }
            history
        }));
    }
    // Kill the primary once a third of the transactions have run.
    let third = (CLIENTS as usize * ATTEMPTS) / 3;
    for _ in 0..600 {
        if done.load(Ordering::Relaxed) >= third {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed_at = done.load(Ordering::Relaxed);
    let primary = set.primary().expect("a primary");
    set.kill(primary).await;
    let mut history: Vec<Txn> = Vec::new();
    for t in tasks {
        let h = tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("bounded")
            .unwrap();
        history.extend(h);
    }
    set.wait_for_primary(LIVENESS).await.expect("a new primary");
    // The final state, read as one more committed transaction.
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    let mut final_reads = Vec::new();
    for k in 0..KEYS {
        let d = coll
            .find_one(doc! {"_id": k as i64})
            .session(&mut s)
            .await
            .unwrap();
        final_reads.push(MicroOp::Read {
            key: k,
            value: Some(list_of(d)),
        });
    }
    s.commit_transaction().await.unwrap();
    let now = start.elapsed().as_nanos() as u64;
    history.push(Txn {
        client: CLIENTS,
        ops: final_reads,
        outcome: Outcome::Ok,
        invoked: now,
        completed: now,
    });

    let report = si::check(&history);
    println!("{report}");
    println!("the primary was killed after {killed_at} transactions");
    assert!(report.ok(), "seed {seed}: {report}");
    assert!(
        report.committed > ATTEMPTS,
        "seed {seed}: too few commits: {report}"
    );
    // Every acknowledged append is in the final list of its key.
    let finals: Vec<&[i64]> = history
        .last()
        .unwrap()
        .ops
        .iter()
        .map(|op| match op {
            MicroOp::Read { value: Some(l), .. } => l.as_slice(),
            _ => &[][..],
        })
        .collect();
    for t in history.iter().filter(|t| t.committed()) {
        for op in &t.ops {
            if let MicroOp::Append { key, value } = op {
                assert!(
                    finals[*key as usize].contains(value),
                    "seed {seed}: lost append {value} to {key}"
                );
            }
        }
    }
}

/// One transaction of `plan` (read or append, key): its micro-ops and outcome. Any error
/// before the commit leaves it certainly uncommitted; a commit error that is not
/// transient leaves its outcome unknown.
async fn one_list_txn(
    client: &mongodb::Client,
    coll: &mongodb::Collection<Document>,
    plan: &[(bool, u32)],
    next_value: &std::sync::atomic::AtomicI64,
) -> (Vec<chaos::check::si::MicroOp>, chaos::history::Outcome) {
    use chaos::check::si::MicroOp;
    use chaos::history::Outcome;
    let mut ops = Vec::new();
    let Ok(mut s) = client.start_session().await else {
        return (ops, Outcome::Fail);
    };
    if s.start_transaction().await.is_err() {
        return (ops, Outcome::Fail);
    }
    for &(append, key) in plan {
        let step = if append {
            let value = next_value.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ops.push(MicroOp::Append { key, value });
            coll.update_one(doc! {"_id": key as i64}, doc! {"$push": {"l": value}})
                .session(&mut s)
                .await
                .map(drop)
        } else {
            let read = coll
                .find_one(doc! {"_id": key as i64})
                .session(&mut s)
                .await;
            read.map(|d| {
                ops.push(MicroOp::Read {
                    key,
                    value: Some(list_of(d)),
                })
            })
        };
        if step.is_err() {
            let _ = s.abort_transaction().await;
            return (forget_reads(ops), Outcome::Fail);
        }
    }
    match s.commit_transaction().await {
        Ok(()) => (ops, Outcome::Ok),
        Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
            (forget_reads(ops), Outcome::Fail)
        }
        Err(_) => (forget_reads(ops), Outcome::Unknown),
    }
}

/// A transaction that did not certainly commit says nothing by its reads.
fn forget_reads(ops: Vec<chaos::check::si::MicroOp>) -> Vec<chaos::check::si::MicroOp> {
    use chaos::check::si::MicroOp;
    ops.into_iter()
        .map(|op| match op {
            MicroOp::Read { key, .. } => MicroOp::Read { key, value: None },
            append => append,
        })
        .collect()
}

fn list_of(d: Option<Document>) -> Vec<i64> {
    d.and_then(|d| d.get_array("l").ok().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_i64())
        .collect()
}
