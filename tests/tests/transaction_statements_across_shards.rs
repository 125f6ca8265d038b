//! A transaction's statements on a sharded collection, through a router, with the
//! `mongodb` driver: a write whose statements all fall in one shard goes there, and a
//! statement that reaches both shards (a read by another field, a multi-update, an
//! insert of documents bound for both) joins each shard to the transaction at one read
//! time, with its cursor's later batches read in the transaction too.
//!
//! `db.accounts` is sharded on `_id`: below [`MIDDLE`] on shard0, the rest on shard1.

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::error::TRANSIENT_TRANSACTION_ERROR;
use mongodb::{ClientSession, Collection};
use tests::sharded::TestShardedCluster;

const ACCOUNTS: i64 = 40;
const MIDDLE: i64 = ACCOUNTS / 2;
const START: i64 = 10;

/// `db.accounts`, split over both shards, each account holding [`START`].
async fn split_accounts(client: &mongodb::Client) -> Collection<Document> {
    let accounts = client.database("db").collection::<Document>("accounts");
    accounts
        .insert_many((0..ACCOUNTS).map(|i| doc! {"_id": i, "n": START}))
        .await
        .unwrap();
    split_on(client, "db.accounts", "_id", MIDDLE).await;
    accounts
}

/// Shards `ns` on `field`: values below `middle` on shard0, the rest on shard1.
async fn split_on(client: &mongodb::Client, ns: &str, field: &str, middle: i64) {
    let admin = client.database("admin");
    for cmd in [
        doc! {"enableSharding": "db"},
        doc! {"shardCollection": ns, "key": {field: 1}},
        doc! {"split": ns, "middle": {field: middle}},
        doc! {"moveChunk": ns, "find": {field: 0_i64}, "to": "shard0"},
        doc! {"moveChunk": ns, "find": {field: middle}, "to": "shard1"},
    ] {
        admin.run_command(cmd).await.unwrap();
    }
}

/// Every account read by one `find` in `s`, in batches of 7 (so the router's cursor
/// over both shards is read on with `getMore`s): (accounts, total).
async fn read_all(
    accounts: &Collection<Document>,
    s: &mut ClientSession,
) -> mongodb::error::Result<(usize, i64)> {
    let mut cursor = accounts
        .find(doc! {})
        .batch_size(7)
        .session(&mut *s)
        .await?;
    let docs: Vec<Document> = cursor.stream(&mut *s).try_collect().await?;
    let total = docs.iter().map(|d| d.get_i64("n").unwrap_or(0)).sum();
    Ok((docs.len(), total))
}

/// Starts a transaction in a new session; the driver retries nothing here.
async fn begin(client: &mongodb::Client) -> ClientSession {
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    s
}

/// Runs `body` in transactions until one commits, as a driver's callback API does on
/// transient errors (a shard's snapshot may predate the split for a moment).
async fn committed<F>(client: &mongodb::Client, mut body: F) -> mongodb::error::Result<()>
where
    F: for<'a> FnMut(
        &'a mut ClientSession,
    ) -> futures::future::BoxFuture<'a, mongodb::error::Result<()>>,
{
    for _ in 0..20 {
        let mut s = begin(client).await;
        let attempt = async {
            body(&mut s).await?;
            s.commit_transaction().await
        }
        .await;
        match attempt {
            Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
                let _ = s.abort_transaction().await;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
    panic!("no attempt of the transaction committed in 20");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn statements_that_reach_both_shards_join_the_transaction() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let accounts = split_accounts(&client).await;

    // Its first statement reaches both shards; so do a multi-update and an insert of
    // documents bound for both; its later reads see all of it; the commit makes it whole.
    committed(&client, |s| {
        let accounts = accounts.clone();
        Box::pin(async move {
            assert_eq!(read_all(&accounts, s).await?, (40, 400));
            let updated = accounts
                .update_many(doc! {}, doc! {"$inc": {"n": 1}})
                .session(&mut *s)
                .await?;
            assert_eq!(updated.modified_count, 40);
            accounts
                .insert_many([
                    doc! {"_id": -1_i64, "n": 5_i64},
                    doc! {"_id": 100_i64, "n": 5_i64},
                ])
                .session(&mut *s)
                .await?;
            assert_eq!(read_all(&accounts, s).await?, (42, 450));
            Ok(())
        })
    })
    .await
    .unwrap();
    let mut s = client.start_session().await.unwrap();
    assert_eq!(read_all(&accounts, &mut s).await.unwrap(), (42, 450));

    // A targeted statement first, then one over both shards; aborted, none of it stays.
    let mut s = begin(&client).await;
    accounts
        .find_one(doc! {"_id": 3_i64})
        .session(&mut s)
        .await
        .unwrap();
    accounts
        .update_many(doc! {}, doc! {"$inc": {"n": 100}})
        .session(&mut s)
        .await
        .unwrap();
    accounts
        .delete_one(doc! {"_id": 100_i64})
        .session(&mut s)
        .await
        .unwrap();
    assert_eq!(read_all(&accounts, &mut s).await.unwrap(), (41, 4545));
    s.abort_transaction().await.unwrap();
    let mut s = client.start_session().await.unwrap();
    assert_eq!(read_all(&accounts, &mut s).await.unwrap(), (42, 450));

    // Writes that fall in one shard go there: a transfer within shard1, and an upsert
    // that names its shard key.
    committed(&client, |s| {
        let accounts = accounts.clone();
        Box::pin(async move {
            for (id, by) in [(MIDDLE + 1, -3_i64), (MIDDLE + 2, 3)] {
                accounts
                    .update_one(doc! {"_id": id}, doc! {"$inc": {"n": by}})
                    .session(&mut *s)
                    .await?;
            }
            accounts
                .update_one(doc! {"_id": 7_i64}, doc! {"$set": {"tag": "x"}})
                .upsert(true)
                .session(&mut *s)
                .await?;
            Ok(())
        })
    })
    .await
    .unwrap();
    let mut s = client.start_session().await.unwrap();
    assert_eq!(read_all(&accounts, &mut s).await.unwrap(), (42, 450));
    cluster.stop().await;
}

/// Transfers between the shards run while readers read every account in one `find`
/// inside a transaction: each read sees one snapshot of both shards, so the total holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_over_both_shards_in_a_transaction_sees_one_snapshot() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let accounts = split_accounts(&client).await;
    let seed = tests::seed("transfers against reads over both shards");
    let mut writers = Vec::new();
    for w in 0..2u64 {
        let (client, accounts) = (client.clone(), accounts.clone());
        writers.push(tokio::spawn(async move {
            let mut x = seed.wrapping_add(w).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for _ in 0..30 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let from = (x % MIDDLE as u64) as i64;
                let to = MIDDLE + ((x >> 8) % MIDDLE as u64) as i64;
                let amount = 1 + ((x >> 16) % 5) as i64;
                let (from, to) = if x % 2 == 0 { (from, to) } else { (to, from) };
                committed(&client, |s| {
                    let accounts = accounts.clone();
                    Box::pin(async move {
                        for (id, by) in [(from, -amount), (to, amount)] {
                            accounts
                                .update_one(doc! {"_id": id}, doc! {"$inc": {"n": by}})
                                .session(&mut *s)
                                .await?;
                        }
                        Ok(())
                    })
                })
                .await
                .unwrap();
            }
        }));
    }
    let mut reads = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        let mut s = begin(&client).await;
        match read_all(&accounts, &mut s).await {
            Ok(read) => {
                assert_eq!(read, (40, 400), "seed {seed}: one snapshot of both shards");
                reads += 1;
            }
            Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {}
            Err(e) => panic!("seed {seed}: {e:?}"),
        }
        let _ = s.abort_transaction().await;
    }
    for w in writers {
        w.await.unwrap();
    }
    println!("{reads} reads over both shards while 60 transfers ran");
    assert!(reads > 0);
    cluster.stop().await;
}

/// An update that would move a document to the other shard is refused inside a
/// transaction (IllegalOperation, 20), and the transaction leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_key_change_inside_a_transaction_is_refused() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let keyed = client.database("db").collection::<Document>("keyed");
    keyed
        .insert_many((0..10_i64).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    keyed
        .create_index(mongodb::IndexModel::builder().keys(doc! {"k": 1}).build())
        .await
        .unwrap();
    split_on(&client, "db.keyed", "k", 5).await;
    let mut s = begin(&client).await;
    let err = keyed
        .update_one(doc! {"k": 1_i64}, doc! {"$set": {"k": 8_i64}})
        .session(&mut s)
        .await
        .unwrap_err();
    let code = match *err.kind {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref w)) => w.code,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(code, 20, "{err:?}");
    let _ = s.abort_transaction().await;
    let moved = keyed.find_one(doc! {"_id": 1_i64}).await.unwrap().unwrap();
    assert_eq!(moved.get_i64("k"), Ok(1));
    cluster.stop().await;
}
