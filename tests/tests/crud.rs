//! CRUD through the router with the Rust `mongodb` driver, on WiredTiger.

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use mongodb::options::{FindOneAndUpdateOptions, FindOptions, ReturnDocument, UpdateOptions};
use tests::TestCluster;

#[tokio::test]
async fn insert_find_sort_skip_limit_projection_and_getmore() {
    let cluster = TestCluster::start().await;
    let client = cluster.client().await;
    let coll = client.database("app").collection::<Document>("people");
    let docs: Vec<Document> = (0..250).map(|i| doc! {"_id": i, "n": i % 10, "name": format!("p{i}"), "tags": ["a", format!("t{}", i % 3)]}).collect();
    let res = coll.insert_many(docs).await.unwrap();
    assert_eq!(res.inserted_ids.len(), 250);

    // getMore: 250 documents in batches of 7 all come back, in _id order.
    let opts = FindOptions::builder()
        .batch_size(7)
        .sort(doc! {"_id": 1})
        .build();
    let all: Vec<Document> = coll
        .find(doc! {})
        .with_options(opts)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 250);
    assert_eq!(all[249].get_i32("_id").unwrap(), 249);

    // filter + sort + skip + limit + projection
    let opts = FindOptions::builder()
        .sort(doc! {"_id": -1})
        .skip(2)
        .limit(3)
        .projection(doc! {"name": 1, "_id": 0})
        .build();
    let got: Vec<Document> = coll
        .find(doc! {"n": 4})
        .with_options(opts)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![
            doc! {"name": "p224"},
            doc! {"name": "p214"},
            doc! {"name": "p204"}
        ]
    );

    // array matching and $in / $gt on nested values
    let n = coll
        .count_documents(doc! {"tags": "t1", "_id": {"$lt": 30}})
        .await
        .unwrap();
    assert_eq!(n, 10);
    let n = coll
        .count_documents(doc! {"n": {"$in": [1, 2]}})
        .await
        .unwrap();
    assert_eq!(n, 50);
    assert_eq!(coll.estimated_document_count().await.unwrap(), 250);

    let distinct = coll.distinct("n", doc! {"_id": {"$lt": 5}}).await.unwrap();
    assert_eq!(
        distinct,
        vec![
            Bson::Int32(0),
            Bson::Int32(1),
            Bson::Int32(2),
            Bson::Int32(3),
            Bson::Int32(4)
        ]
    );
}

#[tokio::test]
async fn updates_upserts_and_array_filters() {
    let cluster = TestCluster::start().await;
    let coll = cluster
        .client()
        .await
        .database("app")
        .collection::<Document>("u");
    coll.insert_many(vec![
        doc! {"_id": 1, "qty": 5, "grades": [80, 95, 100]},
        doc! {"_id": 2, "qty": 7, "grades": [70, 90]},
    ])
    .await
    .unwrap();

    let r = coll
        .update_one(
            doc! {"_id": 1},
            doc! {"$inc": {"qty": 3}, "$set": {"s": "x"}},
        )
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    let r = coll
        .update_many(doc! {}, doc! {"$set": {"grades.$[g]": 100}})
        .with_options(
            UpdateOptions::builder()
                .array_filters(vec![doc! {"g": {"$gte": 90}}])
                .build(),
        )
        .await
        .unwrap();
    assert_eq!(r.modified_count, 2);
    let d = coll.find_one(doc! {"_id": 2}).await.unwrap().unwrap();
    assert_eq!(
        d.get_array("grades").unwrap(),
        &vec![Bson::Int32(70), Bson::Int32(100)]
    );

    // positional $ from the query's array match
    coll.update_one(
        doc! {"_id": 1, "grades": 80},
        doc! {"$set": {"grades.$": 81}},
    )
    .await
    .unwrap();
    let d = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(d.get_array("grades").unwrap()[0], Bson::Int32(81));
    assert_eq!(d.get_i32("qty").unwrap(), 8);

    // no-op update matches but does not modify
    let r = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"s": "x"}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 0));

    // upsert inserts from the filter's equality fields
    let r = coll
        .update_one(doc! {"k": "new"}, doc! {"$set": {"v": 1}})
        .upsert(true)
        .await
        .unwrap();
    let id = r.upserted_id.expect("upserted id");
    let d = coll.find_one(doc! {"_id": id}).await.unwrap().unwrap();
    assert_eq!(d.get_str("k").unwrap(), "new");

    // replacement keeps _id
    coll.replace_one(doc! {"_id": 2}, doc! {"only": true})
        .await
        .unwrap();
    assert_eq!(
        coll.find_one(doc! {"_id": 2}).await.unwrap().unwrap(),
        doc! {"_id": 2, "only": true}
    );

    // changing _id is refused with ImmutableField (66)
    let err = coll
        .update_one(doc! {"_id": 2}, doc! {"$set": {"_id": 3}})
        .await
        .unwrap_err();
    assert_eq!(write_error_code(&err), Some(66), "{err}");
    // $inc on a string is a TypeMismatch (14)
    let err = coll
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"s": 1}})
        .await
        .unwrap_err();
    assert_eq!(write_error_code(&err), Some(14), "{err}");
}

#[tokio::test]
async fn deletes_and_find_and_modify() {
    let cluster = TestCluster::start().await;
    let coll = cluster
        .client()
        .await
        .database("app")
        .collection::<Document>("d");
    coll.insert_many((0..20).map(|i| doc! {"_id": i, "even": i % 2 == 0}))
        .await
        .unwrap();
    assert_eq!(
        coll.delete_one(doc! {"even": true})
            .await
            .unwrap()
            .deleted_count,
        1
    );
    assert_eq!(
        coll.delete_many(doc! {"even": true})
            .await
            .unwrap()
            .deleted_count,
        9
    );
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 10);

    let opts = FindOneAndUpdateOptions::builder()
        .return_document(ReturnDocument::After)
        .sort(doc! {"_id": -1})
        .build();
    let after = coll
        .find_one_and_update(doc! {"even": false}, doc! {"$set": {"seen": 1}})
        .with_options(opts)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, doc! {"_id": 19, "even": false, "seen": 1});
    let before = coll
        .find_one_and_update(doc! {"_id": 17}, doc! {"$set": {"seen": 2}})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before, doc! {"_id": 17, "even": false});
    let removed = coll
        .find_one_and_delete(doc! {"_id": 1})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(removed.get_i32("_id").unwrap(), 1);
    assert!(coll.find_one(doc! {"_id": 1}).await.unwrap().is_none());
    let replaced = coll
        .find_one_and_replace(doc! {"_id": 3}, doc! {"r": 1})
        .await
        .unwrap()
        .unwrap();
    assert!(!replaced.get_bool("even").unwrap());
}

#[tokio::test]
async fn bulk_writes_report_indexed_write_errors() {
    let cluster = TestCluster::start().await;
    let coll = cluster
        .client()
        .await
        .database("app")
        .collection::<Document>("b");
    coll.insert_one(doc! {"_id": 2}).await.unwrap();

    // ordered: stops at the duplicate (index 1), so only the first document lands.
    let err = coll
        .insert_many(vec![doc! {"_id": 1}, doc! {"_id": 2}, doc! {"_id": 3}])
        .await
        .unwrap_err();
    let errs = insert_many_errors(&err);
    assert_eq!(errs, vec![(1, 11000)]);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);

    // unordered: every valid document lands; each error keeps its index.
    let err = coll
        .insert_many(vec![
            doc! {"_id": 2},
            doc! {"_id": 4},
            doc! {"_id": 1},
            doc! {"_id": 5},
        ])
        .ordered(false)
        .await
        .unwrap_err();
    assert_eq!(insert_many_errors(&err), vec![(0, 11000), (2, 11000)]);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 4);
}

#[tokio::test]
async fn unknown_operator_and_wrong_types_get_mongodb_errors() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("app");
    db.collection::<Document>("e")
        .insert_one(doc! {"a": 1})
        .await
        .unwrap();
    let err = db
        .run_command(doc! {"find": "e", "filter": {"a": {"$bogus": 1}}})
        .await
        .unwrap_err();
    assert_eq!(command_code(&err), Some(2), "{err}");
    let err = db
        .run_command(doc! {"find": "e", "filter": 5})
        .await
        .unwrap_err();
    assert_eq!(command_code(&err), Some(14), "{err}");
    let err = db.run_command(doc! {"noSuchCommand": 1}).await.unwrap_err();
    assert_eq!(command_code(&err), Some(59), "{err}");
    let err = db
        .run_command(doc! {"getMore": 12345i64, "collection": "e"})
        .await
        .unwrap_err();
    assert_eq!(command_code(&err), Some(43), "{err}");
    let err = db
        .run_command(doc! {"find": "e", "maxTimeMS": -1})
        .await
        .unwrap_err();
    assert_eq!(command_code(&err), Some(2), "{err}");
    let err = db
        .run_command(doc! {"delete": "e", "deletes": [{"q": {}, "limit": 5}]})
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("limit"), "{err}");
}

#[tokio::test]
async fn get_more_and_kill_cursors_by_command() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("app");
    db.collection::<Document>("k")
        .insert_many((0..10).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    let first = db
        .run_command(doc! {"find": "k", "batchSize": 3})
        .await
        .unwrap();
    let cursor = first.get_document("cursor").unwrap();
    let id = cursor.get_i64("id").unwrap();
    assert_ne!(id, 0);
    assert_eq!(cursor.get_array("firstBatch").unwrap().len(), 3);
    let more = db
        .run_command(doc! {"getMore": id, "collection": "k", "batchSize": 4})
        .await
        .unwrap();
    assert_eq!(tests::batch_len(&more), 4);
    let killed = db
        .run_command(doc! {"killCursors": "k", "cursors": [id, 424242i64]})
        .await
        .unwrap();
    assert_eq!(
        killed.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)]
    );
    assert_eq!(
        killed.get_array("cursorsNotFound").unwrap(),
        &vec![Bson::Int64(424242)]
    );
    let err = db
        .run_command(doc! {"getMore": id, "collection": "k"})
        .await
        .unwrap_err();
    assert_eq!(command_code(&err), Some(43), "{err}");
}

pub fn command_code(err: &mongodb::error::Error) -> Option<i32> {
    match &*err.kind {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

pub fn write_error_code(err: &mongodb::error::Error) -> Option<i32> {
    match &*err.kind {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => {
            Some(w.code)
        }
        _ => None,
    }
}

/// Insert batches travel as raw BSON from the driver to storage (the router does not
/// parse them, the shard stores a document as it came when `_id` is first): documents
/// with `_id` elsewhere or missing, invalid `_id`s and secondary indexes still behave as
/// MongoDB documents them.
#[tokio::test]
async fn raw_insert_batches_keep_id_rules_and_indexes() {
    let cluster = TestCluster::start().await;
    let coll = cluster
        .client()
        .await
        .database("app")
        .collection::<Document>("raw");
    coll.create_index(tests::unique_index(doc! {"u": 1}))
        .await
        .unwrap();
    coll.insert_many(vec![
        doc! {"a": 1, "_id": 7, "u": 1},
        doc! {"_id": 8, "b": {"c": [1, 2]}, "u": 2},
        doc! {"x": 1},
    ])
    .await
    .unwrap();
    // `_id` is stored first, as MongoDB stores it.
    let seven = coll.find_one(doc! {"_id": 7}).await.unwrap().unwrap();
    assert_eq!(seven, doc! {"_id": 7, "a": 1, "u": 1});
    assert_eq!(seven.keys().next().map(String::as_str), Some("_id"));
    let eight = coll.find_one(doc! {"b.c": 2}).await.unwrap().unwrap();
    assert_eq!(eight, doc! {"_id": 8, "b": {"c": [1, 2]}, "u": 2});
    let generated = coll.find_one(doc! {"x": 1}).await.unwrap().unwrap();
    assert!(matches!(generated.get("_id"), Some(Bson::ObjectId(_))));

    // The unique index on `u` sees raw documents: the duplicate is E11000 with its key.
    let err = coll
        .insert_many(vec![doc! {"_id": 9, "u": 3}, doc! {"_id": 10, "u": 1}])
        .await
        .unwrap_err();
    assert_eq!(insert_many_errors(&err), vec![(1, 11000)]);
    let mongodb::error::ErrorKind::InsertMany(e) = &*err.kind else {
        unreachable!()
    };
    let dup = &e.write_errors.as_ref().unwrap()[0];
    assert!(dup.message.contains("u_1"), "{}", dup.message);
    // An array `_id` is InvalidIdField (53) in its own slot; the others land (unordered).
    let err = coll
        .insert_many(vec![doc! {"_id": [1], "u": 4}, doc! {"_id": 11, "u": 5}])
        .ordered(false)
        .await
        .unwrap_err();
    assert_eq!(insert_many_errors(&err), vec![(0, 53)]);
    let ids: Vec<Bson> = coll.distinct("_id", doc! {"u": {"$gte": 3}}).await.unwrap();
    assert_eq!(ids, vec![Bson::Int32(9), Bson::Int32(11)]);
}

fn insert_many_errors(err: &mongodb::error::Error) -> Vec<(usize, i32)> {
    match &*err.kind {
        mongodb::error::ErrorKind::InsertMany(e) => e
            .write_errors
            .as_ref()
            .map(|w| w.iter().map(|x| (x.index, x.code)).collect())
            .unwrap_or_default(),
        other => panic!("expected an InsertMany error, got {other:?}"),
    }
}
