//! Transactions too large for one log entry (`shard::repl::txn_parts`): their writes are
//! split over several entries, and still appear all at once, on every member, through a
//! restart of every member and a failover in the middle of their entries.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::error::ErrorKind;
use shard::repl::txn_parts::PARTS_TABLE;
use tests::replica_set::{TestReplicaSet, Tuning, THREE_SITES};

const LIVENESS: Duration = Duration::from_secs(30);

async fn started(tuning: Tuning) -> (TestReplicaSet, mongodb::Client) {
    let set = TestReplicaSet::start_tuned(&THREE_SITES, tuning).await;
    set.wait_for_primary(LIVENESS).await.expect("primary");
    let client = set.client(0, "").await;
    (set, client)
}

/// How many documents member `i` holds in `db.coll`, read on the member itself.
async fn count_on(set: &TestReplicaSet, i: usize, (db, coll): (&str, &str)) -> i64 {
    let reply = set.run_on_member(i, db, doc! {"count": coll}).await;
    match reply.get("n") {
        Some(bson::Bson::Int32(n)) => *n as i64,
        Some(bson::Bson::Int64(n)) => *n,
        _ => panic!("count on member {i}: {reply}"),
    }
}

/// The `_txn_parts` rows member `i` holds.
fn parts_on(set: &TestReplicaSet, i: usize) -> usize {
    let node = &set.member(i).expect("running").node;
    node.base
        .scan(PARTS_TABLE, &storage::KeyRange::all(), false, usize::MAX)
        .expect("scan the parts table")
        .len()
}

/// Waits (bounded, a liveness check) until every member caught up and holds no part.
async fn settled(set: &TestReplicaSet, members: usize) {
    for i in 0..members {
        set.wait_caught_up(i, LIVENESS).await;
    }
    let started = Instant::now();
    while (0..members).any(|i| parts_on(set, i) > 0) {
        assert!(
            started.elapsed() < LIVENESS,
            "parts left behind: {:?}",
            (0..members).map(|i| parts_on(set, i)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn command_code(e: &mongodb::error::Error) -> Option<i32> {
    match &*e.kind {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

/// A transaction of 20 documents of 1 MiB (more than one 16 MiB entry holds) commits
/// whole: a reader outside it sees none or all of them, every member holds all of them
/// and no part, and so does every member after all three restart. Past the member's
/// limit (a quarter of its cache), a transaction is refused with TransactionTooLarge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_over_16_mib_commits_whole_everywhere_and_survives_a_restart() {
    const DOCS: i32 = 20;
    let tuning = Tuning {
        cache_mb: 128,
        ..Tuning::default()
    };
    let (mut set, client) = started(tuning).await;
    let coll = client.database("big").collection::<Document>("docs");
    coll.insert_one(doc! {"_id": -1}).await.unwrap();
    coll.delete_one(doc! {"_id": -1}).await.unwrap();
    let payload = "x".repeat(1 << 20);
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    for i in 0..DOCS {
        coll.insert_one(doc! {"_id": i, "payload": &payload})
            .session(&mut session)
            .await
            .unwrap();
    }
    let committing = Arc::new(AtomicBool::new(true));
    let reader = {
        let (coll, committing) = (coll.clone(), committing.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while committing.load(Ordering::SeqCst) && seen.len() < 1000 {
                seen.push(coll.count_documents(doc! {}).await.unwrap());
            }
            seen
        })
    };
    session.commit_transaction().await.unwrap();
    committing.store(false, Ordering::SeqCst);
    let seen = reader.await.unwrap();
    assert!(
        seen.iter().all(|&n| n == 0 || n == DOCS as u64),
        "a reader saw part of the transaction: {seen:?}"
    );
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), DOCS as u64);
    settled(&set, 3).await;
    for i in 0..3 {
        assert_eq!(count_on(&set, i, ("big", "docs")).await, DOCS as i64);
    }
    for i in 0..3 {
        set.kill(i).await;
    }
    for i in 0..3 {
        set.restart(i).await;
    }
    set.wait_for_primary(LIVENESS)
        .await
        .expect("a primary again");
    settled(&set, 3).await;
    for i in 0..3 {
        assert_eq!(count_on(&set, i, ("big", "docs")).await, DOCS as i64);
    }

    // The members' limit is a quarter of their 128 MiB cache.
    let client = set.client(0, "").await;
    let coll = client.database("big").collection::<Document>("refused");
    coll.insert_one(doc! {"_id": -1}).await.unwrap();
    coll.delete_one(doc! {"_id": -1}).await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    let mut refused = None;
    for i in 0..40 {
        let inserted = coll
            .insert_one(doc! {"_id": i, "payload": &payload})
            .session(&mut session)
            .await;
        if let Err(e) = inserted {
            refused = Some((i, e));
            break;
        }
    }
    let (at, e) = refused.expect("a transaction past the limit is refused");
    assert_eq!(command_code(&e), Some(257), "{e:?}");
    assert!((30..=32).contains(&at), "refused at document {at}");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
    set.stop().await;
}

/// Runs transactions of `DOCS` documents each (every one its own log entry, with a 1 KiB
/// `txn_entry_kb`) from one client until `stop`; returns the transactions acknowledged.
async fn split_transactions(
    client: mongodb::Client,
    worker: usize,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    const DOCS: i32 = 8;
    let coll = client.database("split").collection::<Document>("docs");
    let filler = "y".repeat(900);
    let mut acknowledged = Vec::new();
    let started = Instant::now();
    for t in 0..200 {
        if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        let name = format!("{worker}-{t}");
        let mut session = client.start_session().await.unwrap();
        let attempt: mongodb::error::Result<()> = async {
            session.start_transaction().await?;
            for n in 0..DOCS {
                coll.insert_one(doc! {"txn": &name, "n": n, "filler": &filler})
                    .session(&mut session)
                    .await?;
            }
            session.commit_transaction().await
        }
        .await;
        // A failed attempt's outcome is unknown (the failover): the data says it.
        match attempt {
            Ok(()) => acknowledged.push(name),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    acknowledged
}

/// Transactions split over many entries, from several clients, with the primary killed
/// part way: each appears whole or not at all, every acknowledged one whole, the killed
/// primary's unfinished parts are swept by the next primary, and the members agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_transactions_stay_whole_through_a_failover() {
    const WORKERS: usize = 3;
    let tuning = Tuning {
        txn_entry_kb: Some(1),
        ..Tuning::default()
    };
    let (mut set, client) = started(tuning).await;
    let coll = client.database("split").collection::<Document>("docs");
    coll.insert_one(doc! {"_id": "created"}).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..WORKERS)
        .map(|w| tokio::spawn(split_transactions(client.clone(), w, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let primary = set.primary().expect("a primary");
    set.kill(primary).await;
    set.wait_for_primary(LIVENESS).await.expect("a new primary");
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acknowledged = HashSet::new();
    for t in tasks {
        acknowledged.extend(t.await.unwrap());
    }
    assert!(!acknowledged.is_empty(), "no transaction committed");
    let docs: Vec<Document> = coll
        .find(doc! {"txn": {"$exists": true}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut by_txn: BTreeMap<String, usize> = BTreeMap::new();
    for d in &docs {
        *by_txn
            .entry(d.get_str("txn").unwrap().to_string())
            .or_default() += 1;
    }
    let partial: Vec<_> = by_txn
        .iter()
        .filter(|(_, &n)| n != 8)
        .map(|(t, _)| {
            let ns: Vec<_> = docs
                .iter()
                .filter(|d| d.get_str("txn") == Ok(t.as_str()))
                .map(|d| d.get_i32("n").unwrap_or(-1))
                .collect();
            (t, ns)
        })
        .collect();
    assert!(partial.is_empty(), "partial transactions: {partial:?}");
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|t| !by_txn.contains_key(*t))
        .collect();
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    println!(
        "{} transactions acknowledged, {} in the data",
        acknowledged.len(),
        by_txn.len()
    );
    set.restart(primary).await;
    settled(&set, 3).await;
    for i in 0..3 {
        assert_eq!(
            count_on(&set, i, ("split", "docs")).await,
            docs.len() as i64 + 1,
            "member {i}"
        );
    }
    set.stop().await;
}
