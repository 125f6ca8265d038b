//! Multi-document transactions on one replica set, through a router, with the `mongodb`
//! driver: all or nothing, reads at one time with the transaction's own writes, the
//! first committer wins, and the errors and labels a driver's retry loop needs.

use std::time::Duration;

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::error::{Error, ErrorKind, WriteFailure, TRANSIENT_TRANSACTION_ERROR};
use tests::replica_set::TestReplicaSet;

const LIVENESS: Duration = Duration::from_secs(30);

/// `e` has code `expected` and says the whole transaction may run again.
fn assert_transient(e: &Error, expected: i32) {
    assert_eq!(code(e), Some(expected), "{e:?}");
    assert!(e.contains_label(TRANSIENT_TRANSACTION_ERROR), "{e:?}");
}

fn code(e: &Error) -> Option<i32> {
    match &*e.kind {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

/// Kills the primary once `done` reaches `count` (or after 30 s); returns `done` then.
async fn kill_primary_after(
    set: &mut TestReplicaSet,
    done: &std::sync::atomic::AtomicUsize,
    count: usize,
) -> usize {
    use std::sync::atomic::Ordering;
    for _ in 0..600 {
        if done.load(Ordering::Relaxed) >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let at = done.load(Ordering::Relaxed);
    let primary = set.primary().expect("a primary");
    set.kill(primary).await;
    at
}

/// Every document of `coll`, outside any transaction.
async fn everything(coll: &mongodb::Collection<Document>) -> Vec<Document> {
    let cursor = coll.find(doc! {}).await.unwrap();
    cursor.try_collect().await.unwrap()
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
    let after = everything(&coll).await;
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
    assert_transient(&lost, 112);
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
    assert_transient(&lost, 112);
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
    assert_transient(&lost, 112);
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
    assert_transient(&e, 251);
    let _ = s.abort_transaction().await;
}

/// Transactions of reads and list appends over a few keys from several clients, with
/// the primary killed part way: the history they leave, checked by `chaos::check::si`
/// (Elle's inference for list-append), shows no anomaly snapshot isolation forbids, and
/// no acknowledged append is lost from the final lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_append_transactions_stay_snapshot_isolated_across_a_failover() {
    const CLIENTS: usize = 4;
    const ATTEMPTS: usize = 40;
    let seed = tests::seed("list-append");
    let (mut set, client) = started().await;
    let run = tests::list_append::Run::new(6);
    let coll = ("si", "lists");
    let lists = client.database(coll.0).collection::<Document>(coll.1);
    lists.insert_many(run.empty_lists()).await.unwrap();
    let tasks = run.spawn(&vec![client.clone(); CLIENTS], coll, ATTEMPTS, seed);
    let killed_at = run.after(CLIENTS * ATTEMPTS / 3).await;
    let primary = set.primary().expect("a primary");
    set.kill(primary).await;
    let history = tests::list_append::Run::histories(tasks).await;
    set.wait_for_primary(LIVENESS).await.expect("a new primary");
    let last = run.final_reads(&client, coll, CLIENTS as u32).await;
    println!("the primary was killed after {killed_at} transactions");
    tests::list_append::assert_valid(history, last, seed, ATTEMPTS + 1);
}

/// Transfers between accounts in transactions from several clients, with a reader taking
/// snapshot totals in transactions all along and the primary killed part way: every total
/// is the starting one, and so is the final one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bank_transfers_keep_every_snapshot_total_across_a_failover() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    const ACCOUNTS: i64 = 8;
    const START: i64 = 100;
    const CLIENTS: u64 = 3;
    const TRANSFERS: usize = 30;
    let seed = tests::seed("bank");
    let (mut set, client) = started().await;
    let coll = client.database("bank").collection::<Document>("accounts");
    let accounts: Vec<Document> = (0..ACCOUNTS).map(|i| doc! {"_id": i, "n": START}).collect();
    coll.insert_many(accounts).await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut movers = Vec::new();
    for c in 0..CLIENTS {
        let (client, coll, done) = (client.clone(), coll.clone(), done.clone());
        movers.push(tokio::spawn(async move {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 17 + c);
            for _ in 0..TRANSFERS {
                let (from, to) = (rng.gen_range(0..ACCOUNTS), rng.gen_range(0..ACCOUNTS));
                let amount = rng.gen_range(1..=10_i64);
                let mut s = client.start_session().await.unwrap();
                // Failures are fine (a conflict, the failover): a transfer happens whole
                // or not at all.
                if s.start_transaction().await.is_ok() {
                    let moved = async {
                        coll.update_one(doc! {"_id": from}, doc! {"$inc": {"n": -amount}})
                            .session(&mut s)
                            .await?;
                        coll.update_one(doc! {"_id": to}, doc! {"$inc": {"n": amount}})
                            .session(&mut s)
                            .await?;
                        s.commit_transaction().await
                    };
                    if moved.await.is_err() {
                        let _ = s.abort_transaction().await;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let reader = {
        let (client, coll, stop) = (client.clone(), coll.clone(), stop.clone());
        tokio::spawn(async move {
            let mut totals = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut s = client.start_session().await.unwrap();
                if s.start_transaction().await.is_err() {
                    continue;
                }
                let read: Result<Vec<Document>, _> = async {
                    let mut cursor = coll.find(doc! {}).session(&mut s).await?;
                    cursor.stream(&mut s).try_collect().await
                }
                .await;
                let _ = s.commit_transaction().await;
                if let Ok(docs) = read {
                    totals.push(docs.iter().filter_map(|d| d.get_i64("n").ok()).sum::<i64>());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            totals
        })
    };
    kill_primary_after(&mut set, &done, (CLIENTS as usize * TRANSFERS) / 3).await;
    for m in movers {
        tokio::time::timeout(Duration::from_secs(300), m)
            .await
            .expect("bounded")
            .unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let totals = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("bounded")
        .unwrap();
    println!("{} snapshot totals read", totals.len());
    assert!(!totals.is_empty(), "seed {seed}: no snapshot was read");
    let expected = ACCOUNTS * START;
    assert!(
        totals.iter().all(|t| *t == expected),
        "seed {seed}: totals {totals:?}, expected {expected}"
    );
    set.wait_for_primary(LIVENESS).await.expect("a new primary");
    let all = everything(&coll).await;
    let total: i64 = all.iter().filter_map(|d| d.get_i64("n").ok()).sum();
    assert_eq!(total, expected, "seed {seed}: {all:?}");
}

/// An aborted transaction's insert that would make an index multikey leaves the index's
/// metadata as it was: a later insert outside the transaction records the flag itself,
/// and a query that needs it (two bounds met by different elements of one array) still
/// finds the document after the catalog is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_aborted_transaction_leaves_no_multikey_flag_behind() {
    let (_set, client) = started().await;
    let db = client.database("t");
    let coll = db.collection::<Document>("tags");
    coll.insert_one(doc! {"_id": 0, "tags": 0}).await.unwrap();
    let index = mongodb::IndexModel::builder()
        .keys(doc! {"tags": 1})
        .build();
    coll.create_index(index).await.unwrap();
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 1, "tags": [1, 5]})
        .session(&mut s)
        .await
        .unwrap();
    s.abort_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 2, "tags": [1, 5]})
        .await
        .unwrap();
    // A change to another collection's catalog row: every member reloads its catalog
    // from storage, this collection's row included.
    db.create_collection("other").await.unwrap();
    let found: Vec<Document> = coll
        .find(doc! {"tags": {"$gt": 2, "$lt": 4}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found, vec![doc! {"_id": 2, "tags": [1, 5]}]);
}

/// A transaction started right after a write was acknowledged reads that write, even in
/// a new session with no cluster time to wait for: its read time is at least the time of
/// every entry the member has answered for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_reads_every_write_acknowledged_before_it_started() {
    let (_set, client) = started().await;
    let mut tasks = Vec::new();
    for c in 0..4_i64 {
        let client = client.clone();
        tasks.push(tokio::spawn(
            async move { read_own_writes(&client, c).await },
        ));
    }
    for t in tasks {
        let stale = tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("bounded")
            .unwrap();
        assert!(stale.is_empty(), "stale reads: {stale:?}");
    }
}

/// Sets a document of its own 50 times, each time reading it back in a new transaction
/// of a new session; returns the reads that missed the write just acknowledged.
async fn read_own_writes(client: &mongodb::Client, c: i64) -> Vec<(i64, Document)> {
    let coll = client.database("t").collection::<Document>("ryw");
    coll.insert_one(doc! {"_id": c, "n": 0_i64}).await.unwrap();
    let mut stale = Vec::new();
    for i in 1..=50_i64 {
        coll.update_one(doc! {"_id": c}, doc! {"$set": {"n": i}})
            .await
            .unwrap();
        let mut s = client
            .start_session()
            .causal_consistency(false)
            .await
            .unwrap();
        s.start_transaction().await.unwrap();
        let d = coll
            .find_one(doc! {"_id": c})
            .session(&mut s)
            .await
            .unwrap()
            .unwrap();
        s.commit_transaction().await.unwrap();
        if d.get_i64("n") != Ok(i) {
            stale.push((i, d));
        }
    }
    stale
}

/// Catalog changes during a transaction: an index built after it started makes its
/// commit a WriteConflict (the index has no entries for its documents), a collection
/// dropped after it started is SnapshotUnavailable to its reads (not an empty one), and
/// `$out` is refused in a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catalog_changes_during_a_transaction_are_conflicts() {
    let (_set, client) = started().await;
    let db = client.database("t");
    let coll = db.collection::<Document>("indexed");
    coll.insert_one(doc! {"_id": 0, "k": 0}).await.unwrap();
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 1, "k": 1})
        .session(&mut s)
        .await
        .unwrap();
    let unique = tests::unique_index(doc! {"k": 1});
    coll.create_index(unique).await.unwrap();
    let e = s
        .commit_transaction()
        .await
        .expect_err("the index came later");
    assert_transient(&e, 112);
    assert!(coll.find_one(doc! {"_id": 1}).await.unwrap().is_none());

    let gone = db.collection::<Document>("gone");
    gone.insert_one(doc! {"_id": 1}).await.unwrap();
    s.start_transaction().await.unwrap();
    coll.find_one(doc! {}).session(&mut s).await.unwrap();
    gone.drop().await.unwrap();
    let e = gone
        .find_one(doc! {})
        .session(&mut s)
        .await
        .expect_err("dropped after the transaction's time");
    assert_transient(&e, 246);
    let _ = s.abort_transaction().await;

    s.start_transaction().await.unwrap();
    let e = coll
        .aggregate(vec![doc! {"$out": "copy"}])
        .session(&mut s)
        .await
        .expect_err("$out in a transaction");
    assert_eq!(code(&e), Some(263), "{e:?}");
    let _ = s.abort_transaction().await;
}

/// A cursor opened in a transaction reads nothing after the transaction commits: its
/// later batches would otherwise read the snapshot without the transaction's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transactions_cursor_ends_with_it() {
    let (_set, client) = started().await;
    let coll = client.database("t").collection::<Document>("cursor");
    let docs: Vec<Document> = (0..5).map(|i| doc! {"_id": i}).collect();
    coll.insert_many(docs).await.unwrap();
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    let mut cursor = coll
        .find(doc! {})
        .batch_size(2)
        .session(&mut s)
        .await
        .unwrap();
    for _ in 0..2 {
        cursor.next(&mut s).await.unwrap().unwrap();
    }
    s.commit_transaction().await.unwrap();
    let after = cursor.next(&mut s).await.expect("a batch was asked for");
    let e = after.expect_err("the transaction has ended");
    assert_eq!(code(&e), Some(251), "{e:?}");
}
