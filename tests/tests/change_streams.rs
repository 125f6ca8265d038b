//! Change streams read from the Raft log (`shard::change_stream`), through the routers
//! with the `mongodb` driver: event shapes, resuming from any token on any router,
//! failover, and the router's merge of several shards' streams.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures::StreamExt;
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType, ResumeToken};
use mongodb::change_stream::ChangeStream;
use mongodb::options::{ChangeStreamOptions, FullDocumentType};
use tests::replica_set::{TestReplicaSet, THREE_SITES};
use tests::sharded::TestShardedCluster;

const LIVENESS: Duration = Duration::from_secs(30);

type Events = ChangeStream<ChangeStreamEvent<Document>>;

/// The next event, within the liveness bound.
async fn next(stream: &mut Events) -> ChangeStreamEvent<Document> {
    tokio::time::timeout(LIVENESS, stream.next())
        .await
        .expect("an event within the liveness bound")
        .expect("the stream is open")
        .expect("an event")
}

async fn set_and_client() -> (TestReplicaSet, mongodb::Client) {
    let set = TestReplicaSet::start_layout(&THREE_SITES).await;
    set.wait_for_primary(LIVENESS).await.expect("primary");
    let client = set.client(0, "").await;
    (set, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_have_mongodbs_shapes_and_a_drop_invalidates() {
    let (set, client) = set_and_client().await;
    let coll = client.database("cs").collection::<Document>("shapes");
    coll.insert_one(doc! {"_id": 0, "before": "the stream"})
        .await
        .unwrap();
    let mut stream = coll.watch().await.unwrap();
    coll.insert_one(doc! {"_id": 1, "foo": "bar"})
        .await
        .unwrap();
    coll.update_one(
        doc! {"_id": 1},
        doc! {"$set": {"new": 1}, "$unset": {"foo": 1}},
    )
    .await
    .unwrap();
    coll.replace_one(doc! {"_id": 1}, doc! {"x": 2})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 1}).await.unwrap();
    // A write that changes nothing, and an insert refused as a duplicate, show nothing.
    coll.update_one(doc! {"_id": 0}, doc! {"$set": {"before": "the stream"}})
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 0}).await.unwrap_err();

    let insert = next(&mut stream).await;
    assert_eq!(insert.operation_type, OperationType::Insert);
    assert_eq!(insert.full_document, Some(doc! {"_id": 1, "foo": "bar"}));
    assert_eq!(insert.document_key, Some(doc! {"_id": 1}));
    let ns = insert.ns.as_ref().expect("ns");
    assert_eq!((ns.db.as_str(), ns.coll.as_deref()), ("cs", Some("shapes")));
    assert!(insert.cluster_time.is_some() && insert.wall_time.is_some());

    let update = next(&mut stream).await;
    assert_eq!(update.operation_type, OperationType::Update);
    assert_eq!(update.full_document, None);
    let desc = update.update_description.expect("an update description");
    assert_eq!(desc.updated_fields, doc! {"new": 1});
    assert_eq!(desc.removed_fields, vec!["foo".to_string()]);
    assert!(desc.truncated_arrays.unwrap_or_default().is_empty());

    let replace = next(&mut stream).await;
    assert_eq!(replace.operation_type, OperationType::Replace);
    assert_eq!(replace.full_document, Some(doc! {"_id": 1, "x": 2}));

    let delete = next(&mut stream).await;
    assert_eq!(delete.operation_type, OperationType::Delete);
    assert_eq!(delete.full_document, None);
    assert_eq!(delete.document_key, Some(doc! {"_id": 1}));

    coll.drop().await.unwrap();
    let drop = next(&mut stream).await;
    assert_eq!(drop.operation_type, OperationType::Drop, "{drop:?}");
    let invalidate = next(&mut stream).await;
    assert_eq!(invalidate.operation_type, OperationType::Invalidate);
    assert!(stream.next().await.is_none(), "an invalidated stream ends");

    // Tokens order the events, and times never go back.
    let times: Vec<_> = [&insert, &replace, &delete, &drop]
        .iter()
        .map(|e| e.cluster_time.unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    set.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resuming_on_another_router_continues_where_it_stopped() {
    let (set, client) = set_and_client().await;
    let coll = client.database("cs").collection::<Document>("resume");
    let mut stream = coll.watch().await.unwrap();
    for i in 0..10 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    let mut token: Option<ResumeToken> = None;
    for i in 0..4 {
        let e = next(&mut stream).await;
        assert_eq!(e.document_key, Some(doc! {"_id": i}));
        token = Some(e.id);
    }
    drop(stream);
    // Another site's router, from the token of the fourth event.
    let other = set.client(2, "").await;
    let coll_b = other.database("cs").collection::<Document>("resume");
    let opts = ChangeStreamOptions::builder()
        .resume_after(token.clone())
        .full_document(Some(FullDocumentType::UpdateLookup))
        .build();
    let mut resumed = coll_b.watch().with_options(opts).await.unwrap();
    for i in 4..10 {
        let e = next(&mut resumed).await;
        assert_eq!(e.document_key, Some(doc! {"_id": i}));
    }
    coll.update_one(doc! {"_id": 9}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    let e = next(&mut resumed).await;
    assert_eq!(
        e.full_document,
        Some(doc! {"_id": 9, "n": 1}),
        "updateLookup"
    );

    // The same token in a plain aggregate: an open cursor with a resume token.
    let token = bson::to_bson(&token.unwrap()).unwrap();
    let db = client.database("cs");
    let reply = db
        .run_command(doc! {
            "aggregate": "resume",
            "pipeline": [{"$changeStream": {"resumeAfter": token}}, {"$match": {"operationType": "insert"}}],
            "cursor": {}
        })
        .await
        .unwrap();
    let cursor = reply.get_document("cursor").unwrap();
    assert!(cursor.get_i64("id").unwrap() != 0);
    assert!(
        cursor.get_document("postBatchResumeToken").is_ok(),
        "{reply}"
    );
    set.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn change_stream_errors_use_mongodbs_codes() {
    let (set, client) = set_and_client().await;
    let db = client.database("cs");
    let run = |cmd: Document| {
        let db = db.clone();
        async move {
            db.run_command(cmd)
                .await
                .map_err(|e| tests::sharded::error_code(&e))
        }
    };
    let agg = |pipeline: Vec<Document>| doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {}};
    let cases = [
        (
            agg(vec![doc! {"$match": {}}, doc! {"$changeStream": {}}]),
            40602,
        ),
        (
            agg(vec![
                doc! {"$changeStream": {}},
                doc! {"$group": {"_id": 1}},
            ]),
            20,
        ),
        (agg(vec![doc! {"$changeStream": {"bogus": 1}}]), 40415),
        (
            agg(vec![
                doc! {"$changeStream": {"resumeAfter": {"_data": "zz"}}},
            ]),
            260,
        ),
        (
            agg(vec![
                doc! {"$changeStream": {}},
                doc! {"$project": {"_id": 0}},
            ]),
            0,
        ),
    ];
    for (cmd, code) in cases {
        let got = run(cmd.clone()).await;
        if code == 0 {
            // Opening works; an event would then fail with 280 (the _id was removed).
            assert!(got.is_ok(), "{cmd}: {got:?}");
        } else {
            assert_eq!(got.err(), Some(Some(code)), "{cmd}");
        }
    }
    let coll = db.collection::<Document>("c");
    let mut stream = coll
        .watch()
        .pipeline([doc! {"$project": {"_id": 0}}])
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let err = tokio::time::timeout(LIVENESS, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(tests::sharded::error_code(&err), Some(280));
    set.stop().await;
}

/// Every acknowledged insert is seen exactly once, in order, by a consumer that resumes
/// with its last token after every error, while the primary is killed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_sees_every_acknowledged_write_once_through_failovers() {
    let (mut set, client) = set_and_client().await;
    let coll = client.database("cs").collection::<Document>("failover");
    let start = coll.watch().await.unwrap();
    let mut token = start.resume_token();
    drop(start);
    let mut acked = BTreeSet::new();
    let mut n = 0i64;
    for round in 0..3 {
        for _ in 0..30 {
            n += 1;
            if coll
                .insert_one(doc! {"_id": n, "round": round})
                .await
                .is_ok()
            {
                acked.insert(n);
            }
        }
        if round < 2 {
            let p = set.primary().expect("a primary");
            set.kill(p).await;
            set.wait_for_primary(LIVENESS).await.expect("a new primary");
            set.restart(p).await;
        }
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + LIVENESS * 4;
    while seen.len() < acked.len() && Instant::now() < deadline {
        let opts = ChangeStreamOptions::builder()
            .resume_after(token.clone())
            .build();
        let Ok(mut stream) = coll.watch().with_options(opts).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        // Until an error, or 5 s without an event: then it resumes from its token.
        let quiet = Duration::from_secs(5);
        while let Ok(Some(Ok(e))) = tokio::time::timeout(quiet, stream.next()).await {
            token = Some(e.id.clone());
            if let Some(Bson::Int64(id)) = e.document_key.as_ref().and_then(|k| k.get("_id")) {
                seen.push(*id);
            }
        }
    }
    let unique: BTreeSet<i64> = seen.iter().copied().collect();
    assert_eq!(
        unique.len(),
        seen.len(),
        "an event was seen twice: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "out of order: {seen:?}"
    );
    let missing: Vec<_> = acked.difference(&unique).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but never seen: {missing:?}"
    );
    set.stop().await;
}

/// Two shards: a database stream merges both in cluster-time order, and an event on one
/// shard arrives while the other shard stays idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_merges_every_shards_stream() {
    let cluster = TestShardedCluster::start(2, 2).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    admin
        .run_command(doc! {"enableSharding": "csm", "primaryShard": "shard0"})
        .await
        .unwrap();
    tests::sharded::shard_by_k(&client, &client.database("csm").collection("c")).await;
    admin
        .run_command(doc! {"split": "csm.c", "middle": {"k": 0}})
        .await
        .unwrap();
    admin
        .run_command(doc! {"moveChunk": "csm.c", "find": {"k": 0}, "to": "shard1"})
        .await
        .unwrap();
    let db = client.database("csm");
    let coll = db.collection::<Document>("c");
    let mut stream = db.watch().await.unwrap();
    // One document only: the other shard has nothing to say.
    coll.insert_one(doc! {"_id": 1, "k": 1}).await.unwrap();
    let e = next(&mut stream).await;
    assert_eq!(e.document_key, Some(doc! {"k": 1, "_id": 1}));
    for i in 2..40 {
        let k = if i % 2 == 0 { -i } else { i };
        coll.insert_one(doc! {"_id": i, "k": k}).await.unwrap();
    }
    let mut ids = Vec::new();
    let mut last = None;
    while ids.len() < 38 {
        let e = next(&mut stream).await;
        if let Some(Bson::Int32(id)) = e.document_key.as_ref().and_then(|k| k.get("_id")) {
            ids.push(*id);
        }
        last = Some(e.id);
    }
    // In the order the client wrote them, across both shards: members follow the
    // router's cluster time, so each write takes a later time than the one before.
    assert_eq!(ids, (2..40).collect::<Vec<_>>(), "in the order written");
    // A transaction over both shards: its events come from both (a two-phase commit,
    // each shard's writes in entries of their own, `TXN_ENTRY_KB`), once each.
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    for (id, k) in [(50, -50), (51, 51), (52, -52)] {
        coll.insert_one(doc! {"_id": id, "k": k})
            .session(&mut session)
            .await
            .unwrap();
    }
    coll.update_one(doc! {"k": 51}, doc! {"$set": {"t": 1}})
        .session(&mut session)
        .await
        .unwrap();
    session.commit_transaction().await.unwrap();
    let mut in_txn = Vec::new();
    while in_txn.len() < 4 {
        let e = next(&mut stream).await;
        let id = e.document_key.as_ref().and_then(|k| k.get_i32("_id").ok());
        in_txn.push((e.operation_type.clone(), id));
        if e.operation_type == OperationType::Insert {
            let k = e.full_document.as_ref().and_then(|d| d.get_i32("k").ok());
            assert!(k.is_some(), "an insert's document: {e:?}");
        }
        last = Some(e.id);
    }
    in_txn.sort_by_key(|(_, id)| *id);
    let ids: Vec<_> = in_txn.iter().map(|(_, id)| id.unwrap_or(-1)).collect();
    assert_eq!(ids, vec![50, 51, 51, 52], "{in_txn:?}");
    // On one shard: a single commit entry whose writes earlier entries carry.
    session.start_transaction().await.unwrap();
    for id in [60, 61] {
        coll.insert_one(doc! {"_id": id, "k": -id})
            .session(&mut session)
            .await
            .unwrap();
    }
    session.commit_transaction().await.unwrap();
    for id in [60, 61] {
        let e = next(&mut stream).await;
        assert_eq!(e.full_document, Some(doc! {"_id": id, "k": -id}));
        last = Some(e.id);
    }
    // Resume through the other router.
    let other = cluster.client(1).await;
    let opts = ChangeStreamOptions::builder().start_after(last).build();
    let mut resumed = other
        .database("csm")
        .watch()
        .with_options(opts)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 100, "k": 100}).await.unwrap();
    let e = next(&mut resumed).await;
    assert_eq!(e.document_key, Some(doc! {"k": 100, "_id": 100}));
    cluster.stop().await;
}
