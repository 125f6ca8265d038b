//! Retryable writes: a write sent again with the same session and `txnNumber` takes
//! effect once and answers as the first attempt did, also on a new primary after the old
//! one was killed (the session table replicates with the data). Through the router, the
//! Rust driver's default retryable writes keep working.

use std::time::Duration;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use tests::replica_set::TestReplicaSet;

const LIVENESS: Duration = Duration::from_secs(30);

fn lsid(n: u8) -> Document {
    doc! {"id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![n; 16] }}
}

/// Runs `cmd` as session `lsid`'s write number `txn` on the current primary.
async fn send(set: &TestReplicaSet, session: u8, txn: i64, mut cmd: Document) -> Document {
    cmd.insert("lsid", lsid(session));
    cmd.insert("txnNumber", txn);
    let p = set.primary().expect("a primary");
    let node = set.member(p).expect("running").node.clone();
    tokio::task::spawn_blocking(move || node.run_command("test", &cmd, Default::default()))
        .await
        .unwrap()
}

async fn find_all(set: &TestReplicaSet, coll: &str) -> Vec<Document> {
    let p = set.primary().expect("a primary");
    let node = set.member(p).expect("running").node.clone();
    let cmd = doc! {"find": coll, "sort": {"_id": 1}};
    let reply =
        tokio::task::spawn_blocking(move || node.run_command("test", &cmd, Default::default()))
            .await
            .unwrap();
    reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .map(|d| d.as_document().unwrap().clone())
        .collect()
}

fn n(reply: &Document) -> i32 {
    reply
        .get_i32("n")
        .unwrap_or_else(|_| panic!("no n in {reply}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_write_applies_once_even_after_failover() {
    let mut set = TestReplicaSet::start().await;
    set.wait_for_primary(LIVENESS).await.expect("primary");

    // insert: the retry neither duplicates nor fails with E11000.
    let insert = doc! {"insert": "r", "documents": [{"_id": 1, "x": 0}, {"_id": 2, "x": 0}]};
    for _ in 0..2 {
        let reply = send(&set, 1, 1, insert.clone()).await;
        assert_eq!(n(&reply), 2, "{reply}");
        assert!(!reply.contains_key("writeErrors"), "{reply}");
    }

    // update with $inc, and an upsert: applied once, the retry reports the same outcome.
    let update = doc! {"update": "r", "updates": [
        {"q": {"_id": 1}, "u": {"$inc": {"x": 1}}},
        {"q": {"_id": 3}, "u": {"$inc": {"x": 1}}, "upsert": true},
    ]};
    let first = send(&set, 1, 2, update.clone()).await;
    let again = send(&set, 1, 2, update).await;
    for reply in [&first, &again] {
        assert_eq!(n(reply), 2, "{reply}");
        assert_eq!(reply.get_i32("nModified").unwrap(), 1, "{reply}");
        let upserted = reply.get_array("upserted").unwrap();
        assert_eq!(
            upserted[0].as_document().unwrap().get("_id"),
            Some(&Bson::Int32(3))
        );
    }

    // findAndModify: the retry returns the first attempt's document, not a second $inc.
    let fam = doc! {"findAndModify": "r", "query": {"_id": 2}, "update": {"$inc": {"x": 10}}, "new": true};
    let first = send(&set, 1, 3, fam.clone()).await;
    let again = send(&set, 1, 3, fam.clone()).await;
    assert_eq!(first.get_document("value").unwrap().get_i32("x"), Ok(10));
    assert_eq!(
        first.get_document("value"),
        again.get_document("value"),
        "{again}"
    );

    // delete: the retry reports the deleted document although it is gone.
    let delete = doc! {"delete": "r", "deletes": [{"q": {"_id": 3}, "limit": 1}]};
    assert_eq!(n(&send(&set, 1, 4, delete.clone()).await), 1);
    assert_eq!(n(&send(&set, 1, 4, delete.clone()).await), 1);

    // An older number on the same session is refused; another session is independent.
    let old = send(&set, 1, 1, insert.clone()).await;
    assert_eq!(old.get_i32("code"), Ok(225), "{old}");
    let other = send(
        &set,
        2,
        1,
        doc! {"insert": "r", "documents": [{"_id": 4, "x": 0}]},
    )
    .await;
    assert_eq!(n(&other), 1, "{other}");

    let fam =
        doc! {"findAndModify": "r", "query": {"_id": 4}, "update": {"$inc": {"x": 5}}, "new": true};
    let first = send(&set, 3, 1, fam.clone()).await;
    assert_eq!(first.get_document("value").unwrap().get_i32("x"), Ok(5));
    let expected = vec![
        doc! {"_id": 1, "x": 1},
        doc! {"_id": 2, "x": 10},
        doc! {"_id": 4, "x": 5},
    ];
    assert_eq!(find_all(&set, "r").await, expected);

    // After a failover the new primary knows what the session already did.
    let killed = set.primary().unwrap();
    set.kill(killed).await;
    let (next, _) = set.wait_for_primary(LIVENESS).await.expect("new primary");
    assert_ne!(next, killed);
    let again = send(&set, 3, 1, fam).await;
    assert_eq!(
        first.get_document("value"),
        again.get_document("value"),
        "{again}"
    );
    assert_eq!(n(&send(&set, 1, 4, delete).await), 1);
    assert_eq!(find_all(&set, "r").await, expected);
    set.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_driver_retries_writes_through_the_router() {
    let set = TestReplicaSet::start().await;
    set.wait_for_primary(LIVENESS).await.expect("primary");
    let client = set.client(1, "retryWrites=true").await;
    let coll = client.database("test").collection::<Document>("d");
    coll.insert_many((0..5).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 0}, doc! {"$inc": {"k": 1}})
        .await
        .unwrap();
    let after = coll
        .find_one_and_update(doc! {"_id": 0}, doc! {"$inc": {"k": 1}})
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.get_i32("k"), Ok(2));
    coll.delete_one(doc! {"_id": 4}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 4);
    set.stop().await;
}
