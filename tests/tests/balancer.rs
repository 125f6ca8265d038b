//! The balancer through real drivers: it evens out chunks between shards, pulls a zone's
//! range to the zone's shard, splits chunks grown past the chunk size, drains a shard
//! being removed, and stops and starts on command, with every document counted once
//! throughout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use tests::sharded::{database_primary, drain, per_shard_counts, shard_by_k, TestShardedCluster};

/// Chunks of `ns` per shard, from `config.chunks`.
async fn chunks_per_shard(client: &mongodb::Client, ns: &str) -> BTreeMap<String, usize> {
    let chunks: Vec<Document> = client
        .database("config")
        .collection::<Document>("chunks")
        .find(doc! {"ns": ns})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for c in chunks {
        *out.entry(c.get_str("shard").unwrap().to_string())
            .or_default() += 1;
    }
    out
}

/// Waits (bounded) until `done` holds, polling.
async fn until<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balancer_evens_chunks_honours_zones_splits_and_drains() {
    let cluster = TestShardedCluster::start(2, 1).await;
    cluster
        .coordinator
        .set_balancer_interval(Duration::from_millis(200));
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    admin.run_command(doc! {"balancerStop": 1}).await.unwrap();
    let status = admin.run_command(doc! {"balancerStatus": 1}).await.unwrap();
    assert_eq!(status.get_str("mode"), Ok("off"), "{status}");

    let db = client.database("bal");
    let c = db.collection::<Document>("c");
    let docs: Vec<Document> = (0..4000).map(|i| doc! {"_id": i, "k": i}).collect();
    c.insert_many(docs).await.unwrap();
    shard_by_k(&client, &c).await;
    for at in (500..4000).step_by(500) {
        admin
            .run_command(doc! {"split": "bal.c", "middle": {"k": at}})
            .await
            .unwrap();
    }
    let before = chunks_per_shard(&client, "bal.c").await;
    assert_eq!(before.values().sum::<usize>(), 8);
    assert_eq!(
        before.len(),
        1,
        "all chunks start on the primary shard: {before:?}"
    );
    // Stopped: nothing moves.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(chunks_per_shard(&client, "bal.c").await, before);

    admin.run_command(doc! {"balancerStart": 1}).await.unwrap();
    until("even chunks", Duration::from_secs(90), || async {
        let per = chunks_per_shard(&client, "bal.c").await;
        per.len() == 2 && per.values().all(|n| *n == 4)
    })
    .await;
    let status = admin.run_command(doc! {"balancerStatus": 1}).await.unwrap();
    assert_eq!(status.get_str("mode"), Ok("full"), "{status}");
    assert!(status.get_i64("numBalancerRounds").unwrap() > 0, "{status}");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 4000);
    until(
        "donors' copies deleted",
        Duration::from_secs(30),
        || async { per_shard_counts(&db, "c").await.iter().sum::<i64>() == 4000 },
    )
    .await;

    // A zone inside a chunk: split at its bounds, then moved to the zone's shard.
    let primary = before.keys().next().unwrap().clone();
    let other = if primary == "shard0" {
        "shard1"
    } else {
        "shard0"
    };
    let zone_chunk = client
        .database("config")
        .collection::<Document>("chunks")
        .find_one(doc! {"ns": "bal.c", "min": {"k": Bson::MinKey}})
        .await
        .unwrap()
        .unwrap();
    let zone_shard = if zone_chunk.get_str("shard").unwrap() == primary {
        other.to_string()
    } else {
        primary.clone()
    };
    admin
        .run_command(doc! {"addShardToZone": &zone_shard, "zone": "Z"})
        .await
        .unwrap();
    admin
        .run_command(
            doc! {"updateZoneKeyRange": "bal.c", "min": {"k": 100}, "max": {"k": 200}, "zone": "Z"},
        )
        .await
        .unwrap();
    until(
        "the zone's range on the zone's shard",
        Duration::from_secs(90),
        || async {
            let chunk = client
                .database("config")
                .collection::<Document>("chunks")
                .find_one(doc! {"ns": "bal.c", "min": {"k": 100}, "max": {"k": 200}})
                .await
                .unwrap();
            chunk.is_some_and(|c| c.get_str("shard") == Ok(zone_shard.as_str()))
        },
    )
    .await;
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 4000);

    // A chunk grown past the chunk size (1 MB here) is split.
    client
        .database("config")
        .collection::<Document>("settings")
        .update_one(doc! {"_id": "chunksize"}, doc! {"$set": {"value": 1}})
        .upsert(true)
        .await
        .unwrap();
    let big = db.collection::<Document>("big");
    let pad = "x".repeat(10_000);
    let docs: Vec<Document> = (0..300)
        .map(|i| doc! {"_id": i, "k": i, "pad": &pad})
        .collect();
    big.insert_many(docs).await.unwrap();
    shard_by_k(&client, &big).await;
    until(
        "a 3 MB chunk split in three",
        Duration::from_secs(90),
        || async {
            chunks_per_shard(&client, "bal.big")
                .await
                .values()
                .sum::<usize>()
                >= 3
        },
    )
    .await;
    assert_eq!(big.count_documents(doc! {}).await.unwrap(), 300);

    // Draining: the shard that is not the database's primary gives everything away.
    let db_primary = database_primary(&client, "bal").await;
    let leaving = if db_primary == "shard0" {
        "shard1"
    } else {
        "shard0"
    };
    admin
        .run_command(doc! {"removeShardFromZone": leaving, "zone": "Z"})
        .await
        .unwrap();
    let started = admin
        .run_command(doc! {"removeShard": leaving})
        .await
        .unwrap();
    assert_eq!(started.get_str("state"), Ok("started"), "{started}");
    drain(&admin, leaving, Duration::from_secs(120)).await;
    let shards = admin.run_command(doc! {"listShards": 1}).await.unwrap();
    assert_eq!(shards.get_array("shards").unwrap().len(), 1, "{shards}");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 4000);
    assert_eq!(big.count_documents(doc! {}).await.unwrap(), 300);
    cluster.stop().await;
}
