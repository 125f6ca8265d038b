//! A sharded cluster through real drivers: shards added with `addShard`, collections
//! sharded by hashed and ranged keys, and every query answered as the same data
//! unsharded answers it.

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use mongodb::options::FindOptions;
use std::time::Duration;
use tests::sharded::{error_code as code, per_shard_counts, TestShardedCluster};

fn docs(n: i32) -> Vec<Document> {
    (0..n)
        .map(|i| {
            doc! {
                "_id": i,
                "k": i % 37,
                "group": format!("g{}", i % 5),
                "n": i,
                "tags": [format!("t{}", i % 3), format!("t{}", i % 4)],
                "nested": {"v": i % 11},
            }
        })
        .collect()
}

async fn find(
    c: &mongodb::Collection<Document>,
    filter: Document,
    opts: FindOptions,
) -> Vec<Document> {
    c.find(filter)
        .with_options(opts)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

async fn agg(c: &mongodb::Collection<Document>, pipeline: Vec<Document>) -> Vec<Document> {
    c.aggregate(pipeline)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// `queryPlanner.winningPlan` of `find` on `coll` with `filter`, as the router explains it.
async fn winning_plan(db: &mongodb::Database, coll: &str, filter: Document) -> Document {
    let explain = db
        .run_command(
            doc! {"explain": {"find": coll, "filter": filter}, "verbosity": "queryPlanner"},
        )
        .await
        .unwrap();
    explain
        .get_document("queryPlanner")
        .and_then(|q| q.get_document("winningPlan"))
        .cloned()
        .unwrap_or_else(|_| panic!("no winning plan in {explain}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_collection_spreads_and_answers_like_an_unsharded_one() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let shards = admin.run_command(doc! {"listShards": 1}).await.unwrap();
    assert_eq!(shards.get_array("shards").unwrap().len(), 2);

    let db = client.database("shop");
    let plain = db.collection::<Document>("plain");
    let sharded = db.collection::<Document>("sharded");
    let reply = admin
        .run_command(doc! {"shardCollection": "shop.sharded", "key": {"k": "hashed"}})
        .await
        .unwrap();
    assert_eq!(reply.get_str("collectionsharded"), Ok("shop.sharded"));
    plain.insert_many(docs(500)).await.unwrap();
    // Unordered, in several batches' worth, through document sequences.
    sharded.insert_many(docs(500)).ordered(false).await.unwrap();

    let counts = per_shard_counts(&db, "sharded").await;
    assert_eq!(counts.len(), 2);
    assert_eq!(counts.iter().sum::<i64>(), 500);
    assert!(
        counts.iter().all(|&c| c > 50),
        "documents spread over both shards: {counts:?}"
    );

    // The catalog reads as mongos shows it.
    let config = client.database("config");
    let version = config
        .collection::<Document>("version")
        .find_one(doc! {})
        .await
        .unwrap()
        .expect("config.version");
    assert!(version.get_object_id("clusterId").is_ok(), "{version}");
    let entry = config
        .collection::<Document>("collections")
        .find_one(doc! {"_id": "shop.sharded"})
        .await
        .unwrap()
        .expect("catalog entry");
    assert_eq!(entry.get_document("key").unwrap(), &doc! {"k": "hashed"});
    let chunks = config
        .collection::<Document>("chunks")
        .count_documents(doc! {"ns": "shop.sharded"})
        .await
        .unwrap();
    assert_eq!(chunks, 4);

    // Finds: sorted, skipped, limited, projected, in small batches (getMore across shards).
    let cases: Vec<(Document, FindOptions)> = vec![
        (doc! {}, FindOptions::builder().sort(doc! {"n": 1}).build()),
        (
            doc! {"k": 7},
            FindOptions::builder().sort(doc! {"n": -1}).build(),
        ),
        (
            doc! {"n": {"$gte": 100}},
            FindOptions::builder()
                .sort(doc! {"group": 1, "n": -1})
                .skip(13)
                .limit(40)
                .batch_size(7)
                .build(),
        ),
        (
            doc! {"tags": "t2"},
            FindOptions::builder()
                .sort(doc! {"nested.v": 1, "_id": 1})
                .projection(doc! {"n": 1, "_id": 0})
                .batch_size(3)
                .build(),
        ),
        (
            doc! {"k": {"$in": [1, 2, 3]}},
            FindOptions::builder()
                .sort(doc! {"_id": 1})
                .limit(-5)
                .build(),
        ),
    ];
    for (filter, opts) in cases {
        let a = find(&plain, filter.clone(), opts.clone()).await;
        let b = find(&sharded, filter.clone(), opts).await;
        assert!(!a.is_empty(), "{filter}");
        assert_eq!(a, b, "find {filter}");
    }
    // Without a sort, the same set.
    let mut a = find(
        &plain,
        doc! {"group": "g1"},
        FindOptions::builder().batch_size(5).build(),
    )
    .await;
    let mut b = find(
        &sharded,
        doc! {"group": "g1"},
        FindOptions::builder().batch_size(5).build(),
    )
    .await;
    a.sort_by_key(|d| d.get_i32("_id").unwrap());
    b.sort_by_key(|d| d.get_i32("_id").unwrap());
    assert_eq!(a.len(), 100);
    assert_eq!(a, b);

    for filter in [doc! {}, doc! {"k": 3}, doc! {"n": {"$lt": 250}}] {
        assert_eq!(
            plain.count_documents(filter.clone()).await.unwrap(),
            sharded.count_documents(filter.clone()).await.unwrap(),
            "count {filter}"
        );
    }
    let count =
        |coll: &str| doc! {"count": coll, "query": {"n": {"$gte": 10}}, "skip": 5, "limit": 100};
    assert_eq!(
        db.run_command(count("plain")).await.unwrap().get_i32("n"),
        db.run_command(count("sharded")).await.unwrap().get_i32("n")
    );
    let mut a = plain.distinct("group", doc! {}).await.unwrap();
    let mut b = sharded.distinct("group", doc! {}).await.unwrap();
    a.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
    b.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
    assert_eq!(a, b);
    assert_eq!(b.len(), 5);

    let pipelines = vec![
        vec![
            doc! {"$match": {"n": {"$gte": 20}}},
            doc! {"$group": {"_id": "$group", "total": {"$sum": "$n"}, "avg": {"$avg": "$n"}, "max": {"$max": "$n"}, "c": {"$sum": 1}}},
            doc! {"$sort": {"_id": 1}},
        ],
        vec![
            doc! {"$unwind": "$tags"},
            doc! {"$sortByCount": "$tags"},
            doc! {"$sort": {"_id": 1}},
        ],
        vec![
            doc! {"$project": {"n": 1, "double": {"$multiply": ["$n", 2]}}},
            doc! {"$sort": {"n": -1}},
            doc! {"$skip": 3},
            doc! {"$limit": 10},
        ],
        vec![doc! {"$match": {"k": 5}}, doc! {"$count": "c"}],
        vec![doc! {"$bucket": {
            "groupBy": "$n",
            "boundaries": [0, 100, 250],
            "default": "rest",
            "output": {"c": {"$sum": 1}, "hi": {"$max": "$n"}},
        }}],
        // The shards' partial groups, folded at the router, for accumulators whose result
        // does not depend on the order documents arrive in.
        vec![
            doc! {"$group": {
                "_id": {"$mod": ["$n", 7]},
                "lo": {"$min": "$n"},
                "hi": {"$max": "$nested.v"},
                "c": {"$count": {}},
                "avg": {"$avg": "$k"},
                "top": {"$topN": {"n": 3, "sortBy": {"n": -1}, "output": "$n"}},
                "least": {"$minN": {"n": 2, "input": "$n"}},
            }},
            doc! {"$match": {"c": {"$gt": 0}}},
            doc! {"$sort": {"_id": 1}},
        ],
        vec![doc! {"$facet": {
            "small": [{"$match": {"n": {"$lt": 10}}}, {"$count": "c"}],
            "groups": [{"$group": {"_id": null, "s": {"$sum": "$k"}}}],
        }}],
    ];
    for p in pipelines {
        assert_eq!(
            agg(&plain, p.clone()).await,
            agg(&sharded, p.clone()).await,
            "{p:?}"
        );
    }

    // A big merged result leaves by getMore.
    let all = agg(&sharded, vec![doc! {"$sort": {"_id": 1}}]).await;
    assert_eq!(all.len(), 500);
    // Streamed at the router without a sort: a `$limit` after an `$unwind` holds.
    let some = agg(
        &sharded,
        vec![doc! {"$unwind": "$tags"}, doc! {"$limit": 7}],
    )
    .await;
    assert_eq!(some.len(), 7);

    // A tailable cursor cannot span shards (and a sharded collection is never capped).
    let e = db
        .run_command(doc! {"find": "sharded", "filter": {}, "tailable": true})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(20), "{e}");

    // explain shows each shard's part.
    let plan = winning_plan(&db, "sharded", doc! {}).await;
    assert_eq!(plan.get_str("stage"), Ok("SHARD_MERGE"));
    assert_eq!(plan.get_array("shards").unwrap().len(), 2);
    let plan = winning_plan(&db, "sharded", doc! {"k": 4}).await;
    assert_eq!(plan.get_str("stage"), Ok("SINGLE_SHARD"));

    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_the_shard_key() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("app");
    let users = db.collection::<Document>("users");
    admin
        .run_command(doc! {"shardCollection": "app.users", "key": {"uid": "hashed"}})
        .await
        .unwrap();
    users
        .insert_many((0..200).map(|i| doc! {"uid": i, "score": 0, "team": i % 4}))
        .await
        .unwrap();
    assert!(per_shard_counts(&db, "users").await.iter().all(|&c| c > 0));

    // Targeted by key, and broadcast when many.
    let r = users
        .update_one(doc! {"uid": 17}, doc! {"$inc": {"score": 5}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    let r = users
        .update_many(doc! {"team": 2}, doc! {"$set": {"flag": true}})
        .await
        .unwrap();
    assert_eq!(r.modified_count, 50);
    // One document without the key: found on whichever shard has it.
    let r = users
        .update_one(doc! {"score": 5}, doc! {"$set": {"found": true}})
        .await
        .unwrap();
    assert_eq!(r.matched_count, 1);
    let r = users.delete_one(doc! {"team": 3}).await.unwrap();
    assert_eq!(r.deleted_count, 1);
    assert_eq!(
        users
            .delete_many(doc! {"team": 1})
            .await
            .unwrap()
            .deleted_count,
        50
    );
    assert_eq!(users.count_documents(doc! {}).await.unwrap(), 149);

    // An upsert names its shard key; changing the key moves the document (a retryable
    // write: the driver's default).
    let r = users
        .update_one(doc! {"uid": 1000}, doc! {"$set": {"score": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert!(r.upserted_id.is_some());
    assert_eq!(users.count_documents(doc! {"uid": 1000}).await.unwrap(), 1);
    let e = users
        .update_one(doc! {"team": 0}, doc! {"$set": {"score": 1}})
        .upsert(true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(61), "{e}");
    let r = users
        .update_one(doc! {"uid": 4}, doc! {"$set": {"uid": 5000}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    assert_eq!(users.count_documents(doc! {"uid": 4}).await.unwrap(), 0);
    assert_eq!(users.count_documents(doc! {"uid": 5000}).await.unwrap(), 1);
    // findAndModify by key.
    let found = users
        .find_one_and_update(doc! {"uid": 8}, doc! {"$set": {"score": 9}})
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.get_i32("score"), Ok(9));
    let e = users
        .find_one_and_update(doc! {"team": 0}, doc! {"$set": {"x": 1}})
        .sort(doc! {"uid": 1})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(61), "{e}");

    // A unique index on every shard: duplicates are refused with indexes of the batch.
    users
        .create_index(tests::unique_index(doc! {"uid": 1}))
        .await
        .unwrap();
    let e = users
        .insert_many(vec![
            doc! {"uid": 5001},
            doc! {"uid": 5002},
            doc! {"uid": 16},
        ])
        .ordered(false)
        .await
        .unwrap_err();
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::InsertMany(m) => {
            let errs = m.write_errors.as_ref().unwrap();
            assert_eq!(errs.len(), 1);
            assert_eq!((errs[0].index, errs[0].code), (2, 11000));
        }
        other => panic!("expected a bulk write error, got {other:?}"),
    }
    assert_eq!(
        users
            .count_documents(doc! {"uid": {"$gte": 5001}})
            .await
            .unwrap(),
        2
    );

    // A retryable insert split over both shards, in several runs per shard, sent twice
    // with the same session and number: every document once, and the same answer.
    admin
        .run_command(doc! {"shardCollection": "app.events", "key": {"_id": "hashed"}})
        .await
        .unwrap();
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let lsid =
        doc! {"id": bson::Binary {subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![7; 16]}};
    let insert = doc! {
        "insert": "events",
        "documents": (0..40).map(|i| doc! {"_id": i}).collect::<Vec<_>>(),
        "ordered": true,
        "lsid": lsid,
        "txnNumber": 1i64,
        "$db": "app",
    };
    for attempt in 1..=2 {
        let reply = tests::raw_command(&mut conn, attempt, insert.clone()).await;
        assert_eq!(reply.get_i32("n"), Ok(40), "attempt {attempt}: {reply}");
    }
    let events = db.collection::<Document>("events");
    assert_eq!(events.count_documents(doc! {}).await.unwrap(), 40);
    assert!(per_shard_counts(&db, "events").await.iter().all(|&c| c > 0));

    // drop removes it everywhere and from the catalog.
    users.drop().await.unwrap();
    assert_eq!(users.count_documents(doc! {}).await.unwrap(), 0);
    let entry = client
        .database("config")
        .collection::<Document>("collections")
        .find_one(doc! {"_id": "app.users"})
        .await
        .unwrap();
    assert!(entry.is_none());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_keys_unsharded_collections_and_bad_requests() {
    let cluster = TestShardedCluster::start(2, 2).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("crm");
    let orders = db.collection::<Document>("orders");
    orders
        .insert_many((0..50).map(|i| doc! {"region": if i % 2 == 0 { "eu" } else { "us" }, "n": i}))
        .await
        .unwrap();
    // A non-empty collection needs an index starting with the key.
    let e = admin
        .run_command(doc! {"shardCollection": "crm.orders", "key": {"region": 1}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(72), "{e}");
    orders
        .create_index(
            mongodb::IndexModel::builder()
                .keys(doc! {"region": 1, "n": 1})
                .build(),
        )
        .await
        .unwrap();
    admin
        .run_command(doc! {"shardCollection": "crm.orders", "key": {"region": 1}})
        .await
        .unwrap();
    // Again with the same key: fine. With another: AlreadyInitialized.
    admin
        .run_command(doc! {"shardCollection": "crm.orders", "key": {"region": 1}})
        .await
        .unwrap();
    let e = admin
        .run_command(doc! {"shardCollection": "crm.orders", "key": {"n": 1}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(23), "{e}");
    // Bad keys and the wrong database.
    for bad in [
        doc! {"a": -1},
        doc! {"a": "hashed"}
            .into_iter()
            .chain([("b".to_string(), Bson::from("hashed"))])
            .collect(),
    ] {
        let e = admin
            .run_command(doc! {"shardCollection": "crm.other", "key": bad})
            .await
            .unwrap_err();
        assert_eq!(code(&e), Some(2), "{e}");
    }
    let e = db
        .run_command(doc! {"shardCollection": "crm.x", "key": {"a": 1}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(13), "{e}");

    // A ranged key over data already there: one chunk, on the primary shard.
    let counts = per_shard_counts(&db, "orders").await;
    assert_eq!(counts.iter().sum::<i64>(), 50);
    let found = find(
        &orders,
        doc! {"region": "eu"},
        FindOptions::builder().sort(doc! {"n": 1}).build(),
    )
    .await;
    assert_eq!(found.len(), 25);

    // The second router learns of the sharding from the catalog.
    let other = cluster.client(1).await;
    let via_other = other.database("crm").collection::<Document>("orders");
    assert_eq!(via_other.count_documents(doc! {}).await.unwrap(), 50);
    via_other
        .update_one(doc! {"n": 3}, doc! {"$set": {"region": "apac"}})
        .await
        .unwrap();
    assert_eq!(
        via_other
            .count_documents(doc! {"n": 3, "region": "apac"})
            .await
            .unwrap(),
        1
    );
    assert_eq!(via_other.count_documents(doc! {}).await.unwrap(), 50);

    // Unsharded collections live whole on their database's primary shard and work as
    // before, databases list across shards, and dropDatabase clears the catalog.
    let notes = client.database("notes").collection::<Document>("n");
    notes.insert_one(doc! {"x": 1}).await.unwrap();
    let names = client.list_database_names().await.unwrap();
    assert!(
        names.contains(&"notes".to_string()) && names.contains(&"crm".to_string()),
        "{names:?}"
    );
    let primary = client
        .database("config")
        .collection::<Document>("databases")
        .find_one(doc! {"_id": "notes"})
        .await
        .unwrap()
        .expect("database entry");
    assert!(primary.get_str("primary").unwrap().starts_with("shard"));
    db.drop().await.unwrap();
    assert_eq!(orders.count_documents(doc! {}).await.unwrap(), 0);
    let left = client
        .database("config")
        .collection::<Document>("chunks")
        .count_documents(doc! {"ns": "crm.orders"})
        .await
        .unwrap();
    assert_eq!(left, 0);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_pin_a_sites_range_to_its_shard_and_splits_move_nothing() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    for (shard, zone) in [("shard0", "A"), ("shard1", "B")] {
        admin
            .run_command(doc! {"addShardToZone": shard, "zone": zone})
            .await
            .unwrap();
    }
    let range = |from: &str, to: &str, zone: Bson| {
        doc! {"updateZoneKeyRange": "geo.users", "min": {"site": from}, "max": {"site": to}, "zone": zone}
    };
    admin
        .run_command(range("A", "B", "A".into()))
        .await
        .unwrap();
    admin
        .run_command(range("B", "C", "B".into()))
        .await
        .unwrap();
    let e = admin
        .run_command(range("Aa", "Bb", "B".into()))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(178), "{e}");
    let e = admin
        .run_command(range("X", "Y", "nowhere".into()))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(177), "{e}");
    let e = admin
        .run_command(doc! {"addShardToZone": "shard9", "zone": "A"})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(70), "{e}");

    admin
        .run_command(doc! {"shardCollection": "geo.users", "key": {"site": 1, "uid": 1}})
        .await
        .unwrap();
    let db = client.database("geo");
    let users = db.collection::<Document>("users");
    users
        .insert_many((0..60).map(|i| doc! {"site": (["A", "B", "C"][i % 3]), "uid": i as i32}))
        .await
        .unwrap();
    // Site A's users live on shard0 only, site B's on shard1; C (no zone) on the primary.
    for (site, shard) in [("A", "shard0"), ("B", "shard1")] {
        let plan = winning_plan(&db, "users", doc! {"site": site}).await;
        assert_eq!(plan.get_str("stage"), Ok("SINGLE_SHARD"), "{plan}");
        let shards = plan.get_array("shards").unwrap();
        assert_eq!(
            shards[0].as_document().unwrap().get_str("shardName"),
            Ok(shard)
        );
        assert_eq!(
            users.count_documents(doc! {"site": site}).await.unwrap(),
            20
        );
    }
    let stats = db.run_command(doc! {"collStats": "users"}).await.unwrap();
    let on = |shard: &str| {
        let s = stats
            .get_document("shards")
            .unwrap()
            .get_document(shard)
            .unwrap();
        s.get_i32("count")
            .map(i64::from)
            .or_else(|_| s.get_i64("count"))
            .unwrap()
    };
    let primary = client
        .database("config")
        .collection::<Document>("databases")
        .find_one(doc! {"_id": "geo"})
        .await
        .unwrap()
        .unwrap();
    let expected = |shard: &str| {
        20 + if primary.get_str("primary") == Ok(shard) {
            20
        } else {
            0
        }
    };
    assert_eq!(
        (on("shard0"), on("shard1")),
        (expected("shard0"), expected("shard1"))
    );

    // A split divides a chunk where the data is: nothing moves, every query still answers.
    let chunks = || async {
        client
            .database("config")
            .collection::<Document>("chunks")
            .count_documents(doc! {"ns": "geo.users"})
            .await
            .unwrap()
    };
    let before = chunks().await;
    admin
        .run_command(doc! {"split": "geo.users", "middle": {"site": "A", "uid": 30}})
        .await
        .unwrap();
    assert_eq!(chunks().await, before + 1);
    let e = admin
        .run_command(doc! {"split": "geo.users", "middle": {"site": "A", "uid": 30}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(72), "{e}");
    assert_eq!(users.count_documents(doc! {"site": "A"}).await.unwrap(), 20);
    assert_eq!(
        users
            .count_documents(doc! {"site": "A", "uid": {"$gte": 30}})
            .await
            .unwrap(),
        10
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_primary_killed_under_writes_loses_nothing() {
    let mut cluster = TestShardedCluster::start_with(2, 1, 3).await;
    let client = cluster.client(0).await;
    client
        .database("admin")
        .run_command(doc! {"shardCollection": "ha.events", "key": {"_id": "hashed"}})
        .await
        .unwrap();
    let events = client.database("ha").collection::<Document>("events");
    events
        .insert_many((0..200).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    // Writes keep coming while shard0 loses its primary; each acknowledged one (majority,
    // retried by the driver and the router) must be there afterwards.
    let writer = {
        let events = events.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 200..400 {
                if events.insert_one(doc! {"_id": i}).await.is_ok() {
                    acked.push(i);
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = cluster.kill_shard_primary(0).await;
    let new = cluster
        .wait_for_shard_primary(0, Duration::from_secs(10))
        .await
        .expect("shard0 elects a new primary");
    assert_ne!(new, killed);
    let acked = writer.await.unwrap();
    assert!(
        acked.len() >= 190,
        "most writes succeed across the failover: {}",
        acked.len()
    );
    for i in (0..200).chain(acked.iter().copied()) {
        assert!(
            events.find_one(doc! {"_id": i}).await.unwrap().is_some(),
            "acknowledged document {i} is missing"
        );
    }
    assert_eq!(
        events.count_documents(doc! {}).await.unwrap(),
        200 + acked.len() as u64
    );
    cluster.stop().await;
}

/// Changing a document's shard key to another shard's range, as MongoDB allows it: in a
/// retryable write the document moves (and a retry applies once); otherwise
/// `IllegalOperation`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_key_change_moves_the_document_in_a_retryable_write() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("skc");
    let c = db.collection::<Document>("c");
    c.insert_one(doc! {"_id": 1, "k": 5, "n": 0}).await.unwrap();
    tests::sharded::shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "skc.c", "middle": {"k": 100}})
        .await
        .unwrap();
    let low = tests::sharded::database_primary(&client, "skc").await;
    let high = tests::sharded::other_shard(&low);
    admin
        .run_command(doc! {"moveRange": "skc.c", "min": {"k": 100}, "toShard": high})
        .await
        .unwrap();
    // Documents as stored over both shards: a copy left behind would count twice.
    let stored = || async { per_shard_counts(&db, "c").await.iter().sum::<i64>() };

    // To the other shard, and within the same shard.
    let r = c
        .update_one(
            doc! {"_id": 1, "k": 5},
            doc! {"$set": {"k": 150}, "$inc": {"n": 1}},
        )
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    assert_eq!(
        c.find_one(doc! {"k": 150}).await.unwrap(),
        Some(doc! {"_id": 1, "k": 150, "n": 1})
    );
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
    assert_eq!(stored().await, 1, "the old copy stayed behind");
    c.update_one(doc! {"k": 150}, doc! {"$set": {"k": 160}})
        .await
        .unwrap();
    assert_eq!(c.count_documents(doc! {"k": 160}).await.unwrap(), 1);

    // A retry of a move is recognised: it applies once.
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let update = doc! {
        "update": "c", "updates": [{"q": {"k": 160}, "u": {"$set": {"k": 20}, "$inc": {"n": 1}}}],
        "lsid": {"id": bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: (1..=16).collect(),
        }},
        "txnNumber": 7_i64, "$db": "skc",
    };
    for attempt in 1..=2 {
        let reply = tests::raw_command(&mut conn, attempt, update.clone()).await;
        assert_eq!(reply.get_i32("n"), Ok(1), "attempt {attempt}: {reply}");
        assert_eq!(
            reply.get_i32("nModified"),
            Ok(1),
            "attempt {attempt}: {reply}"
        );
    }
    assert_eq!(
        c.find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": 1, "k": 20, "n": 2})
    );
    assert_eq!(stored().await, 1);

    // An upsert that matches moves the document too.
    c.update_one(doc! {"k": 20}, doc! {"$set": {"k": 170}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(c.count_documents(doc! {"k": 170}).await.unwrap(), 1);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);

    // findAndModify moves it as well, answering with the document before or after, and
    // a retry answers the same.
    let after = c
        .find_one_and_update(doc! {"k": 170}, doc! {"$set": {"k": 30}})
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(after, Some(doc! {"_id": 1, "k": 30, "n": 2}));
    let fam = doc! {
        "findAndModify": "c", "query": {"k": 30}, "update": {"$set": {"k": 180}},
        "fields": {"k": 1},
        "lsid": {"id": bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: (1..=16).collect(),
        }},
        "txnNumber": 8_i64, "$db": "skc",
    };
    for attempt in 3..=4 {
        let reply = tests::raw_command(&mut conn, attempt, fam.clone()).await;
        assert_eq!(
            reply.get_document("value"),
            Ok(&doc! {"_id": 1, "k": 30}),
            "{reply}"
        );
    }
    assert_eq!(c.count_documents(doc! {"k": 180}).await.unwrap(), 1);
    assert_eq!(stored().await, 1);
    c.update_one(doc! {"k": 180}, doc! {"$set": {"k": 170}})
        .await
        .unwrap();

    // Not retryable, or many documents: MongoDB's IllegalOperation.
    let once = tests::driver_client(&cluster.routers[0].to_string(), "retryWrites=false", 30)
        .await
        .database("skc")
        .collection::<Document>("c");
    let e = once
        .update_one(doc! {"k": 170}, doc! {"$set": {"k": 1}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(20), "{e}");
    let e = once
        .find_one_and_update(doc! {"k": 170}, doc! {"$set": {"k": 1}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(20), "{e}");
    let e = c
        .update_many(doc! {}, doc! {"$inc": {"k": 1}})
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(20), "{e}");
    assert_eq!(c.count_documents(doc! {"k": 170}).await.unwrap(), 1);
    cluster.stop().await;
}

/// A shard key move whose router died between the insert on the new shard and the delete
/// on the old one is finished by a router (the intent it recorded on the old shard says
/// what to do), and a retry of its update then applies nothing; one whose document
/// changed after the intent is undone instead. Without the recovery both copies stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_key_move_abandoned_by_its_router_is_finished() {
    use router::shard_client::Forward;

    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let db = client.database("skr");
    let c = db.collection::<Document>("c");
    c.insert_many([
        doc! {"_id": 1, "k": 5, "n": 0},
        doc! {"_id": 2, "k": 6, "n": 0},
    ])
    .await
    .unwrap();
    tests::sharded::shard_by_k(&client, &c).await;
    admin
        .run_command(doc! {"split": "skr.c", "middle": {"k": 100}})
        .await
        .unwrap();
    let low = tests::sharded::database_primary(&client, "skr").await;
    let high = tests::sharded::other_shard(&low);
    admin
        .run_command(doc! {"moveRange": "skr.c", "min": {"k": 100}, "toShard": high})
        .await
        .unwrap();
    let stored = || async { per_shard_counts(&db, "c").await.iter().sum::<i64>() };
    let fwd = Forward {
        writes: true,
        ..Default::default()
    };
    let run = |shard: &str, cmd: Document| {
        let handle = cluster.direct(shard);
        let fwd = fwd.clone();
        async move {
            let (reply, _, _) = handle.run("skr", &cmd, &fwd, "test").await.unwrap();
            assert_eq!(reply.get_f64("ok"), Ok(1.0), "{cmd}: {reply}");
            reply
        }
    };
    let lsid = doc! {"id": bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: (101..=116).collect(),
    }};
    // What a router leaves when it dies after its insert, for two moves: the intent on the
    // old shard and the new document on the new one.
    for (id, k, txn) in [(1, 5, 3_i64), (2, 6, 4_i64)] {
        let pre = doc! {"_id": id, "k": k, "n": 0};
        let post = doc! {"_id": id, "k": 150 + id, "n": 1};
        let began = run(
            &low,
            doc! {
                "_shardsvrBeginMove": "c", "pre": pre, "post": post.clone(),
                "session": {"lsid": lsid.clone(), "txnNumber": txn, "stmtIds": [0]},
            },
        )
        .await;
        assert_eq!(began.get_bool("began"), Ok(true), "{began}");
        run(high, doc! {"insert": "c", "documents": [post]}).await;
    }
    // The second document changes on the old shard after its intent was recorded.
    c.update_one(doc! {"_id": 2, "k": 6}, doc! {"$set": {"n": 5}})
        .await
        .unwrap();
    assert_eq!(stored().await, 4, "both copies of both documents");

    // Finishing a move takes several calls (the copy removed, then the intent): wait for
    // all of them, not the first.
    let pending = || async {
        let reply = run(&low, doc! {"_shardsvrPendingMoves": 1, "olderThanMs": 0}).await;
        reply.get_array("moves").map_or(usize::MAX, Vec::len)
    };
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while (stored().await != 2 || pending().await != 0) && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stored().await, 2, "an abandoned move was not finished");
    let mut all: Vec<Document> = c.find(doc! {}).await.unwrap().try_collect().await.unwrap();
    all.sort_by_key(|d| d.get_i32("_id").unwrap());
    assert_eq!(
        all,
        vec![
            doc! {"_id": 1, "k": 151, "n": 1},
            doc! {"_id": 2, "k": 6, "n": 5},
        ],
        "the first move finished, the second undone"
    );
    let pending = run(&low, doc! {"_shardsvrPendingMoves": 1, "olderThanMs": 0}).await;
    assert_eq!(pending.get_array("moves").map(Vec::len), Ok(0), "{pending}");

    // The client's retry of the first update is answered from its session: applied once.
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let retry = doc! {
        "update": "c", "updates": [{"q": {"_id": 1, "k": 5}, "u": {"$set": {"k": 151}, "$inc": {"n": 1}}}],
        "lsid": lsid, "txnNumber": 3_i64, "$db": "skr",
    };
    let reply = tests::raw_command(&mut conn, 1, retry).await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    assert_eq!(
        c.find_one(doc! {"_id": 1}).await.unwrap(),
        Some(doc! {"_id": 1, "k": 151, "n": 1})
    );
    assert_eq!(stored().await, 2);
    cluster.stop().await;
}

/// A `$group` over a sharded collection runs on the shards, which send the router their
/// partial groups: the router holds groups, not the shards' documents, so counting 110 MB
/// of documents (a driver's `count_documents`) needs no `allowDiskUse`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_over_shards_holds_groups_at_the_router_not_documents() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    admin
        .run_command(doc! {"shardCollection": "big.c", "key": {"_id": "hashed"}})
        .await
        .unwrap();
    let coll = client.database("big").collection::<Document>("c");
    let mb = "x".repeat(1 << 20);
    for chunk in 0..11 {
        let docs = (0..10).map(|i| doc! {"_id": chunk * 10 + i, "k": i, "s": mb.clone()});
        coll.insert_many(docs).await.unwrap();
    }
    let counts = per_shard_counts(&client.database("big"), "c").await;
    assert_eq!(counts.len(), 2, "both shards hold documents: {counts:?}");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 110);
    let by_key = agg(
        &coll,
        vec![
            doc! {"$group": {"_id": "$k", "n": {"$sum": 1}, "bytes": {"$sum": {"$strLenBytes": "$s"}}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    let expected: Vec<Document> = (0..10)
        .map(|k| doc! {"_id": k, "n": 11, "bytes": 11 << 20})
        .collect();
    assert_eq!(by_key, expected);
    // The documents themselves are still more than the router holds for a merge.
    let e = coll
        .aggregate(vec![
            doc! {"$sort": {"k": 1}},
            doc! {"$skip": 0},
            doc! {"$group": {"_id": "$k"}},
        ])
        .allow_disk_use(true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(146), "{e}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_cursors_reports_merged_and_shard_cursors_together() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    admin
        .run_command(doc! {"shardCollection": "kc.c", "key": {"k": "hashed"}})
        .await
        .unwrap();
    let db = client.database("kc");
    db.collection::<Document>("c")
        .insert_many(docs(200))
        .await
        .unwrap();
    let same: Vec<Document> = (0..10)
        .map(|i| doc! {"_id": 1000 + i, "k": "same"})
        .collect();
    db.collection::<Document>("c")
        .insert_many(same)
        .await
        .unwrap();
    let cursor_id = |reply: &Document| reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    // Over both shards: a cursor merged at the router.
    let merged = db
        .run_command(doc! {"find": "c", "batchSize": 2})
        .await
        .unwrap();
    // One shard key value: a cursor on the one shard that has it.
    let targeted = db
        .run_command(doc! {"find": "c", "filter": {"k": "same"}, "batchSize": 2})
        .await
        .unwrap();
    let (m, t) = (cursor_id(&merged), cursor_id(&targeted));
    assert!(m != 0 && t != 0, "{merged} {targeted}");
    let reply = db
        .run_command(doc! {"killCursors": "c", "cursors": [m, t]})
        .await
        .unwrap();
    let mut killed: Vec<i64> = reply
        .get_array("cursorsKilled")
        .unwrap()
        .iter()
        .filter_map(Bson::as_i64)
        .collect();
    killed.sort();
    let mut both = vec![m, t];
    both.sort();
    assert_eq!(killed, both, "{reply}");
    for id in [m, t] {
        let err = db
            .run_command(doc! {"getMore": id, "collection": "c"})
            .await
            .unwrap_err();
        assert_eq!(code(&err), Some(43), "{err}");
    }
}
