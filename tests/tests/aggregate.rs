//! Aggregation through the router: the common stages, $lookup, $facet, $out and $merge.

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use tests::TestCluster;

async fn run(coll: &mongodb::Collection<Document>, pipeline: Vec<Document>) -> Vec<Document> {
    run_with_disk(coll, pipeline, false).await
}

async fn run_with_disk(
    coll: &mongodb::Collection<Document>,
    pipeline: Vec<Document>,
    allow_disk_use: bool,
) -> Vec<Document> {
    coll.aggregate(pipeline)
        .allow_disk_use(allow_disk_use)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn group_sort_project_unwind_lookup_facet() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("agg");
    let orders = db.collection::<Document>("orders");
    orders
        .insert_many(vec![
            doc! {"_id": 1, "cust": "a", "amount": 10, "items": ["x", "y"]},
            doc! {"_id": 2, "cust": "b", "amount": 5, "items": ["x"]},
            doc! {"_id": 3, "cust": "a", "amount": 7, "items": []},
        ])
        .await
        .unwrap();
    db.collection::<Document>("customers")
        .insert_many(vec![
            doc! {"_id": "a", "name": "Ann"},
            doc! {"_id": "b", "name": "Bob"},
        ])
        .await
        .unwrap();

    let got = run(&orders, vec![
        doc! {"$match": {"amount": {"$gte": 5}}},
        doc! {"$group": {"_id": "$cust", "total": {"$sum": "$amount"}, "n": {"$sum": 1}, "max": {"$max": "$amount"}, "avg": {"$avg": "$amount"}}},
        doc! {"$sort": {"total": -1}},
        doc! {"$project": {"total": 1, "n": 1, "max": 1, "avg": 1}},
    ])
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": "a", "total": 17, "n": 2, "max": 10, "avg": 8.5},
            doc! {"_id": "b", "total": 5, "n": 1, "max": 5, "avg": 5.0},
        ]
    );

    let got = run(
        &orders,
        vec![doc! {"$unwind": "$items"}, doc! {"$sortByCount": "$items"}],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {"_id": "x", "count": 2}, doc! {"_id": "y", "count": 1}]
    );

    let got = run(&orders, vec![
        doc! {"$match": {"_id": 2}},
        doc! {"$lookup": {"from": "customers", "localField": "cust", "foreignField": "_id", "as": "c"}},
        doc! {"$replaceWith": {"order": "$_id", "name": {"$arrayElemAt": ["$c.name", 0]}}},
    ])
    .await;
    assert_eq!(got, vec![doc! {"order": 2, "name": "Bob"}]);

    let got = run(&orders, vec![doc! {"$facet": {"count": [{"$count": "n"}], "top": [{"$sort": {"amount": -1}}, {"$limit": 1}, {"$project": {"_id": 1}}]}}]).await;
    assert_eq!(got, vec![doc! {"count": [{"n": 3}], "top": [{"_id": 1}]}]);

    let got = run(
        &orders,
        vec![
            doc! {"$set": {"big": {"$gt": ["$amount", 6]}}},
            doc! {"$unset": ["items", "cust"]},
            doc! {"$skip": 1},
            doc! {"$limit": 1},
        ],
    )
    .await;
    assert_eq!(got, vec![doc! {"_id": 2, "amount": 5, "big": false}]);

    // unknown stage and operator errors carry MongoDB's codes
    let err = orders
        .aggregate(vec![doc! {"$bogus": {}}])
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("40324"), "{err}");
}

#[tokio::test]
async fn out_and_merge_write_collections() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("agg2");
    let src = db.collection::<Document>("src");
    src.insert_many((0..10).map(|i| doc! {"_id": i, "g": i % 2}))
        .await
        .unwrap();
    let out = run(
        &src,
        vec![
            doc! {"$group": {"_id": "$g", "n": {"$sum": 1}}},
            doc! {"$out": "summary"},
        ],
    )
    .await;
    assert!(out.is_empty());
    let mut summary: Vec<Document> = db
        .collection::<Document>("summary")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    summary.sort_by_key(|d| d.get_i32("_id").unwrap());
    assert_eq!(
        summary,
        vec![doc! {"_id": 0, "n": 5}, doc! {"_id": 1, "n": 5}]
    );

    run(&src, vec![doc! {"$match": {"_id": {"$lt": 2}}}, doc! {"$project": {"tag": "m"}}, doc! {"$merge": {"into": "summary", "whenMatched": "merge", "whenNotMatched": "insert"}}]).await;
    let merged = db
        .collection::<Document>("summary")
        .find_one(doc! {"_id": 0})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(merged, doc! {"_id": 0, "n": 5, "tag": "m"});
    assert_eq!(
        db.collection::<Document>("summary")
            .count_documents(doc! {})
            .await
            .unwrap(),
        2
    );
    let _ = Bson::Null;
}

/// The code of a failed command, whatever its kind.
fn code_of(e: &mongodb::error::Error) -> i32 {
    match *e.kind {
        mongodb::error::ErrorKind::Command(ref c) => c.code,
        ref other => panic!("expected a command error, got {other:?}"),
    }
}

/// Blocking stages hold at most MongoDB's 100 MB (292 without allowDiskUse; with it sorts
/// and `$group` spill to disk, and the other stages get 146). A `$group` holds its groups,
/// not its input, and a sort with a limit its top k, so both read a collection larger
/// than that; so do streaming stages, batch by batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_stages_are_bounded_and_streaming_ones_are_not() {
    let cluster = TestCluster::start().await;
    let db = cluster.client().await.database("agg_memory");
    let big = db.collection::<Document>("big");
    let mb = "x".repeat(1 << 20);
    for chunk in 0..11 {
        let docs = (0..10).map(|i| doc! {"_id": chunk * 10 + i, "k": i, "s": mb.clone()});
        big.insert_many(docs).await.unwrap();
    }
    // 110 MB of input, ten small groups: no memory limit is near.
    let group = doc! {"$group": {"_id": "$k", "n": {"$sum": 1}}};
    let by_key = doc! {"$sort": {"_id": 1}};
    let grouped = run(&big, vec![group.clone(), by_key.clone()]).await;
    let ten_groups: Vec<Document> = (0..10).map(|k| doc! {"_id": k, "n": 11}).collect();
    assert_eq!(grouped, ten_groups);
    let counted = run(&big, vec![doc! {"$count": "n"}]).await;
    assert_eq!(counted, vec![doc! {"n": 110}]);
    // A $sample holds its sample (reservoir sampling), not its input.
    let sampled = run(
        &big,
        vec![doc! {"$sample": {"size": 3}}, doc! {"$project": {"k": 1}}],
    )
    .await;
    assert_eq!(sampled.len(), 3, "{sampled:?}");
    // Groups that hold 110 MB themselves: 292, and with allowDiskUse they spill.
    let pushed = vec![
        doc! {"$group": {"_id": "$k", "all": {"$push": "$s"}}},
        doc! {"$project": {"n": {"$size": "$all"}}},
        by_key.clone(),
    ];
    let e = big.aggregate(pushed.clone()).await.unwrap_err();
    assert_eq!(code_of(&e), 292, "{e}");
    assert_eq!(run_with_disk(&big, pushed, true).await, ten_groups);
    // Stages that do not spill say so.
    let facet = vec![doc! {"$facet": {"all": [{"$match": {}}]}}];
    let e = big.aggregate(facet).allow_disk_use(true).await.unwrap_err();
    assert_eq!(code_of(&e), 146, "{e}");
    let e = match big.find(doc! {}).sort(doc! {"k": 1}).await {
        Err(e) => e,
        Ok(c) => c.try_collect::<Vec<_>>().await.unwrap_err(),
    };
    assert_eq!(code_of(&e), 292, "{e}");
    // A sort with a limit keeps its top k only, in find and in aggregate.
    let top: Vec<Document> = big
        .find(doc! {})
        .sort(doc! {"k": -1, "_id": -1})
        .skip(1)
        .limit(3)
        .projection(doc! {"k": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let top_expected = vec![
        doc! {"_id": 99, "k": 9},
        doc! {"_id": 89, "k": 9},
        doc! {"_id": 79, "k": 9},
    ];
    assert_eq!(top, top_expected);
    let sort_desc = doc! {"$sort": {"k": -1, "_id": -1}};
    let top_k = vec![
        sort_desc,
        doc! {"$skip": 1},
        doc! {"$limit": 3},
        doc! {"$project": {"k": 1}},
    ];
    assert_eq!(run(&big, top_k).await, top_expected);
    // With allowDiskUse a find's sort spills to disk and returns every document in order.
    let sorted: Vec<Document> = big
        .find(doc! {})
        .sort(doc! {"k": -1, "_id": 1})
        .projection(doc! {"k": 1})
        .allow_disk_use(true)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let keys: Vec<(i32, i32)> = sorted
        .iter()
        .map(|d| (-d.get_i32("k").unwrap(), d.get_i32("_id").unwrap()))
        .collect();
    let mut expected = keys.clone();
    expected.sort_unstable();
    assert_eq!(keys.len(), 110);
    assert_eq!(keys, expected);
    // So does an aggregation's leading $sort, and the stages after it read its runs.
    let sort = doc! {"$sort": {"k": -1, "_id": 1}};
    let project = doc! {"$project": {"k": 1}};
    let pipeline = vec![sort.clone(), project.clone()];
    let e = big.aggregate(pipeline.clone()).await.unwrap_err();
    assert_eq!(code_of(&e), 292, "{e}");
    assert_eq!(run_with_disk(&big, pipeline, true).await, sorted);
    // A $group after the sort reads its runs, and a $sort after the $group its output.
    let grouped = run_with_disk(&big, vec![sort, project, group, by_key], true).await;
    assert_eq!(grouped, ten_groups);
    // 110 MB through streaming stages: fine.
    let streamed = run(
        &big,
        vec![
            doc! {"$match": {"k": {"$gte": 0}}},
            doc! {"$project": {"k": 1}},
        ],
    )
    .await;
    assert_eq!(streamed.len(), 110);
    cluster.stop().await;
}
