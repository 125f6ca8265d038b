//! Indexes: create/list/drop, unique (E11000 with keyValue), sparse, partial, TTL,
//! hashed, multikey, and the planner's choice shown by explain.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::options::IndexOptions;
use mongodb::IndexModel;
use tests::TestCluster;

fn winning_stage(explain: &Document) -> String {
    let plan = explain
        .get_document("queryPlanner")
        .unwrap()
        .get_document("winningPlan")
        .unwrap();
    match plan.get_document("inputStage") {
        Ok(input) => input.get_str("stage").unwrap().to_string(),
        Err(_) => plan.get_str("stage").unwrap().to_string(),
    }
}

#[tokio::test]
async fn create_list_drop_and_planner_uses_indexes() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("ix");
    let coll = db.collection::<Document>("c");
    coll.insert_many(
        (0..300).map(|i| doc! {"_id": i, "a": i, "b": i % 7, "tags": [i % 5, 100 + i % 5]}),
    )
    .await
    .unwrap();
    let names = coll
        .create_indexes(vec![
            IndexModel::builder().keys(doc! {"a": 1}).build(),
            IndexModel::builder().keys(doc! {"b": 1, "a": -1}).build(),
            IndexModel::builder().keys(doc! {"tags": 1}).build(),
            IndexModel::builder().keys(doc! {"h": "hashed"}).build(),
        ])
        .await
        .unwrap();
    assert_eq!(
        names.index_names,
        vec!["a_1", "b_1_a_-1", "tags_1", "h_hashed"]
    );
    let listed: Vec<String> = coll.list_index_names().await.unwrap();
    assert_eq!(
        listed,
        vec!["_id_", "a_1", "b_1_a_-1", "tags_1", "h_hashed"]
    );

    let explain = db
        .run_command(doc! {"explain": {"find": "c", "filter": {"a": {"$gte": 10, "$lt": 20}}}})
        .await
        .unwrap();
    assert_eq!(winning_stage(&explain), "IXSCAN");
    let stats = explain.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i64("nReturned").unwrap(), 10);
    assert!(stats.get_i64("totalDocsExamined").unwrap() <= 11, "{stats}");

    let explain = db
        .run_command(doc! {"explain": {"find": "c", "filter": {"zzz": 1}}})
        .await
        .unwrap();
    assert_eq!(winning_stage(&explain), "COLLSCAN");
    let explain = db
        .run_command(doc! {"explain": {"find": "c", "filter": {"_id": 5}}})
        .await
        .unwrap();
    assert_eq!(winning_stage(&explain), "IDHACK");

    // multikey: each array element is indexed; a document is returned once.
    let n = coll
        .count_documents(doc! {"tags": {"$gte": 103}})
        .await
        .unwrap();
    assert_eq!(n, 120);
    let got: Vec<Document> = coll
        .find(doc! {"tags": 101, "b": 3})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(got
        .iter()
        .all(|d| d.get_i32("a").unwrap() % 5 == 1 && d.get_i32("a").unwrap() % 7 == 3));
    // a ≡ 1 (mod 5) and a ≡ 3 (mod 7) ⇔ a ≡ 31 (mod 35): 31, 66, ..., 276
    assert_eq!(got.len(), 8);

    // hinting a missing index is an error; dropping works by name and by key
    let err = db
        .run_command(doc! {"find": "c", "hint": "nope_1"})
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("hint"), "{err}");
    coll.drop_index("a_1").await.unwrap();
    db.run_command(doc! {"dropIndexes": "c", "index": {"b": 1, "a": -1}})
        .await
        .unwrap();
    let err = coll.drop_index("a_1").await.unwrap_err();
    assert!(format!("{err}").contains("index not found"), "{err}");
    let err = coll.drop_index("_id_").await.unwrap_err();
    assert!(format!("{err}").contains("_id"), "{err}");
    assert_eq!(
        coll.list_index_names().await.unwrap(),
        vec!["_id_", "tags_1", "h_hashed"]
    );
}

#[tokio::test]
async fn unique_sparse_partial_indexes() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("ix");
    let coll = db.collection::<Document>("u");
    coll.create_index(
        IndexModel::builder()
            .keys(doc! {"email": 1})
            .options(IndexOptions::builder().unique(true).sparse(true).build())
            .build(),
    )
    .await
    .unwrap();
    coll.insert_one(doc! {"email": "a@x"}).await.unwrap();
    // sparse: documents without the field do not collide
    coll.insert_one(doc! {"other": 1}).await.unwrap();
    coll.insert_one(doc! {"other": 2}).await.unwrap();
    let err = coll.insert_one(doc! {"email": "a@x"}).await.unwrap_err();
    let mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) = &*err.kind
    else {
        panic!("{err}")
    };
    assert_eq!(w.code, 11000);
    assert!(
        w.message.contains("E11000 duplicate key error") && w.message.contains("email_1"),
        "{}",
        w.message
    );
    // keyPattern and keyValue sit in the raw write error, which the driver does not expose.
    let raw = db
        .run_command(doc! {"insert": "u", "documents": [{"email": "a@x"}]})
        .await
        .unwrap();
    let we = raw.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(we.get_document("keyValue").unwrap(), &doc! {"email": "a@x"});
    assert_eq!(we.get_document("keyPattern").unwrap(), &doc! {"email": 1});

    // updating into a duplicate is refused and leaves the document unchanged
    let id = coll
        .insert_one(doc! {"email": "b@x"})
        .await
        .unwrap()
        .inserted_id;
    let err = coll
        .update_one(doc! {"_id": id.clone()}, doc! {"$set": {"email": "a@x"}})
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("E11000"), "{err}");
    assert_eq!(
        coll.find_one(doc! {"_id": id})
            .await
            .unwrap()
            .unwrap()
            .get_str("email")
            .unwrap(),
        "b@x"
    );

    // building a unique index over duplicates fails and leaves no index behind
    let c2 = db.collection::<Document>("dups");
    c2.insert_many(vec![doc! {"k": 1}, doc! {"k": 1}])
        .await
        .unwrap();
    let err = c2
        .create_index(
            IndexModel::builder()
                .keys(doc! {"k": 1})
                .options(IndexOptions::builder().unique(true).build())
                .build(),
        )
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("E11000"), "{err}");
    assert_eq!(c2.list_index_names().await.unwrap(), vec!["_id_"]);

    // partial: only matching documents are constrained
    let c3 = db.collection::<Document>("partial");
    c3.create_index(
        IndexModel::builder()
            .keys(doc! {"sku": 1})
            .options(
                IndexOptions::builder()
                    .unique(true)
                    .partial_filter_expression(doc! {"active": true})
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    c3.insert_many(vec![
        doc! {"sku": 1, "active": false},
        doc! {"sku": 1, "active": false},
        doc! {"sku": 1, "active": true},
    ])
    .await
    .unwrap();
    assert!(c3
        .insert_one(doc! {"sku": 1, "active": true})
        .await
        .is_err());
}

#[tokio::test]
async fn ttl_index_expires_documents() {
    let cluster = TestCluster::start().await; // TTL monitor runs every second in tests
    let coll = cluster
        .client()
        .await
        .database("ix")
        .collection::<Document>("ttl");
    coll.create_index(
        IndexModel::builder()
            .keys(doc! {"at": 1})
            .options(
                IndexOptions::builder()
                    .expire_after(Duration::from_secs(0))
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let past = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() - 60_000);
    let future = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() + 3_600_000);
    coll.insert_many(vec![
        doc! {"_id": 1, "at": past},
        doc! {"_id": 2, "at": future},
        doc! {"_id": 3, "at": "not a date"},
    ])
    .await
    .unwrap();
    // Bounded wait for the background monitor (not a timing assertion: it only bounds the test).
    let until = Instant::now() + Duration::from_secs(30);
    while coll.count_documents(doc! {"_id": 1}).await.unwrap() == 1 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = tests::ids_of(&coll, doc! {}).await;
    assert_eq!(left, vec![2, 3]);
}

/// Inserts into one collection run side by side (they share its write lock). Two that make
/// different indexes multikey at the same moment must both be recorded: an index still
/// marked single-valued would intersect the bounds of `{$gt: 1, $lt: 3}` and miss
/// `[0, 5]`, which MongoDB matches (one element is above 1, another below 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_inserts_keep_every_multikey_flip() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("app");
    for round in 0..8 {
        let coll = db.collection::<Document>(&format!("flips{round}"));
        for field in ["a", "b", "c"] {
            coll.create_index(IndexModel::builder().keys(doc! {field: 1}).build())
                .await
                .unwrap();
        }
        let inserts = ["a", "b", "c"].map(|field| {
            let coll = coll.clone();
            tokio::spawn(async move {
                coll.insert_one(doc! {field: [0, 5]}).await.unwrap();
            })
        });
        for t in inserts {
            t.await.unwrap();
        }
        for field in ["a", "b", "c"] {
            let n = coll
                .count_documents(doc! {field: {"$gt": 1, "$lt": 3}})
                .await
                .unwrap();
            assert_eq!(
                n, 1,
                "round {round}: index on {field} lost its multikey flag"
            );
        }
    }
    // With several runtime threads the node may still be closing on one of them when the
    // cluster is dropped, and dropping removes its directory: stop it first.
    cluster.stop().await;
}
