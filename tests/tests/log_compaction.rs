//! Log compaction: after each checkpoint the Raft log drops what WiredTiger holds, a
//! restarted member recovers from its checkpoint plus the shortened log, and a member
//! that fell behind the compacted log, or lost its disk, catches up from a snapshot.

use std::time::Duration;

use bson::{doc, Document};
use tests::replica_set::{TestReplicaSet, Tuning};

const LIVENESS: Duration = Duration::from_secs(30);

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while started.elapsed() < LIVENESS {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A set that keeps no log beyond the checkpoint and compacts every second, its primary,
/// and `test.log` through the primary's router.
async fn compacting_set() -> (TestReplicaSet, usize, mongodb::Collection<Document>) {
    let set = TestReplicaSet::start_compacting(0, 1).await;
    let (primary, _) = set.wait_for_primary(LIVENESS).await.expect("primary");
    let client = set.client(primary, "").await;
    let coll = client.database("test").collection::<Document>("log");
    (set, primary, coll)
}

/// A compacting set with one secondary killed; returns it last.
async fn compacting_set_one_down() -> (TestReplicaSet, usize, mongodb::Collection<Document>, usize)
{
    let (mut set, primary, coll) = compacting_set().await;
    let behind = (0..3).find(|&i| i != primary).unwrap();
    set.kill(behind).await;
    (set, primary, coll, behind)
}

/// Waits until the primary's log no longer reaches back to what it had written by now.
async fn compacted_past_the_killed_member(set: &TestReplicaSet, primary: usize) {
    let mark = set.status(primary).last_index;
    wait_for("the primary to compact past the killed member", || {
        set.status(primary).first_index > mark - 5
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_log_is_compacted_and_members_behind_it_catch_up_from_a_snapshot() {
    let (mut set, primary, coll) = compacting_set().await;
    for i in 0..150 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    let last = set.status(primary).last_index;
    wait_for("every member to compact", || {
        (0..3).all(|i| set.status(i).first_index > last / 2)
    })
    .await;
    // The log spans several files, and compaction deleted the oldest.
    for i in 0..3 {
        let files = log_files(&set, i);
        assert!(!files.is_empty(), "member {i}: {files:?}");
        assert_ne!(
            files[0], "raft-0000000000000000.log",
            "member {i}: {files:?}"
        );
    }

    // A restarted member recovers from its checkpoint plus what is left of its log.
    let secondary = (0..3).find(|&i| i != primary).unwrap();
    set.kill(secondary).await;
    set.restart(secondary).await;
    caught_up(&set, secondary).await;
    assert_eq!(count_on(&set, secondary).await, 150);

    // A member that misses more than the primary keeps cannot catch up from the log: the
    // primary sends it a snapshot, it copies the data and goes on from the log after it.
    let primary = set.primary().expect("primary");
    let stale = (0..3).find(|&i| i != primary && i != secondary).unwrap();
    set.kill(stale).await;
    for i in 150..300 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    let mark = set.status(primary).last_index;
    wait_for("the primary to compact past the killed member", || {
        set.status(primary).first_index > mark - 10
    })
    .await;
    set.restart(stale).await;
    coll.insert_one(doc! {"_id": 300}).await.unwrap();
    caught_up(&set, stale).await;
    let s = set.status(stale);
    assert!(s.halted.is_none(), "{:?}", s.halted);
    assert_eq!(s.snapshots_installed, 1, "{s:?}");
    assert!(
        s.first_index > 150,
        "its log starts after the snapshot: {s:?}"
    );
    assert_eq!(count_on(&set, stale).await, 301);

    // A member whose disk was lost is sent a snapshot too (the log no longer reaches back
    // to its start), and keeps taking writes after it.
    set.kill(secondary).await;
    set.wipe(secondary);
    set.restart(secondary).await;
    coll.insert_one(doc! {"_id": 301}).await.unwrap();
    caught_up(&set, secondary).await;
    assert_eq!(set.status(secondary).snapshots_installed, 1);
    assert_eq!(count_on(&set, secondary).await, 302);
    // A member stopped in the middle of an install (its marker left behind) empties
    // itself when it starts and is sent everything again.
    set.kill(stale).await;
    std::fs::write(set.member_dir(stale).join("raft/snapshot-installing"), b"").unwrap();
    set.restart(stale).await;
    caught_up(&set, stale).await;
    assert_eq!(set.status(stale).snapshots_installed, 1);
    assert_eq!(count_on(&set, stale).await, 302);

    // Every member can serve as primary: each holds every write.
    for i in 302..320 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 320);
    for i in 0..3 {
        caught_up(&set, i).await;
        assert_eq!(count_on(&set, i).await, 320, "member {i}");
    }
    set.stop().await;
}

/// A member that lost its disk copies its data from a member of its own site, not across
/// sites from the primary, and a copy that outlasts the primary's wait for the transfer to
/// start is not sent again; when that member cannot send it, from the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_member_copies_its_data_from_a_member_of_its_own_site() {
    let tuning = Tuning {
        compaction: Some((0, 1)),
        ..Tuning::default()
    };
    // The preferred primary in site A, two secondaries in site B.
    let layout = [("A", 2, false), ("B", 1, false), ("B", 1, false)];
    let mut set = TestReplicaSet::start_tuned(&layout, tuning).await;
    let (primary, _) = set.wait_for_primary(LIVENESS).await.expect("primary");
    assert_eq!(primary, 0, "the preferred primary");
    let client = set.client(primary, "").await;
    let coll = client.database("test").collection::<Document>("log");
    let (wiped, neighbour) = (2, 1);
    let mut next: i32 = 0;
    for round in 1..=2u64 {
        set.kill(wiped).await;
        set.wipe(wiped);
        for _ in 0..100 {
            coll.insert_one(doc! {"_id": next}).await.unwrap();
            next += 1;
        }
        compacted_past_the_killed_member(&set, primary).await;
        if round == 1 {
            // The copy stalls after the wiped member dropped its tables, for longer than
            // the primary waits to hear that a transfer started (10 s).
            set.hold_snapshots(true);
        } else {
            // The neighbour refuses to send its data to the wiped member.
            set.cut_link(neighbour, wiped);
        }
        set.restart(wiped).await;
        if round == 1 {
            wait_for("the wiped member to start copying", || {
                set.status(wiped).installing_snapshot
            })
            .await;
            let unfetched = set.status(primary).snapshots_unfetched;
            tokio::time::sleep(Duration::from_secs(12)).await;
            set.hold_snapshots(false);
            // The wiped member told the primary that the copy went on, so the primary
            // did not give the transfer up (and send the data again after it).
            let now = set.status(primary).snapshots_unfetched;
            assert_eq!(now, unfetched, "the primary gave up a snapshot in the copy");
        }
        // No write until it has caught up: this set's log keeps nothing beyond its
        // checkpoint, so a write during the copy would need a second snapshot.
        caught_up(&set, wiped).await;
        let s = set.status(wiped);
        assert!(s.halted.is_none(), "{:?}", s.halted);
        assert_eq!(s.snapshots_installed, 1, "round {round}: {s:?}");
        assert_eq!(count_on(&set, wiped).await, next, "round {round}");
        let served = |i: usize| set.status(i).snapshots_served;
        // Round 1 from the neighbour in site B; round 2, cut off from it, from the primary.
        assert_eq!(
            (served(primary), served(neighbour)),
            (round - 1, 1),
            "round {round}"
        );
    }
    set.stop().await;
}

/// The names of member `i`'s Raft log files, oldest first.
fn log_files(set: &TestReplicaSet, i: usize) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(set.member_dir(i).join("raft"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("raft-") && n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

/// Waits until member `i` has applied everything the primary has committed.
async fn caught_up(set: &TestReplicaSet, i: usize) {
    wait_for("the member to catch up", || {
        let p = set
            .primary()
            .map(|p| set.status(p).commit)
            .unwrap_or(u64::MAX);
        set.status(i).applied >= p
    })
    .await;
}

/// Documents in `test.log` as member `i` holds them.
async fn count_on(set: &TestReplicaSet, i: usize) -> i32 {
    let count = run_on(set, i, "test", doc! {"count": "log"}).await;
    count.get_i32("n").unwrap_or_else(|_| panic!("{count}"))
}

/// Every document member `i` holds in `test.log`, in `_id` order.
async fn contents_of(set: &TestReplicaSet, i: usize) -> Vec<Document> {
    let reply = run_on(
        set,
        i,
        "test",
        doc! {"find": "log", "sort": {"_id": 1}, "batchSize": 100_000},
    )
    .await;
    let cursor = reply
        .get_document("cursor")
        .unwrap_or_else(|_| panic!("{reply}"));
    assert_eq!(cursor.get_i64("id"), Ok(0), "one batch");
    cursor
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .map(|d| d.as_document().unwrap().clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_taken_under_writes_leaves_the_member_identical_to_the_others() {
    let (mut set, primary, coll, behind) = compacting_set_one_down().await;
    for b in 0..20 {
        coll.insert_many((b * 20..b * 20 + 20).map(|i| doc! {"_id": i, "n": 0}))
            .await
            .unwrap();
    }
    compacted_past_the_killed_member(&set, primary).await;
    // Inserts, updates and deletes keep coming while the member copies the data and
    // catches up after it.
    let writer = {
        let coll = coll.clone();
        tokio::spawn(async move {
            for round in 0..30i32 {
                coll.insert_one(doc! {"_id": 1000 + round, "n": round})
                    .await
                    .unwrap();
                coll.update_many(doc! {"_id": {"$lt": 400}}, doc! {"$inc": {"n": 1}})
                    .await
                    .unwrap();
                coll.delete_one(doc! {"_id": round * 3}).await.unwrap();
            }
        })
    };
    set.restart(behind).await;
    writer.await.unwrap();
    coll.insert_one(doc! {"_id": "last"}).await.unwrap();
    for i in 0..3 {
        caught_up(&set, i).await;
    }
    assert!(set.status(behind).snapshots_installed >= 1);
    let expected = contents_of(&set, primary).await;
    assert_eq!(expected.len(), 400 - 30 + 30 + 1);
    for i in 0..3 {
        assert_eq!(contents_of(&set, i).await, expected, "member {i}");
    }
    set.stop().await;
}

/// Runs `cmd` on member `i` directly, as a secondary read may.
async fn run_on(set: &TestReplicaSet, i: usize, db: &'static str, cmd: Document) -> Document {
    let node = set.member(i).unwrap().node.clone();
    tokio::task::spawn_blocking(move || {
        let opts = shard::node::RunOptions {
            secondary_ok: true,
            ..Default::default()
        };
        node.run_command_with(db, &cmd, opts)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_installing_a_snapshot_reports_startup2_and_serves_no_reads() {
    let (mut set, primary, coll, behind) = compacting_set_one_down().await;
    for i in 0..50 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    compacted_past_the_killed_member(&set, primary).await;
    // The member's copy stalls at the source, so it is seen in the middle of its install.
    set.hold_snapshots(true);
    set.restart(behind).await;
    wait_for("the member to start installing", || {
        set.status(behind).installing_snapshot
    })
    .await;
    let status = run_on(&set, behind, "admin", doc! {"replSetGetStatus": 1}).await;
    assert_eq!(status.get_i32("myState"), Ok(5), "{status}");
    let hello = run_on(&set, behind, "admin", doc! {"hello": 1}).await;
    assert_eq!(hello.get_bool("secondary"), Ok(false), "{hello}");
    assert_eq!(hello.get_bool("isWritablePrimary"), Ok(false), "{hello}");
    // Its tables are partial: a read gets NotPrimaryOrSecondary, so drivers go elsewhere.
    let read = run_on(&set, behind, "test", doc! {"find": "log"}).await;
    assert_eq!(read.get_i32("code"), Ok(13436), "{read}");

    set.hold_snapshots(false);
    caught_up(&set, behind).await;
    assert!(!set.status(behind).installing_snapshot);
    assert_eq!(count_on(&set, behind).await, 50);
    let status = run_on(&set, behind, "admin", doc! {"replSetGetStatus": 1}).await;
    assert_eq!(status.get_i32("myState"), Ok(2), "{status}");
    set.stop().await;
}
