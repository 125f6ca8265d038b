//! `movePrimary` through real drivers: a database's unsharded collections move to another
//! shard whole (documents, indexes, options) while a writer goes on, a router that cached
//! the old primary follows the move (`StaleDbVersion`), a retried write applies once, the
//! donor keeps nothing, `removeShard` of a former primary completes, and bad requests get
//! MongoDB's errors.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use tests::sharded::{
    database_primary, drain, error_code as code, other_shard, shard_by_k, until_accepted,
    TestShardedCluster,
};

/// The database's version (`version.lastMod`) in `config.databases`.
async fn database_version(client: &mongodb::Client, db: &str) -> i64 {
    let entry = client
        .database("config")
        .collection::<Document>("databases")
        .find_one(doc! {"_id": db})
        .await
        .unwrap()
        .unwrap();
    let v = entry.get_document("version").unwrap();
    v.get_i64("lastMod")
        .or_else(|_| v.get_i32("lastMod").map(i64::from))
        .unwrap()
}

/// Inserts documents `base..` into `c` until `stop`, returning the ids acknowledged.
async fn writer(c: mongodb::Collection<Document>, base: i32, stop: Arc<AtomicBool>) -> Vec<i32> {
    let mut acked = Vec::new();
    let started = Instant::now();
    for i in base..base + 100_000 {
        if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        c.insert_one(doc! {"_id": i, "k": i})
            .await
            .unwrap_or_else(|e| panic!("insert {i} during movePrimary: {e}"));
        acked.push(i);
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsharded_collections_move_whole_under_writes_and_stale_routers_follow() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    // Keeps what it read for an hour: only database versions can correct it.
    let stale_router = cluster.add_router(3_600_000).await;
    let client = cluster.client(0).await;
    let stale = cluster.client(stale_router).await;
    let admin = client.database("admin");
    let db = client.database("mp");
    let u = db.collection::<Document>("u");
    let docs: Vec<Document> = (0..3000).map(|i| doc! {"_id": i, "k": i}).collect();
    u.insert_many(docs).await.unwrap();
    u.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"k": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .unique(true)
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    db.run_command(doc! {"create": "opts", "storageEngine": {"wiredTiger": {"configString": ""}}})
        .await
        .unwrap();
    // A sharded collection of the same database: its chunks stay where they are.
    let s = db.collection::<Document>("s");
    let docs: Vec<Document> = (0..200).map(|i| doc! {"_id": i, "k": i}).collect();
    s.insert_many(docs).await.unwrap();
    shard_by_k(&client, &s).await;

    let from = database_primary(&client, "mp").await;
    let to = other_shard(&from);
    let version = database_version(&client, "mp").await;
    // The stale router learns the primary now.
    let su = stale.database("mp").collection::<Document>("u");
    assert_eq!(su.count_documents(doc! {}).await.unwrap(), 3000);

    // A retryable insert that ran on the donor, sent again after the move.
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let lsid = doc! {"id": bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: (1..=16).collect(),
    }};
    let insert = doc! {
        "insert": "u", "documents": [{"_id": -1, "k": -1}],
        "lsid": lsid, "txnNumber": 1_i64, "$db": "mp",
    };
    let reply = tests::raw_command(&mut conn, 1, insert.clone()).await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");

    let stop = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn(writer(u.clone(), 10_000, stop.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let moved = admin
        .run_command(doc! {"movePrimary": "mp", "to": to})
        .await
        .unwrap();
    assert_eq!(moved.get_f64("ok"), Ok(1.0), "{moved}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let acked = w.await.unwrap();
    assert!(!acked.is_empty(), "the writer never ran");
    eprintln!("{} inserts acknowledged around the move", acked.len());
    assert_eq!(database_primary(&client, "mp").await, to);
    assert_eq!(database_version(&client, "mp").await, version + 1);

    // The retry is recognised on the new primary: not a duplicate key.
    let reply = tests::raw_command(&mut conn, 2, insert).await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    assert!(reply.get_array("writeErrors").is_err(), "{reply}");

    // Every acknowledged document, once, through both routers.
    let expected = 3001 + acked.len() as u64;
    for c in [&u, &su] {
        let ids = tests::ids_of(c, doc! {}).await;
        assert_eq!(ids.len() as u64, expected);
        let set: HashSet<i32> = ids.iter().copied().collect();
        assert_eq!(set.len(), ids.len(), "a document returned twice");
        assert!(
            acked.iter().all(|i| set.contains(i)),
            "an acknowledged insert is missing"
        );
    }
    // A write through the stale router lands on the new primary.
    su.insert_one(doc! {"_id": -2, "k": -2}).await.unwrap();
    assert_eq!(u.count_documents(doc! {}).await.unwrap(), expected + 1);
    // Indexes and options came along: the unique index still refuses a duplicate.
    let dup = u.insert_one(doc! {"_id": -3, "k": 5}).await.unwrap_err();
    assert_eq!(code(&dup), Some(11000), "{dup}");
    let names: Vec<String> = db.list_collection_names().await.unwrap();
    for n in ["u", "opts", "s"] {
        assert!(names.contains(&n.to_string()), "{n} not listed: {names:?}");
    }
    let opts = db
        .list_collections()
        .filter(doc! {"name": "opts"})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert!(opts[0].options.storage_engine.is_some(), "{opts:?}");
    // The sharded collection did not move and still answers whole.
    assert_eq!(s.count_documents(doc! {}).await.unwrap(), 200);
    assert_eq!(
        stale
            .database("mp")
            .collection::<Document>("s")
            .count_documents(doc! {})
            .await
            .unwrap(),
        200
    );

    // Back again: it would find the donor's copy (NamespaceExists) had it not dropped it.
    admin
        .run_command(doc! {"movePrimary": "mp", "to": from.as_str()})
        .await
        .unwrap();
    assert_eq!(database_primary(&client, "mp").await, from);
    assert_eq!(database_version(&client, "mp").await, version + 2);
    assert_eq!(su.count_documents(doc! {}).await.unwrap(), expected + 1);
    assert_eq!(u.count_documents(doc! {}).await.unwrap(), expected + 1);

    // Dropped and created again: the new database starts at a newer version, and the
    // stale router, which cached the dropped one, is sent to read it again.
    db.drop().await.unwrap();
    u.insert_one(doc! {"_id": 1, "k": 1}).await.unwrap();
    assert!(database_version(&client, "mp").await > version + 2);
    assert_eq!(su.count_documents(doc! {}).await.unwrap(), 1);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_former_primary_shard_can_be_removed_and_bad_requests_get_mongodb_errors() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let c = client.database("rm").collection::<Document>("u");
    c.insert_many((0..100).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    let leaving = database_primary(&client, "rm").await;
    let staying = other_shard(&leaving);

    let started = admin
        .run_command(doc! {"removeShard": leaving.as_str()})
        .await
        .unwrap();
    assert_eq!(started.get_str("state"), Ok("started"), "{started}");
    let ongoing = admin
        .run_command(doc! {"removeShard": leaving.as_str()})
        .await
        .unwrap();
    assert_eq!(ongoing.get_str("state"), Ok("ongoing"), "{ongoing}");
    let to_move: Vec<&str> = ongoing
        .get_array("dbsToMove")
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    assert!(to_move.contains(&"rm"), "{ongoing}");
    for db in to_move {
        admin
            .run_command(doc! {"movePrimary": db, "to": staying})
            .await
            .unwrap();
    }
    drain(&admin, &leaving, Duration::from_secs(120)).await;
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 100);

    let bad = |cmd: Document| {
        let admin = admin.clone();
        async move { code(&admin.run_command(cmd).await.unwrap_err()) }
    };
    assert_eq!(
        bad(doc! {"movePrimary": "nosuchdb", "to": staying}).await,
        Some(26)
    );
    assert_eq!(
        bad(doc! {"movePrimary": "rm", "to": "nosuchshard"}).await,
        Some(70)
    );
    assert_eq!(
        bad(doc! {"movePrimary": "admin", "to": staying}).await,
        Some(72)
    );
    assert_eq!(bad(doc! {"movePrimary": "rm"}).await, Some(9));
    assert_eq!(bad(doc! {"movePrimary": 1, "to": staying}).await, Some(14));
    let elsewhere = client
        .database("rm")
        .run_command(doc! {"movePrimary": "rm", "to": staying})
        .await
        .unwrap_err();
    assert_eq!(code(&elsewhere), Some(13), "{elsewhere}");
    // Moving to the shard that is already primary changes nothing.
    admin
        .run_command(doc! {"movePrimary": "rm", "to": staying})
        .await
        .unwrap();
    cluster.stop().await;
}

/// A `movePrimary` whose coordinator died inside its critical section: the donor holds
/// writes to the database (each waits, bounded by its deadline) until the config server
/// primary's recovery pass abandons the dead move (fencing its commit off); no other
/// `movePrimary` is needed, and one afterwards moves the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_abandoned_by_its_coordinator_is_recovered() {
    use router::shard_client::Forward;
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("ab");
    let c = db.collection::<Document>("u");
    c.insert_many((0..100).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    let donor = database_primary(&client, "ab").await;
    let recipient = other_shard(&donor);
    let version = database_version(&client, "ab").await;
    // The config servers recover nothing until the dead coordinator's state is set up
    // and the writes it holds are seen to wait.
    cluster.coordinator.pause(true);
    // What a coordinator leaves behind when it dies in step 4: the donor in its critical
    // section, the recipient ready to be primary, and a lock whose owner no longer runs.
    let fwd = Forward {
        writes: true,
        ..Default::default()
    };
    for (shard, lm, critical) in [
        (recipient, version + 1, false),
        (donor.as_str(), version, true),
    ] {
        let cmd =
            doc! {"_shardsvrDbPlacement": 1, "primary": true, "lastMod": lm, "critical": critical};
        let (reply, _, _) = cluster
            .direct(shard)
            .run("ab", &cmd, &fwd, "test")
            .await
            .unwrap();
        assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    }
    client
        .database("config")
        .collection::<Document>("migrations")
        .insert_one(doc! {
            "_id": "ab", "owner": "dead", "movePrimary": true, "donor": &donor,
            "recipient": recipient, "lastMod": version,
        })
        .await
        .unwrap();

    // A write waits for the move, within its deadline; reads go on meanwhile.
    let e = db
        .run_command(doc! {"insert": "u", "documents": [{"_id": 1000}], "maxTimeMS": 300})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(50), "{e}");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 100);

    // No movePrimary is asked for: the config servers' recovery pass ends the critical section.
    cluster.coordinator.pause(false);
    let insert = doc! {"insert": "u", "documents": [{"_id": 1000}], "maxTimeMS": 300};
    let inserted = until_accepted(&db, insert, Duration::from_secs(60)).await;
    assert_eq!(inserted.unwrap().get_i32("n"), Ok(1));
    assert_eq!(database_primary(&client, "ab").await, donor);
    let entry = client
        .database("config")
        .collection::<Document>("databases")
        .find_one(doc! {"_id": "ab"})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        entry.get_array("fencedMoves").unwrap(),
        &vec![Bson::from("dead")]
    );

    admin
        .run_command(doc! {"movePrimary": "ab", "to": recipient})
        .await
        .unwrap();
    assert_eq!(database_primary(&client, "ab").await, recipient);
    c.insert_one(doc! {"_id": 1001}).await.unwrap();
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 102);
    cluster.stop().await;
}
