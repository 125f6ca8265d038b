//! Chunk migrations through real drivers: documents keep their count and contents while
//! ranges move between shards under concurrent writes, a router that missed a migration
//! still answers correctly (shard versions and `StaleConfig`), and bad requests get
//! MongoDB's errors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use tests::sharded::{
    database_primary, drain, error_code as code, other_shard, per_shard_counts, shard_by_k,
    until_accepted, TestShardedCluster,
};

/// The shard holding the chunk of `ns` that starts at `min` (from `config.chunks`).
async fn chunk_shard(client: &mongodb::Client, ns: &str, min: Document) -> String {
    let chunk = client
        .database("config")
        .collection::<Document>("chunks")
        .find_one(doc! {"ns": ns, "min": min})
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no chunk of {ns} starts there"));
    chunk.get_str("shard").unwrap().to_string()
}

/// Documents as stored over all shards (orphans included), from `collStats`.
async fn stored_per_shard(db: &mongodb::Database, coll: &str) -> i64 {
    per_shard_counts(db, coll).await.iter().sum()
}

/// A small deterministic generator (no shared state between tasks).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const BASE: i32 = 20_000;

/// What one writer had acknowledged.
#[derive(Default)]
struct Acked {
    /// Documents it inserted and did not delete.
    live: Vec<i32>,
    /// `$inc` acknowledged per base document.
    increments: HashMap<i32, i32>,
    /// Writes acknowledged.
    ops: usize,
}

async fn writer(c: mongodb::Collection<Document>, seed: u64, stop: Arc<AtomicBool>) -> Acked {
    let mut rng = Lcg(seed);
    let mut acked = Acked::default();
    let started = Instant::now();
    for j in 0..100_000i32 {
        if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        acked.ops += 1;
        match j % 3 {
            0 => {
                let id = seed as i32 * 1_000_000 + j;
                let k = rng.below(BASE as u64) as i32;
                c.insert_one(doc! {"_id": id, "k": k, "n": 0})
                    .await
                    .expect("insert acknowledged");
                acked.live.push(id);
            }
            1 => {
                let id = rng.below(BASE as u64) as i32;
                let r = c
                    .update_one(doc! {"_id": id}, doc! {"$inc": {"n": 1}})
                    .await
                    .expect("update acknowledged");
                assert_eq!(
                    r.matched_count, 1,
                    "update of base document {id} matched nothing"
                );
                *acked.increments.entry(id).or_default() += 1;
            }
            _ => {
                if acked.live.len() > 3 {
                    let id = acked
                        .live
                        .remove(rng.below(acked.live.len() as u64) as usize);
                    let r = c
                        .delete_one(doc! {"_id": id})
                        .await
                        .expect("delete acknowledged");
                    assert_eq!(r.deleted_count, 1, "delete of {id} found nothing");
                }
            }
        }
    }
    acked
}

/// Counts the base documents while chunks move: the count never wavers.
async fn counter(c: mongodb::Collection<Document>, stop: Arc<AtomicBool>) -> usize {
    let mut checks = 0;
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(60) {
        let n = c
            .count_documents(doc! {"_id": {"$lt": BASE}})
            .await
            .expect("count");
        assert_eq!(n, BASE as u64, "count of base documents during migrations");
        checks += 1;
    }
    checks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chunks_move_under_writes_and_every_document_stays_exactly_once() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("mig");
    let c = db.collection::<Document>("c");
    let base: Vec<Document> = (0..BASE).map(|i| doc! {"_id": i, "k": i, "n": 0}).collect();
    c.insert_many(base).await.unwrap();
    shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "mig.c", "middle": {"k": BASE / 2}})
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (1..=3u64)
        .map(|seed| tokio::spawn(writer(c.clone(), seed, stop.clone())))
        .collect();
    let count = tokio::spawn(counter(c.clone(), stop.clone()));

    // Each half moves away and back while the writers and the counter run.
    for round in 0..4 {
        let min = if round % 2 == 0 {
            doc! {"k": BASE / 2}
        } else {
            doc! {"k": Bson::MinKey}
        };
        // Writers get going between moves as well as during them.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let from = chunk_shard(&client, "mig.c", min.clone()).await;
        admin
            .run_command(
                doc! {"moveRange": "mig.c", "min": min.clone(), "toShard": other_shard(&from)},
            )
            .await
            .unwrap_or_else(|e| panic!("moveRange round {round}: {e}"));
        assert_eq!(chunk_shard(&client, "mig.c", min).await, other_shard(&from));
    }
    // Then the balancer moves chunks: the shard that is not the database's primary is
    // drained (`removeShard`) while the writers and the counter go on.
    for at in [BASE / 4, 3 * BASE / 4] {
        admin
            .run_command(doc! {"split": "mig.c", "middle": {"k": at}})
            .await
            .unwrap();
    }
    let leaving = other_shard(&database_primary(&client, "mig").await);
    cluster
        .coordinator
        .set_balancer_interval(Duration::from_millis(100));
    drain(&admin, leaving, Duration::from_secs(120)).await;
    stop.store(true, Ordering::SeqCst);
    let checks = count.await.unwrap();
    assert!(checks > 0, "the counter never ran");
    eprintln!("counted the base documents {checks} times during the migrations");
    let mut expected: HashMap<i32, i32> = (0..BASE).map(|i| (i, 0)).collect();
    let mut ops = 0;
    for w in writers {
        let acked = w.await.unwrap();
        ops += acked.ops;
        for id in acked.live {
            expected.insert(id, 0);
        }
        for (id, n) in acked.increments {
            *expected.get_mut(&id).unwrap() += n;
        }
    }

    eprintln!(
        "{ops} writes acknowledged, {} documents expected",
        expected.len()
    );
    assert!(ops > 30, "too few writes ran alongside the migrations");
    let all: Vec<Document> = c.find(doc! {}).await.unwrap().try_collect().await.unwrap();
    let mut seen: HashMap<i32, i32> = HashMap::new();
    for d in &all {
        let id = d.get_i32("_id").unwrap();
        assert!(
            seen.insert(id, d.get_i32("n").unwrap()).is_none(),
            "document {id} returned twice"
        );
    }
    assert_eq!(seen, expected, "documents after the migrations");
    assert_eq!(
        c.count_documents(doc! {}).await.unwrap(),
        expected.len() as u64
    );
    // The donors deleted their copies: nothing is stored twice.
    assert_eq!(stored_per_shard(&db, "c").await, expected.len() as i64);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_that_missed_a_migration_still_answers_correctly() {
    let mut cluster = TestShardedCluster::start(2, 1).await;
    // Keeps a collection's routing for an hour: only shard versions can correct it.
    let stale_router = cluster.add_router(3_600_000).await;
    let client = cluster.client(0).await;
    let stale = cluster.client(stale_router).await;
    let admin = client.database("admin");
    let c = client.database("mig").collection::<Document>("s");
    let docs: Vec<Document> = (0..200).map(|i| doc! {"_id": i, "k": i}).collect();
    c.insert_many(docs).await.unwrap();
    shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "mig.s", "middle": {"k": 100}})
        .await
        .unwrap();
    let sc = stale.database("mig").collection::<Document>("s");
    // The stale router learns the routing now, with both halves on one shard.
    assert!(sc.find_one(doc! {"k": 150}).await.unwrap().is_some());
    assert_eq!(sc.count_documents(doc! {}).await.unwrap(), 200);

    let from = chunk_shard(&client, "mig.s", doc! {"k": 100}).await;
    admin
        .run_command(doc! {"moveRange": "mig.s", "min": {"k": 100}, "toShard": other_shard(&from)})
        .await
        .unwrap();

    // A write that is not retryable, sent first: the donor refuses it whole (its only
    // target), so the router sends it again to the new owner.
    let once = tests::driver_client(
        &cluster.routers[stale_router].to_string(),
        "retryWrites=false",
        30,
    )
    .await
    .database("mig")
    .collection::<Document>("s");
    once.insert_one(doc! {"_id": 999, "k": 199}).await.unwrap();
    once.delete_one(doc! {"_id": 999}).await.unwrap();
    // Targeted at the donor with the old version: StaleConfig, then the new owner.
    let found = sc.find_one(doc! {"k": 150}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 150, "k": 150}));
    assert_eq!(sc.count_documents(doc! {}).await.unwrap(), 200);
    assert_eq!(
        sc.count_documents(doc! {"k": {"$gte": 100}}).await.unwrap(),
        100
    );
    sc.insert_one(doc! {"_id": 1000, "k": 160}).await.unwrap();
    assert_eq!(
        c.find_one(doc! {"k": 160, "_id": 1000}).await.unwrap(),
        Some(doc! {"_id": 1000, "k": 160})
    );
    let db = client.database("mig");
    assert_eq!(stored_per_shard(&db, "s").await, 201);

    // A collection the stale router saw unsharded, sharded and split by another router:
    // its commands carry "UNSHARDED", which the shard refuses once it knows better.
    let u = client.database("mig").collection::<Document>("u");
    let su = stale.database("mig").collection::<Document>("u");
    let docs: Vec<Document> = (0..200).map(|i| doc! {"_id": i, "k": i}).collect();
    u.insert_many(docs).await.unwrap();
    assert_eq!(su.count_documents(doc! {}).await.unwrap(), 200);
    shard_by_k(&client, &u).await;
    let primary = chunk_shard(&client, "mig.u", doc! {"k": Bson::MinKey}).await;
    admin
        .run_command(
            doc! {"moveRange": "mig.u", "min": {"k": 100}, "toShard": other_shard(&primary)},
        )
        .await
        .unwrap();
    su.insert_one(doc! {"_id": 1000, "k": 150}).await.unwrap();
    assert_eq!(su.count_documents(doc! {}).await.unwrap(), 201);
    assert_eq!(
        u.count_documents(doc! {"k": {"$gte": 100}}).await.unwrap(),
        101,
        "the stale router's insert went to the range's owner"
    );
    assert_eq!(stored_per_shard(&db, "u").await, 201);

    // Bad requests.
    let e = admin
        .run_command(doc! {"moveRange": "mig.s", "min": {"k": 100}, "toShard": "nowhere"})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(70), "{e}");
    let e = admin
        .run_command(
            doc! {"moveRange": "mig.s", "min": {"k": 50}, "max": {"k": 150}, "toShard": &from},
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(72), "{e}");
    let e = admin
        .run_command(doc! {"moveChunk": "mig.unsharded", "find": {"k": 1}, "to": &from})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(26), "{e}");
    let e = client
        .database("mig")
        .run_command(doc! {"moveChunk": "mig.s", "find": {"k": 1}, "to": &from})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(13), "{e}");
    cluster.stop().await;
}

/// A migration whose coordinator died inside its critical section: the donor refuses
/// writes (routers retry, then give up at the deadline) until the config server
/// primary's recovery pass takes the lock over and abandons the dead migration, with no
/// other migration asked for. Writes go through again, nothing is lost,
/// and the dead coordinator's version is refused by the donor from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_abandoned_by_its_coordinator_is_recovered() {
    use router::shard_client::Forward;
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let c = client.database("mig").collection::<Document>("r");
    let docs: Vec<Document> = (0..200).map(|i| doc! {"_id": i, "k": i}).collect();
    c.insert_many(docs).await.unwrap();
    shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "mig.r", "middle": {"k": 100}})
        .await
        .unwrap();
    let donor = chunk_shard(&client, "mig.r", doc! {"k": 100}).await;
    let config = client.database("config");
    let entry = config
        .collection::<Document>("collections")
        .find_one(doc! {"_id": "mig.r"})
        .await
        .unwrap()
        .unwrap();
    let chunks: Vec<Document> = config
        .collection::<Document>("chunks")
        .find(doc! {"ns": "mig.r"})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let version = chunks
        .iter()
        .map(|c| c.get_timestamp("lastmod").unwrap())
        .max_by_key(|t| (t.time, t.increment))
        .unwrap();
    // The config servers recover nothing until the dead coordinator's state is set up
    // and the writes it holds are seen to wait.
    cluster.coordinator.pause(true);
    // What a coordinator leaves behind when it dies in step 4: the donor recording and
    // in its critical section, and a lock whose owner no longer runs.
    let direct = cluster.direct(&donor);
    let fwd = Forward {
        writes: true,
        ..Default::default()
    };
    let range = |extra: Document| {
        let mut cmd = doc! {"min": [100], "max": [Bson::MaxKey]};
        cmd.extend(extra);
        cmd
    };
    for cmd in [
        doc! {"_shardsvrMoveLog": "r", "on": true},
        doc! {
            "_shardsvrCriticalSection": "r", "on": true,
            "version": {"e": entry.get_object_id("lastmodEpoch").unwrap(), "v": version},
        },
    ] {
        let mut full = cmd.clone();
        full.extend(range(doc! {}));
        let (reply, _, _) = direct.run("mig", &full, &fwd, "test").await.unwrap();
        assert_eq!(reply.get_f64("ok"), Ok(1.0), "{cmd}: {reply}");
    }
    let other_shard = other_shard(&donor);
    config
        .collection::<Document>("migrations")
        .insert_one(doc! {
            "_id": "mig.r", "owner": "dead", "donor": &donor, "recipient": other_shard,
            "min": [100], "max": [Bson::MaxKey],
        })
        .await
        .unwrap();

    let db = client.database("mig");
    let insert = doc! {"insert": "r", "documents": [{"_id": 1000, "k": 150}], "maxTimeMS": 300};
    let e = db.run_command(insert.clone()).await.unwrap_err();
    assert!(matches!(code(&e), Some(50 | 13388)), "{e}");
    // Reads go on meanwhile.
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 200);

    // No migration is asked for: the config servers' recovery pass ends the critical section.
    cluster.coordinator.pause(false);
    let inserted = until_accepted(&db, insert, Duration::from_secs(60)).await;
    assert_eq!(inserted.unwrap().get_i32("n"), Ok(1));
    assert_eq!(chunk_shard(&client, "mig.r", doc! {"k": 100}).await, donor);
    let locks = config.collection::<Document>("migrations");
    assert_eq!(locks.count_documents(doc! {}).await.unwrap(), 0);
    // The recovery moved the collection's version on: the dead coordinator's steps, at
    // its version, are refused.
    let late = doc! {
        "_shardsvrCriticalSection": "r", "on": true, "min": [100], "max": [Bson::MaxKey],
        "version": {"e": entry.get_object_id("lastmodEpoch").unwrap(), "v": version},
    };
    let (reply, _, _) = direct.run("mig", &late, &fwd, "test").await.unwrap();
    assert_eq!(reply.get_i32("code"), Ok(117), "{reply}");
    // The recovery also stopped the donor's recording: a coordinator still asking for the
    // range's changes is told its migration was interrupted (retryable), not handed none.
    let mods = doc! {"_shardsvrMoveMods": "r", "min": [100], "max": [Bson::MaxKey]};
    let (reply, _, _) = direct.run("mig", &mods, &fwd, "test").await.unwrap();
    assert_eq!(reply.get_i32("code"), Ok(11602), "{reply}");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 201);
    assert_eq!(stored_per_shard(&db, "r").await, 201);

    // And the collection migrates as usual afterwards.
    admin
        .run_command(doc! {"moveRange": "mig.r", "min": {"k": 100}, "toShard": other_shard})
        .await
        .unwrap();
    assert_eq!(
        chunk_shard(&client, "mig.r", doc! {"k": 100}).await,
        other_shard
    );
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 201);
    assert_eq!(stored_per_shard(&db, "r").await, 201);
    cluster.stop().await;
}

/// Moves the chunk of `ns` starting at `{k: 100}` to the other shard.
async fn move_upper_half(client: &mongodb::Client, ns: &str) {
    let from = chunk_shard(client, ns, doc! {"k": 100}).await;
    client
        .database("admin")
        .run_command(doc! {"moveRange": ns, "min": {"k": 100}, "toShard": other_shard(&from)})
        .await
        .unwrap();
}

/// A retryable write retried after its document's chunk moved runs once: the recipient
/// has the donor's retryable-write history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_migration_applies_once() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let c = client.database("mig").collection::<Document>("t");
    c.insert_one(doc! {"_id": 0, "k": 0}).await.unwrap();
    shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "mig.t", "middle": {"k": 100}})
        .await
        .unwrap();
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let lsid = doc! {"id": bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: (1..=16).collect(),
    }};
    let insert = doc! {
        "insert": "t", "documents": [{"_id": 1, "k": 150, "n": 0}],
        "lsid": lsid.clone(), "txnNumber": 1_i64, "$db": "mig",
    };
    let inc = doc! {
        "update": "t", "updates": [{"q": {"_id": 1, "k": 150}, "u": {"$inc": {"n": 1}}}],
        "lsid": lsid, "txnNumber": 2_i64, "$db": "mig",
    };
    let reply = tests::raw_command(&mut conn, 1, insert.clone()).await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    move_upper_half(&client, "mig.t").await;
    // The insert again, as a driver retries it: recognised, not a duplicate key.
    let reply = tests::raw_command(&mut conn, 2, insert).await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    assert!(reply.get_array("writeErrors").is_err(), "{reply}");
    let reply = tests::raw_command(&mut conn, 3, inc.clone()).await;
    assert_eq!(reply.get_i32("nModified"), Ok(1), "{reply}");
    move_upper_half(&client, "mig.t").await;
    let reply = tests::raw_command(&mut conn, 4, inc).await;
    assert_eq!(reply.get_i32("nModified"), Ok(1), "{reply}");
    let doc = c.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(doc.get_i32("n"), Ok(1), "the increment ran once: {doc}");
    cluster.stop().await;
}

/// A cursor opened on the donor before a migration committed reads the moved range to the
/// end: the donor keeps its copy while the cursor lives (its range deletion is deferred),
/// and deletes it once the cursor is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_opened_before_a_migration_still_sees_every_document() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let c = client.database("mig").collection::<Document>("cur");
    let docs: Vec<Document> = (0..1000).map(|i| doc! {"_id": i, "k": i}).collect();
    c.insert_many(docs).await.unwrap();
    shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "mig.cur", "middle": {"k": 100}})
        .await
        .unwrap();
    // Targeted at the one shard holding [100, max): the cursor lives there.
    let mut cursor = c
        .find(doc! {"k": {"$gte": 100}})
        .batch_size(50)
        .await
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..50 {
        let d = cursor.try_next().await.unwrap().unwrap();
        seen.push(d.get_i32("_id").unwrap());
    }
    move_upper_half(&client, "mig.cur").await;
    while let Some(d) = cursor.try_next().await.unwrap() {
        seen.push(d.get_i32("_id").unwrap());
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (100..1000).collect::<Vec<i32>>(),
        "the cursor missed documents"
    );
    drop(cursor);
    // The router sees each document once meanwhile, and the donor's copy goes once the
    // cursor is gone (bounded wait for the background range deleter).
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1000);
    let db = client.database("mig");
    let until = Instant::now() + Duration::from_secs(30);
    while stored_per_shard(&db, "cur").await != 1000 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stored_per_shard(&db, "cur").await,
        1000,
        "the donor kept its copy"
    );
    cluster.stop().await;
}

/// The same on the donor's secondaries: a cursor opened on one (`readPreference:
/// secondary`) before the migration committed reads the moved range to the end, because
/// the donor's primary asks its secondaries before deleting and leaves the range while one
/// still reads it; once the cursor is done, the donor's copy goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_on_a_donor_secondary_still_sees_every_document() {
    use mongodb::options::{ReadPreference, SelectionCriteria};

    let cluster = TestShardedCluster::start_with(2, 1, 3).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("mig");
    let c = db.collection::<Document>("sec");
    shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "mig.sec", "middle": {"k": 100}})
        .await
        .unwrap();
    let docs: Vec<Document> = (0..1000).map(|i| doc! {"_id": i, "k": i}).collect();
    let inserted = db
        .run_command(doc! {"insert": "sec", "documents": docs})
        .await
        .unwrap();
    assert_eq!(inserted.get_i32("n").unwrap(), 1000);
    let after = inserted.get_timestamp("operationTime").unwrap();
    let from = chunk_shard(&client, "mig.sec", doc! {"k": 100}).await;
    let k: usize = from.trim_start_matches("shard").parse().unwrap();
    let primary = cluster
        .wait_for_shard_primary(k, Duration::from_secs(10))
        .await
        .expect("the donor has a primary");
    let hosts: Vec<String> = cluster.shard_hosts[k]
        .split_once('/')
        .unwrap()
        .1
        .split(',')
        .map(str::to_string)
        .collect();
    // Causally after the insert, so the secondary has applied all of it.
    let first = db
        .run_command(doc! {
            "find": "sec", "filter": {"k": {"$gte": 100}}, "batchSize": 50,
            "readConcern": {"afterClusterTime": after},
        })
        .selection_criteria(SelectionCriteria::ReadPreference(
            ReadPreference::Secondary {
                options: Default::default(),
            },
        ))
        .await
        .unwrap();
    let served = first.get_str("servedBy").unwrap().to_string();
    assert!(
        hosts.contains(&served),
        "{served} is not a member of {from}"
    );
    assert_ne!(
        served, hosts[primary],
        "the cursor must live on a secondary"
    );
    let ids = |batch: &Document, field: &str| -> Vec<i32> {
        batch
            .get_document("cursor")
            .unwrap()
            .get_array(field)
            .unwrap()
            .iter()
            .map(|d| d.as_document().unwrap().get_i32("_id").unwrap())
            .collect()
    };
    let mut seen = ids(&first, "firstBatch");
    let mut id = first.get_document("cursor").unwrap().get_i64("id").unwrap();
    move_upper_half(&client, "mig.sec").await;
    // Give a deletion that ignored the secondary's cursor time to replicate to it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The range cannot come back while its deletion waits for that cursor: the waiting
    // deletion would take the documents that arrive.
    let back = doc! {"moveRange": "mig.sec", "min": {"k": 100}, "toShard": &from};
    let e = admin.run_command(back.clone()).await.unwrap_err();
    assert_eq!(code(&e), Some(117), "{e}");
    while id != 0 {
        let more = db
            .run_command(doc! {"getMore": id, "collection": "sec", "batchSize": 100})
            .await
            .unwrap();
        seen.extend(ids(&more, "nextBatch"));
        id = more.get_document("cursor").unwrap().get_i64("id").unwrap();
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (100..1000).collect::<Vec<i32>>(),
        "the secondary's cursor missed documents"
    );
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1000);
    let until = Instant::now() + Duration::from_secs(30);
    while stored_per_shard(&db, "sec").await != 1000 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stored_per_shard(&db, "sec").await,
        1000,
        "the donor kept its copy"
    );
    // Once the deletion is done (its record goes just after the documents), the range
    // moves back whole.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match admin.run_command(back.clone()).await {
            Ok(_) => break,
            // 11602: the donor's primary changed during that attempt (elections happen on
            // a loaded CI host); a user retries that too.
            Err(e) if matches!(code(&e), Some(117 | 11602)) && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("moving the range back: {e}"),
        }
    }
    assert_eq!(chunk_shard(&client, "mig.sec", doc! {"k": 100}).await, from);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1000);
    assert_eq!(stored_per_shard(&db, "sec").await, 1000);
    cluster.stop().await;
}
