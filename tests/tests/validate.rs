//! `dbHash` and `validate`: every member of a replica set hashes the same data alike and
//! a member whose data differs stands out; `validate` finds index entries that are
//! missing or that no document accounts for, written under replication's feet.

use std::time::Duration;

use bson::{doc, Bson, Document, RawDocumentBuf};
use futures::TryStreamExt;
use md5::{Digest, Md5};
use mongodb::options::{ReadPreference, SelectionCriteria};
use mongodb::IndexModel;
use shard::catalog::keys::{id_key, index_entry_key};
use storage::WriteBatch;
use tests::replica_set::TestReplicaSet;
use tests::sharded::{error_code, TestShardedCluster};
use tests::unique_index;

/// Liveness bound for waits (not a performance assertion).
const LIVENESS: Duration = Duration::from_secs(30);
/// The MD5 of nothing: an empty collection's hash, in mongod too.
const EMPTY_MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ok(reply: Document) -> Document {
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    reply
}

/// `dbHash` of `db` on each of the three members, once each has applied everything
/// committed and reloaded its catalog: the first answers on which all three agree
/// (bounded by `LIVENESS`).
async fn agreed_hashes(set: &TestReplicaSet, db: &str) -> Vec<Document> {
    let started = std::time::Instant::now();
    loop {
        let mut hashes = Vec::new();
        for i in 0..3 {
            set.wait_caught_up(i, LIVENESS).await;
            hashes.push(ok(set.run_on_member(i, db, doc! {"dbHash": 1}).await));
        }
        if hashes.iter().all(|h| h.get("md5") == hashes[0].get("md5")) {
            return hashes;
        }
        assert!(started.elapsed() < LIVENESS, "members disagree: {hashes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn collection_hash<'a>(reply: &'a Document, coll: &str) -> &'a str {
    reply
        .get_document("collections")
        .unwrap()
        .get_str(coll)
        .unwrap()
}

/// What mongod's dbHash computes for a collection: the MD5 of its documents' BSON in
/// `_id` order, read back through the router.
async fn documents_md5(db: &mongodb::Database, coll: &str) -> String {
    let docs: Vec<RawDocumentBuf> = db
        .collection::<RawDocumentBuf>(coll)
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut md5 = Md5::new();
    docs.iter().for_each(|d| md5.update(d.as_bytes()));
    hex(&md5.finalize())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_hash_agrees_on_every_member_and_follows_the_data() {
    let set = TestReplicaSet::start().await;
    let client = set.client(0, "").await;
    let db = client.database("hash");
    let (a, b) = (
        db.collection::<Document>("a"),
        db.collection::<Document>("b"),
    );
    // The same documents in both, inserted in different orders (7919 is prime: the
    // `_id`s are 0..300 shuffled).
    let docs: Vec<Document> = (0..300)
        .map(|i| doc! {"_id": (i * 7919) % 300, "x": i, "tags": [i % 3, 10 + i % 5]})
        .collect();
    a.insert_many(docs.clone()).await.unwrap();
    b.insert_many(docs.into_iter().rev()).await.unwrap();
    for c in [&a, &b] {
        c.update_many(doc! {"x": {"$lt": 50}}, doc! {"$set": {"y": 1}})
            .await
            .unwrap();
        c.delete_many(doc! {"x": {"$gte": 280}}).await.unwrap();
    }
    db.create_collection("empty").await.unwrap();

    let before = agreed_hashes(&set, "hash").await;
    let first = &before[0];
    let hosts: Vec<&str> = before.iter().map(|h| h.get_str("host").unwrap()).collect();
    let members: Vec<&str> = set.configs.iter().map(|c| c.host.as_str()).collect();
    assert_eq!(hosts, members, "each member names itself");
    for h in &before[1..] {
        assert_eq!(
            h.get_document("collections"),
            first.get_document("collections")
        );
        assert_eq!(h.get_document("uuids"), first.get_document("uuids"));
    }
    assert_eq!(collection_hash(first, "a"), collection_hash(first, "b"));
    assert_eq!(collection_hash(first, "empty"), EMPTY_MD5);
    assert_eq!(collection_hash(first, "a"), documents_md5(&db, "a").await);
    assert_eq!(first.get_array("capped").unwrap().len(), 0);
    let uuids = first.get_document("uuids").unwrap();
    assert_ne!(uuids.get("a"), uuids.get("b"), "{uuids}");
    // `md5` is mongod's: over each collection's name and hash, in name order.
    let mut all = Md5::new();
    for (name, hash) in first.get_document("collections").unwrap() {
        all.update(name.as_bytes());
        all.update(hash.as_str().unwrap().as_bytes());
    }
    assert_eq!(first.get_str("md5").unwrap(), hex(&all.finalize()));

    // A write to `a` alone changes `a`'s hash (on every member), not `b`'s; a new index
    // on `b` changes `b`'s (its definition is covered).
    let changed =
        |now: &Document, coll: &str| collection_hash(now, coll) != collection_hash(first, coll);
    a.update_one(doc! {"_id": 1}, doc! {"$set": {"z": true}})
        .await
        .unwrap();
    let written = agreed_hashes(&set, "hash").await;
    assert!(changed(&written[0], "a") && !changed(&written[0], "b"));
    assert_ne!(written[0].get_str("md5"), first.get_str("md5"));
    b.create_index(IndexModel::builder().keys(doc! {"tags": 1}).build())
        .await
        .unwrap();
    let indexed = agreed_hashes(&set, "hash").await;
    assert!(changed(&indexed[0], "b"));

    // The `collections` filter, and the router forwarding the command.
    let only_b = ok(set
        .run_on_member(1, "hash", doc! {"dbHash": 1, "collections": ["b"]})
        .await);
    let names: Vec<&String> = only_b.get_document("collections").unwrap().keys().collect();
    assert_eq!(names, vec!["b"]);
    let bad = set
        .run_on_member(1, "hash", doc! {"dbHash": 1, "collections": [1]})
        .await;
    assert_eq!(bad.get_i32("code"), Ok(2), "BadValue: {bad}");
    let routed = db.run_command(doc! {"dbHash": 1}).await.unwrap();
    assert_eq!(routed.get_str("md5"), indexed[0].get_str("md5"));
    assert_eq!(
        routed.get_str("host"),
        Ok(members[0]),
        "the primary answers"
    );
    // A read: site B's router sends it to site B's member when the preference allows.
    let nearest = ReadPreference::Nearest {
        options: Default::default(),
    };
    let in_b = set.client(1, "").await.database("hash");
    let routed = in_b
        .run_command(doc! {"dbHash": 1})
        .selection_criteria(SelectionCriteria::ReadPreference(nearest))
        .await
        .unwrap();
    assert_eq!(routed.get_str("host"), Ok(members[1]), "{routed}");
    assert_eq!(routed.get_str("md5"), indexed[0].get_str("md5"));

    // One member's copy of a document changed under replication's feet: that member's
    // hash of `b` differs, the others still agree.
    let damaged = &set.member(2).unwrap().node;
    let meta = damaged.catalog.get("hash.b").unwrap();
    let mut batch = WriteBatch::new();
    let changed = bson::to_vec(&doc! {"_id": 1, "x": -1}).unwrap();
    batch.put(&meta.table, id_key(&Bson::Int32(1)), changed);
    damaged.base.write(&batch).unwrap();
    let mut now = Vec::new();
    for i in 0..3 {
        now.push(ok(set.run_on_member(i, "hash", doc! {"dbHash": 1}).await));
    }
    assert_eq!(now[0].get_str("md5"), now[1].get_str("md5"));
    assert_ne!(now[2].get_str("md5"), now[0].get_str("md5"));
    assert_ne!(collection_hash(&now[2], "b"), collection_hash(&now[0], "b"));
    assert_eq!(collection_hash(&now[2], "a"), collection_hash(&now[0], "a"));
    set.stop().await;
}

fn validate_doc(i: i32) -> Document {
    doc! {
        "_id": i, "email": format!("u{i}@example.com"), "score": i % 10,
        "name": format!("n{}", i % 13), "tags": [i % 4, 10 + i % 7, format!("t{}", i % 3)],
    }
}

fn number(d: &Document, field: &str) -> i64 {
    match d.get(field) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("{field} is {other:?} in {d}"),
    }
}

/// `validate` of `coll` on member `i`.
async fn validate_on(set: &TestReplicaSet, i: usize, coll: &str) -> Document {
    ok(set.run_on_member(i, "val", doc! {"validate": coll}).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn validate_finds_missing_and_extra_index_entries() {
    let set = TestReplicaSet::start().await;
    let client = set.client(0, "").await;
    let db = client.database("val");
    let c = db.collection::<Document>("c");
    c.create_indexes(vec![
        unique_index(doc! {"email": 1}),
        IndexModel::builder().keys(doc! {"tags": 1}).build(),
        IndexModel::builder()
            .keys(doc! {"score": -1, "name": 1})
            .build(),
    ])
    .await
    .unwrap();
    c.insert_many((0..200).map(validate_doc)).await.unwrap();
    // Updates that move keys in each index, a replacement, and deletes.
    for i in 0..20 {
        let email = format!("v{i}@example.com");
        c.update_one(
            doc! {"_id": i},
            doc! {"$set": {"email": email, "score": 99}},
        )
        .await
        .unwrap();
    }
    c.update_many(doc! {"_id": {"$lt": 40}}, doc! {"$push": {"tags": 1000}})
        .await
        .unwrap();
    c.replace_one(
        doc! {"_id": 30},
        doc! {"email": "r@example.com", "tags": ["r"]},
    )
    .await
    .unwrap();
    c.delete_many(doc! {"_id": {"$gte": 190}}).await.unwrap();

    let v = db.run_command(doc! {"validate": "c"}).await.unwrap();
    assert_eq!(v.get_bool("valid"), Ok(true), "{v}");
    assert_eq!(v.get_str("ns"), Ok("val.c"));
    assert_eq!(number(&v, "nrecords"), 190);
    assert_eq!(number(&v, "nIndexes"), 4);
    assert_eq!(number(&v, "nInvalidDocuments"), 0);
    let keys = v.get_document("keysPerIndex").unwrap();
    assert_eq!(number(keys, "_id_"), 190);
    assert_eq!(number(keys, "email_1"), 190);
    assert_eq!(number(keys, "score_-1_name_1"), 190);
    // Three tags each, one more for the 39 pushed to (not the replaced one), and the
    // replaced document's one.
    assert_eq!(number(keys, "tags_1"), 189 * 3 + 39 + 1, "{v}");
    for name in ["_id_", "email_1", "tags_1", "score_-1_name_1"] {
        let details = v.get_document("indexDetails").unwrap();
        assert_eq!(
            details.get_document(name).unwrap().get_bool("valid"),
            Ok(true)
        );
    }
    for list in [
        "errors",
        "warnings",
        "extraIndexEntries",
        "missingIndexEntries",
        "corruptRecords",
    ] {
        assert!(v.get_array(list).unwrap().is_empty(), "{list}: {v}");
    }
    assert_eq!(v.get_bool("repaired"), Ok(false));
    // Every member holds the same, secondaries included.
    for i in 0..3 {
        set.wait_caught_up(i, LIVENESS).await;
        let on = validate_on(&set, i, "c").await;
        assert_eq!(on.get_bool("valid"), Ok(true), "member {i}: {on}");
        assert_eq!(on.get_document("keysPerIndex"), Ok(keys));
    }

    // A stray entry written into the primary's `tags_1` table past replication, pointing
    // at a document that does not have that tag.
    let p = set.primary().expect("a primary");
    let node = &set.member(p).unwrap().node;
    let meta = node.catalog.get("val.c").unwrap();
    let tags = meta.index("tags_1").unwrap();
    let rk50 = id_key(&Bson::Int32(50));
    let stray = index_entry_key(tags, &[Bson::Int32(999)], &rk50);
    let mut batch = WriteBatch::new();
    batch.put(&tags.table, stray, rk50.clone());
    // And another pointing at a deleted document.
    let rk195 = id_key(&Bson::Int32(195));
    let dangling = index_entry_key(tags, &[Bson::Int32(1)], &rk195);
    batch.put(&tags.table, dangling, rk195);
    node.base.write(&batch).unwrap();
    let v = db.run_command(doc! {"validate": "c"}).await.unwrap();
    assert_eq!(v.get_bool("valid"), Ok(false), "{v}");
    let extra = v.get_array("extraIndexEntries").unwrap();
    assert_eq!(extra.len(), 2, "{v}");
    let extra: Vec<&Document> = extra.iter().map(|e| e.as_document().unwrap()).collect();
    assert!(extra.iter().all(|e| e.get_str("indexName") == Ok("tags_1")));
    let found = |id: i32, tag: i32| {
        extra.iter().any(|e| {
            e.get_document("idKey") == Ok(&doc! {"_id": id})
                && e.get_document("indexKey") == Ok(&doc! {"tags": tag})
        })
    };
    assert!(found(50, 999) && found(195, 1), "{extra:?}");
    assert!(v.get_array("missingIndexEntries").unwrap().is_empty());
    let details = v.get_document("indexDetails").unwrap();
    let valid = |name: &str| details.get_document(name).unwrap().get_bool("valid");
    assert_eq!(valid("tags_1"), Ok(false));
    assert_eq!(valid("email_1"), Ok(true));
    assert_eq!(
        number(v.get_document("keysPerIndex").unwrap(), "tags_1"),
        number(keys, "tags_1") + 2
    );
    let errors = v.get_array("errors").unwrap();
    assert!(
        errors.contains(&Bson::String("Detected 2 extra index entries.".into())),
        "{errors:?}"
    );

    // A unique index entry removed: the document's key is missing.
    let email = meta.index("email_1").unwrap();
    let rk51 = id_key(&Bson::Int32(51));
    let mut batch = WriteBatch::new();
    let key = Bson::String("u51@example.com".into());
    batch.delete(&email.table, index_entry_key(email, &[key], &rk51));
    node.base.write(&batch).unwrap();
    let v = db
        .run_command(doc! {"validate": "c", "full": true})
        .await
        .unwrap();
    assert_eq!(v.get_bool("valid"), Ok(false), "{v}");
    let missing = v.get_array("missingIndexEntries").unwrap();
    assert_eq!(missing.len(), 1, "{v}");
    let missing = missing[0].as_document().unwrap();
    assert_eq!(missing.get_str("indexName"), Ok("email_1"));
    assert_eq!(missing.get_document("idKey"), Ok(&doc! {"_id": 51}));
    assert_eq!(
        missing.get_document("indexKey"),
        Ok(&doc! {"email": "u51@example.com"})
    );
    assert_eq!(v.get_array("extraIndexEntries").unwrap().len(), 2);

    // A record that is not BSON, and a document filed under another `_id`'s key.
    let mut batch = WriteBatch::new();
    batch.put(
        &meta.table,
        id_key(&Bson::Int32(5000)),
        b"not bson".to_vec(),
    );
    let misfiled = bson::to_vec(&doc! {"_id": 7}).unwrap();
    batch.put(&meta.table, id_key(&Bson::Int32(5001)), misfiled);
    node.base.write(&batch).unwrap();
    let v = db.run_command(doc! {"validate": "c"}).await.unwrap();
    assert_eq!(v.get_bool("valid"), Ok(false), "{v}");
    assert_eq!(number(&v, "nrecords"), 192);
    assert_eq!(number(&v, "nInvalidDocuments"), 2, "{v}");
    let corrupt = v.get_array("corruptRecords").unwrap();
    assert_eq!(corrupt.len(), 1, "{v}");
    let details = v.get_document("indexDetails").unwrap();
    assert_eq!(
        details.get_document("_id_").unwrap().get_bool("valid"),
        Ok(false)
    );

    // The other members were not touched.
    for i in (0..3).filter(|&i| i != p) {
        let on = validate_on(&set, i, "c").await;
        assert_eq!(on.get_bool("valid"), Ok(true), "member {i}: {on}");
    }
    let missing = db.run_command(doc! {"validate": "nope"}).await.unwrap_err();
    assert_eq!(error_code(&missing), Some(26), "{missing}");
    set.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_of_a_sharded_collection_answers_for_each_shard() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    client
        .database("admin")
        .run_command(doc! {"shardCollection": "vs.c", "key": {"k": "hashed"}})
        .await
        .unwrap();
    let db = client.database("vs");
    db.collection::<Document>("c")
        .insert_many((0..200).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    let v = db.run_command(doc! {"validate": "c"}).await.unwrap();
    assert_eq!(v.get_bool("valid"), Ok(true), "{v}");
    let raw = v.get_document("raw").unwrap();
    assert_eq!(raw.len(), 2, "both shards answer: {v}");
    let records: i64 = raw
        .values()
        .map(|r| {
            let r = r.as_document().unwrap();
            assert_eq!(r.get_bool("valid"), Ok(true), "{r}");
            number(r, "nrecords")
        })
        .sum();
    assert_eq!(records, 200);
    cluster.stop().await;
}
