//! Log compaction: after each checkpoint the Raft log drops what WiredTiger holds, a
//! restarted member recovers from its checkpoint plus the shortened log, and a member
//! that fell behind the compacted log stops with "too stale" instead of skipping data.

use std::time::Duration;

use bson::{doc, Document};
use tests::replica_set::TestReplicaSet;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_log_is_compacted_and_a_stale_member_stops() {
    // Keep no log beyond the checkpoint; compact every second.
    let mut set = TestReplicaSet::start_compacting(0, 1).await;
    let (primary, _) = set.wait_for_primary(LIVENESS).await.expect("primary");
    let client = set.client(primary, "").await;
    let coll = client.database("test").collection::<Document>("log");
    for i in 0..150 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    let last = set.status(primary).last_index;
    wait_for("every member to compact", || {
        (0..3).all(|i| set.status(i).first_index > last / 2)
    })
    .await;

    // A restarted member recovers from its checkpoint plus what is left of its log.
    let secondary = (0..3).find(|&i| i != primary).unwrap();
    set.kill(secondary).await;
    set.restart(secondary).await;
    wait_for("the restarted member to catch up", || {
        let p = set
            .primary()
            .map(|p| set.status(p).commit)
            .unwrap_or(u64::MAX);
        set.status(secondary).applied >= p
    })
    .await;
    let node = set.member(secondary).unwrap().node.clone();
    let count = tokio::task::spawn_blocking(move || {
        let opts = shard::node::RunOptions {
            secondary_ok: true,
            ..Default::default()
        };
        node.run_command_with("test", &doc! {"count": "log"}, opts)
    })
    .await
    .unwrap();
    assert_eq!(count.get_i32("n"), Ok(150), "{count}");

    // A member that misses more than the primary keeps cannot catch up from the log: it
    // halts and says why, and the other two go on.
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
    wait_for("the stale member to halt", || {
        set.status(stale).halted.is_some()
    })
    .await;
    let why = set.status(stale).halted.unwrap();
    assert!(why.contains("too stale"), "{why}");
    coll.insert_one(doc! {"_id": 300}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 301);
    set.stop().await;
}
