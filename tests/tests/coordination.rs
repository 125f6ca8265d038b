//! Killing the router that started a `shardCollection`, a `moveChunk` or a `movePrimary`
//! leaves nothing half done: the config server primary runs the operation
//! (`configsvr::coordinator`) and finishes it without the router. The coordinator is
//! paused while the router is killed, so each test kills it with its operation
//! certainly unfinished; then the operation completes, the data is all there once, and the
//! catalog has no lock left.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures::TryStreamExt;
use tests::sharded::{database_primary, other_shard, shard_by_k, TestShardedCluster};

/// Waits (bounded) until `config.coordinators` has a `kind` entry in `state`; returns it.
async fn entry_in_state(client: &mongodb::Client, kind: &str, state: &str) -> Document {
    let entries = client
        .database("config")
        .collection::<Document>("coordinators");
    let started = Instant::now();
    loop {
        let found = entries
            .find_one(doc! {"kind": kind, "state": state})
            .await
            .unwrap();
        if let Some(entry) = found {
            return entry;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {kind} request reached '{state}'"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `cmd` through a router of its own, kills that router once the config servers
/// have the request, and returns once the request has finished without it.
async fn ask_then_kill_the_router(cluster: &mut TestShardedCluster, kind: &str, cmd: Document) {
    let doomed = cluster.add_router(1000).await;
    let doomed_client = cluster.client(doomed).await;
    let watcher = cluster.client(0).await;
    cluster.coordinator.pause(true);
    let asked = tokio::spawn(async move { doomed_client.database("admin").run_command(cmd).await });
    entry_in_state(&watcher, kind, "pending").await;
    cluster.kill_router(doomed);
    asked.abort();
    cluster.coordinator.pause(false);
    let done = entry_in_state(&watcher, kind, "done").await;
    eprintln!("finished without its router: {done}");
    let locks = watcher
        .database("config")
        .collection::<Document>("migrations");
    assert_eq!(locks.count_documents(doc! {}).await.unwrap(), 0);
}

async fn ids(c: &mongodb::Collection<Document>) -> Vec<i32> {
    let mut ids: Vec<i32> = c
        .find(doc! {})
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap()
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_collection_whose_router_died_finishes() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let c = client.database("co").collection::<Document>("s");
    c.insert_many((0..500).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    c.create_index(mongodb::IndexModel::builder().keys(doc! {"k": 1}).build())
        .await
        .unwrap();
    let cmd = doc! {"shardCollection": "co.s", "key": {"k": 1}};
    ask_then_kill_the_router(&mut cluster, "shardCollection", cmd).await;
    let entry = client
        .database("config")
        .collection::<Document>("collections")
        .find_one(doc! {"_id": "co.s"})
        .await
        .unwrap()
        .expect("the collection is sharded");
    assert_eq!(entry.get_document("key").unwrap(), &doc! {"k": 1});
    assert_eq!(ids(&c).await, (0..500).collect::<Vec<_>>());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_chunk_whose_router_died_finishes() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let c = client.database("co").collection::<Document>("m");
    c.insert_many((0..2000).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    shard_by_k(&client, &c).await;
    let from = database_primary(&client, "co").await;
    let to = other_shard(&from);
    let cmd = doc! {"moveChunk": "co.m", "find": {"k": 0}, "to": to};
    ask_then_kill_the_router(&mut cluster, "moveRange", cmd).await;
    let chunk = client
        .database("config")
        .collection::<Document>("chunks")
        .find_one(doc! {"ns": "co.m"})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(chunk.get_str("shard"), Ok(to));
    assert_eq!(ids(&c).await, (0..2000).collect::<Vec<_>>());
    // The donor deleted its copy: each document is stored once.
    let stats = client
        .database("co")
        .run_command(doc! {"collStats": "m"})
        .await
        .unwrap();
    assert_eq!(
        stats
            .get_i32("count")
            .map(i64::from)
            .or_else(|_| stats.get_i64("count")),
        Ok(2000),
        "{stats}"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_primary_whose_router_died_finishes() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let c = client.database("cp").collection::<Document>("u");
    c.insert_many((0..1000).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    let from = database_primary(&client, "cp").await;
    let to = other_shard(&from);
    let cmd = doc! {"movePrimary": "cp", "to": to};
    ask_then_kill_the_router(&mut cluster, "movePrimary", cmd).await;
    assert_eq!(database_primary(&client, "cp").await, to);
    assert_eq!(ids(&c).await, (0..1000).collect::<Vec<_>>());
    cluster.stop().await;
}
