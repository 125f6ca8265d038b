//! Killing the router that started a `shardCollection`, a `moveChunk`, a `movePrimary`, a
//! `drop` or a `dropDatabase` leaves nothing half done: the config server primary runs the operation
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

/// Sends `cmd` (to `db`) through a router of its own, kills that router once the config
/// servers have the request, and returns once the request has finished without it.
async fn ask_then_kill_the_router(
    cluster: &mut TestShardedCluster,
    kind: &str,
    db: &'static str,
    cmd: Document,
) {
    let doomed = cluster.add_router(1000).await;
    let doomed_client = cluster.client(doomed).await;
    let watcher = cluster.client(0).await;
    cluster.coordinator.pause(true);
    let asked = tokio::spawn(async move { doomed_client.database(db).run_command(cmd).await });
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
    ask_then_kill_the_router(&mut cluster, "shardCollection", "admin", cmd).await;
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
    ask_then_kill_the_router(&mut cluster, "moveRange", "admin", cmd).await;
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
    ask_then_kill_the_router(&mut cluster, "movePrimary", "admin", cmd).await;
    assert_eq!(database_primary(&client, "cp").await, to);
    assert_eq!(ids(&c).await, (0..1000).collect::<Vec<_>>());
    cluster.stop().await;
}

/// A sharded collection `co.<name>` of 1000 documents whose chunks are on both shards.
async fn spread_collection(client: &mongodb::Client, name: &str) -> mongodb::Collection<Document> {
    let c = client.database("co").collection::<Document>(name);
    c.insert_many((0..1000).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    shard_by_k(client, &c).await;
    let admin = client.database("admin");
    let ns = format!("co.{name}");
    admin
        .run_command(doc! {"split": &ns, "middle": {"k": 500}})
        .await
        .unwrap();
    let to = other_shard(&database_primary(client, "co").await);
    admin
        .run_command(doc! {"moveChunk": &ns, "find": {"k": 600}, "to": to})
        .await
        .unwrap();
    c
}

/// Whether the catalog still lists `ns` as sharded.
async fn catalogued(client: &mongodb::Client, ns: &str) -> bool {
    let config = client.database("config");
    let collections = config.collection::<Document>("collections");
    let chunks = config.collection::<Document>("chunks");
    collections.count_documents(doc! {"_id": ns}).await.unwrap()
        + chunks.count_documents(doc! {"ns": ns}).await.unwrap()
        > 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_whose_router_died_finishes() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let c = spread_collection(&client, "d").await;
    // A second router that cached the sharded collection too, to read it afterwards.
    let reader = cluster.add_router(60_000).await;
    let read = cluster.client(reader).await.database("co").collection("d");
    assert_eq!(ids(&read).await.len(), 1000);
    ask_then_kill_the_router(&mut cluster, "drop", "co", doc! {"drop": "d"}).await;
    assert!(!catalogued(&client, "co.d").await);
    let names = client.database("co").list_collection_names().await.unwrap();
    assert!(!names.contains(&"d".to_string()), "{names:?}");
    // Both routers still cache the collection as sharded: the shards refuse their
    // versions, and each routes the command again as unsharded.
    c.insert_one(doc! {"_id": 7, "k": 7}).await.unwrap();
    assert_eq!(ids(&read).await, vec![7]);
    c.delete_one(doc! {"_id": 7}).await.unwrap();
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_database_whose_router_died_finishes() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    spread_collection(&client, "x").await;
    let plain = client.database("co").collection::<Document>("plain");
    plain.insert_one(doc! {"_id": 1}).await.unwrap();
    let cmd = doc! {"dropDatabase": 1};
    ask_then_kill_the_router(&mut cluster, "dropDatabase", "co", cmd).await;
    assert!(!catalogued(&client, "co.x").await);
    let databases = client
        .database("config")
        .collection::<Document>("databases");
    assert_eq!(
        databases.count_documents(doc! {"_id": "co"}).await.unwrap(),
        0
    );
    let names = client.list_database_names().await.unwrap();
    assert!(!names.contains(&"co".to_string()), "{names:?}");
    cluster.stop().await;
}

/// A drop whose coordinator stopped after taking its lock (the lock's owner runs nowhere)
/// is finished by the primary's recovery pass, with no request left to run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_drop_is_finished_by_the_recovery_pass() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let c = spread_collection(&client, "a").await;
    let locks = client
        .database("config")
        .collection::<Document>("migrations");
    cluster.coordinator.pause(true);
    let orphan = doc! {"_id": "co.a", "owner": bson::oid::ObjectId::new(), "drop": "collection"};
    locks.insert_one(orphan).await.unwrap();
    cluster.coordinator.pause(false);
    let started = Instant::now();
    while locks.count_documents(doc! {}).await.unwrap() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the abandoned drop was not finished"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!catalogued(&client, "co.a").await);
    assert_eq!(ids(&c).await, Vec::<i32>::new());
    cluster.stop().await;
}

/// A split whose splitter stopped between its two catalog writes (the upper chunk
/// written, the lower one not yet shrunk) leaves overlapping entries. Routing reads them
/// as the split, so a migration of the lower chunk moves only its own range and every
/// document stays readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_done_split_reads_as_the_split() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let c = client.database("co").collection::<Document>("h");
    c.insert_many((0..1000).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    shard_by_k(&client, &c).await;
    let chunks = client.database("config").collection::<Document>("chunks");
    let mut upper = chunks.find_one(doc! {"ns": "co.h"}).await.unwrap().unwrap();
    let lastmod = upper.get_timestamp("lastmod").unwrap();
    upper.insert("_id", bson::oid::ObjectId::new());
    upper.insert("min", doc! {"k": 500});
    upper.insert(
        "lastmod",
        bson::Timestamp {
            time: lastmod.time,
            increment: lastmod.increment + 1,
        },
    );
    chunks.insert_one(upper).await.unwrap();
    let admin = client.database("admin");
    admin
        .run_command(doc! {"flushRouterConfig": "co.h"})
        .await
        .unwrap();
    let to = other_shard(&database_primary(&client, "co").await);
    admin
        .run_command(doc! {"moveChunk": "co.h", "find": {"k": 0}, "to": to})
        .await
        .unwrap();
    assert_eq!(ids(&c).await, (0..1000).collect::<Vec<_>>());
    // The move put the lower entry right: it ends where the upper one begins.
    let lower = chunks
        .find_one(doc! {"ns": "co.h", "min": {"k": bson::Bson::MinKey}})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lower.get_document("max").unwrap(), &doc! {"k": 500});
    let counts = tests::sharded::per_shard_counts(&client.database("co"), "h").await;
    assert_eq!(counts.iter().sum::<i64>(), 1000, "{counts:?}");
    assert!(counts.iter().all(|&n| n == 500), "{counts:?}");
    cluster.stop().await;
}
