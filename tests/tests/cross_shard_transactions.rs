//! Transactions across shards, through routers, with the `mongodb` driver: a two-phase
//! commit that is all or nothing on every shard, one snapshot across shards, and the
//! recovery of transactions a router left prepared.
//!
//! Each test holds two databases whose primaries are different shards (`bank_0` on
//! shard0, `bank_1` on shard1), so a transaction that writes both reaches both shards.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use mongodb::error::TRANSIENT_TRANSACTION_ERROR;
use tests::replica_set::{TestReplicaSet, Tuning, THREE_SITES};
use tests::sharded::TestShardedCluster;

const ACCOUNTS: i32 = 4;
const START: i32 = 100;

/// `bank_k.accounts` on shard k, each holding [`ACCOUNTS`] accounts of [`START`].
async fn two_banks(client: &mongodb::Client) -> [mongodb::Collection<Document>; 2] {
    let admin = client.database("admin");
    for k in 0..2 {
        admin
            .run_command(
                doc! {"enableSharding": format!("bank_{k}"), "primaryShard": format!("shard{k}")},
            )
            .await
            .unwrap();
    }
    let banks = [0, 1].map(|k| {
        client
            .database(&format!("bank_{k}"))
            .collection::<Document>("accounts")
    });
    for bank in &banks {
        bank.insert_many((0..ACCOUNTS).map(|i| doc! {"_id": i, "n": START}))
            .await
            .unwrap();
    }
    banks
}

/// The sum of both banks, read in one snapshot transaction.
async fn total_in_one_snapshot(
    client: &mongodb::Client,
    banks: &[mongodb::Collection<Document>; 2],
) -> mongodb::error::Result<i32> {
    let mut s = client.start_session().await?;
    s.start_transaction().await?;
    let mut total = 0;
    for bank in banks {
        for i in 0..ACCOUNTS {
            let d = bank.find_one(doc! {"_id": i}).session(&mut s).await?;
            total += d.and_then(|d| d.get_i32("n").ok()).unwrap_or(0);
        }
    }
    s.commit_transaction().await?;
    Ok(total)
}

/// Moves `amount` from account `from` of bank 0 to account `to` of bank 1 in one
/// transaction, committed with the driver's retry loop.
async fn transfer(
    client: &mongodb::Client,
    banks: &[mongodb::Collection<Document>; 2],
    (from, to, amount): (i32, i32, i32),
) -> mongodb::error::Result<()> {
    let mut s = client.start_session().await?;
    s.start_transaction()
        .and_run((banks, from, to, amount), |s, (banks, from, to, amount)| {
            Box::pin(async move {
                banks[0]
                    .update_one(doc! {"_id": *from}, doc! {"$inc": {"n": -*amount}})
                    .session(&mut *s)
                    .await?;
                banks[1]
                    .update_one(doc! {"_id": *to}, doc! {"$inc": {"n": *amount}})
                    .session(&mut *s)
                    .await?;
                Ok(())
            })
        })
        .await
}

async fn balance(bank: &mongodb::Collection<Document>, id: i32) -> i32 {
    bank.find_one(doc! {"_id": id})
        .await
        .unwrap()
        .unwrap()
        .get_i32("n")
        .unwrap()
}

/// A transaction over two shards commits on both or neither; within it, each shard's reads
/// see its own writes, and a shard it reaches later reads at the first one's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_across_two_shards_commits_on_both_or_neither() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let banks = two_banks(&client).await;

    transfer(&client, &banks, (0, 0, 30)).await.unwrap();
    assert_eq!(balance(&banks[0], 0).await, START - 30);
    assert_eq!(balance(&banks[1], 0).await, START + 30);

    // Aborted: neither shard keeps anything.
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    banks[0]
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"n": -5}})
        .session(&mut s)
        .await
        .unwrap();
    // Written after the transaction's first statement: its read time does not see it.
    banks[1]
        .update_one(doc! {"_id": 1}, doc! {"$set": {"late": true}})
        .await
        .unwrap();
    let seen = banks[1]
        .find_one(doc! {"_id": 1})
        .session(&mut s)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !seen.contains_key("late"),
        "read at the first shard's time: {seen}"
    );
    banks[1]
        .update_one(doc! {"_id": 2}, doc! {"$inc": {"n": 5}})
        .session(&mut s)
        .await
        .unwrap();
    let own = banks[1]
        .find_one(doc! {"_id": 2})
        .session(&mut s)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(own.get_i32("n"), Ok(START + 5), "its own write");
    s.abort_transaction().await.unwrap();
    assert_eq!(balance(&banks[0], 1).await, START);
    assert_eq!(balance(&banks[1], 2).await, START);

    // A transaction that writes one shard and only reads the other commits too.
    let mut s = client.start_session().await.unwrap();
    s.start_transaction().await.unwrap();
    banks[1]
        .find_one(doc! {"_id": 3})
        .session(&mut s)
        .await
        .unwrap();
    banks[0]
        .update_one(doc! {"_id": 3}, doc! {"$inc": {"n": 1}})
        .session(&mut s)
        .await
        .unwrap();
    s.commit_transaction().await.unwrap();
    // Sent again, a commit answers the same.
    s.commit_transaction().await.unwrap();
    assert_eq!(balance(&banks[0], 3).await, START + 1);
    assert_eq!(
        total_in_one_snapshot(&client, &banks).await.unwrap(),
        2 * ACCOUNTS * START + 1
    );
    cluster.stop().await;
}

/// The driver's callback API (`start_transaction().and_run`) moves money between the
/// shards while each shard's primary is killed in turn: every transfer it reports
/// committed is there exactly once, and the total holds in every snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_callback_api_commits_across_shards_through_failovers() {
    let mut cluster = TestShardedCluster::start_with(2, 1, 3).await;
    let client = cluster.client(0).await;
    let banks = two_banks(&client).await;
    let done = Arc::new(AtomicUsize::new(0));
    let mover = {
        let (client, banks, done) = (client.clone(), banks.clone(), done.clone());
        tokio::spawn(async move {
            for i in 0..40 {
                let from_to = (i % ACCOUNTS, (i + 1) % ACCOUNTS, 1);
                transfer(&client, &banks, from_to).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for k in 0..2 {
        while done.load(Ordering::Relaxed) < 10 + 15 * k {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cluster.kill_shard_primary(k).await;
        let total = total_in_one_snapshot(&client, &banks).await;
        if let Ok(total) = total {
            assert_eq!(total, 2 * ACCOUNTS * START, "a snapshot after a failover");
        }
    }
    tokio::time::timeout(Duration::from_secs(240), mover)
        .await
        .expect("the transfers end")
        .unwrap();
    // Each transfer moved 1 from bank 0's account i % 4 to bank 1's (i + 1) % 4.
    for a in 0..ACCOUNTS {
        assert_eq!(
            balance(&banks[0], a).await,
            START - 10,
            "bank 0 account {a}"
        );
        assert_eq!(
            balance(&banks[1], a).await,
            START + 10,
            "bank 1 account {a}"
        );
    }
    cluster.stop().await;
}

/// Transfers between the shards from several clients at once, while readers read both
/// shards in one snapshot: every snapshot holds the whole money, and at the end so do the
/// accounts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cross_shard_transfers_keep_the_total_in_every_snapshot() {
    let cluster = TestShardedCluster::start(2, 2).await;
    let clients = [cluster.client(0).await, cluster.client(1).await];
    two_banks(&clients[0]).await;
    let banks_of = |c: &mongodb::Client| {
        [0, 1].map(|k| {
            c.database(&format!("bank_{k}"))
                .collection::<Document>("accounts")
        })
    };
    let banks = banks_of(&clients[0]);
    let total = 2 * ACCOUNTS * START;
    let seed = tests::seed("cross-shard bank");
    let done = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(20);
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let client = clients[w as usize % 2].clone();
        let banks = banks_of(&client);
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let mut x = seed.wrapping_add(w).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for _ in 0..25 {
                if Instant::now() >= until {
                    break;
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (from, to) = ((x % 4) as i32, ((x >> 8) % 4) as i32);
                let amount = 1 + (x >> 16) as i32 % 10;
                // Both directions: the first shard of the transaction alternates.
                let pair = if x % 2 == 0 {
                    banks.clone()
                } else {
                    [banks[1].clone(), banks[0].clone()]
                };
                transfer(&client, &pair, (from, to, amount)).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut snapshots = 0;
    while workers.iter().any(|w| !w.is_finished()) {
        let client = &clients[snapshots % 2];
        match total_in_one_snapshot(client, &banks_of(client)).await {
            Ok(t) => {
                assert_eq!(
                    t,
                    total,
                    "a snapshot across shards after {} transfers",
                    done.load(Ordering::Relaxed)
                );
                snapshots += 1;
            }
            Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {}
            Err(e) => panic!("snapshot read: {e:?}"),
        }
    }
    for w in workers {
        w.await.unwrap();
    }
    let mut sum = 0;
    for bank in &banks {
        for i in 0..ACCOUNTS {
            sum += balance(bank, i).await;
        }
    }
    assert_eq!(sum, total);
    println!(
        "{} transfers, {snapshots} snapshots",
        done.load(Ordering::Relaxed)
    );
    assert!(snapshots > 0 && done.load(Ordering::Relaxed) > 0);
    cluster.stop().await;
}

/// Runs, through router 0 on a connection of its own, the statements of transaction 1 of
/// a new session, which add 7 to account 0 of both banks; the session's lsid.
async fn statements(cluster: &TestShardedCluster) -> Document {
    let lsid = doc! {"id": bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: rand::random::<[u8; 16]>().to_vec(),
    }};
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    for k in 0..2 {
        let mut cmd = doc! {
            "update": "accounts",
            "updates": [{"q": {"_id": 0}, "u": {"$inc": {"n": 7}}}],
            "lsid": lsid.clone(), "txnNumber": 1_i64, "autocommit": false,
            "$db": format!("bank_{k}"),
        };
        if k == 0 {
            cmd.insert("startTransaction", true);
        }
        let reply = tests::raw_command(&mut conn, k + 1, cmd).await;
        assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    }
    lsid
}

/// Sends `cmd` (for the transaction of `lsid`) to shard `name` directly, as a router
/// would.
async fn to_shard(cluster: &TestShardedCluster, name: &str, cmd: Document) -> Document {
    let handle = cluster.direct(name);
    let fwd = router::shard_client::Forward {
        writes: true,
        ..Default::default()
    };
    let (reply, _, _) = handle.run("admin", &cmd, &fwd, "test").await.unwrap();
    reply
}

/// A router that stopped after the prepares (no decision) leaves both shards prepared:
/// reads of the prepared documents wait, and the config server's recovery aborts the
/// transaction on both. One that stopped after the coordinator committed leaves the other
/// shard prepared: recovery commits it at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_a_router_left_prepared_are_finished_as_their_coordinator_decided() {
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let banks = two_banks(&client).await;

    let prepare = |lsid: &Document, i: i32| {
        doc! {"prepareTransaction": 1, "lsid": lsid.clone(), "txnNumber": 1_i64, "autocommit": false,
        "coordinator": "shard0", "isCoordinator": i == 0}
    };
    // No decision: aborted everywhere.
    let lsid = statements(&cluster).await;
    for (i, shard) in ["shard0", "shard1"].iter().enumerate() {
        let reply = to_shard(&cluster, shard, prepare(&lsid, i as i32)).await;
        assert!(
            reply.get_timestamp("prepareTimestamp").is_ok(),
            "{shard} {lsid} {reply}"
        );
    }
    let started = Instant::now();
    // Waits until the recovery aborts it (reads of a prepared document wait).
    assert_eq!(balance(&banks[1], 0).await, START);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the read waited for the resolution"
    );
    assert_eq!(balance(&banks[0], 0).await, START);

    // The coordinator committed with its decision; shard1 is left prepared.
    let lsid = statements(&cluster).await;
    let mut at = None;
    for (i, shard) in ["shard0", "shard1"].iter().enumerate() {
        let reply = to_shard(&cluster, shard, prepare(&lsid, i as i32)).await;
        assert!(
            reply.get_timestamp("prepareTimestamp").is_ok(),
            "{shard} {lsid} {reply}"
        );
        at = at.max(reply.get_timestamp("prepareTimestamp").ok());
    }
    let commit = doc! {"commitTransaction": 1, "lsid": lsid.clone(), "txnNumber": 1_i64, "autocommit": false,
    "commitTimestamp": at.unwrap(), "recordDecision": true};
    to_shard(&cluster, "shard0", commit).await;
    assert_eq!(balance(&banks[0], 0).await, START + 7);
    assert_eq!(
        balance(&banks[1], 0).await,
        START + 7,
        "committed by the recovery"
    );
    assert_eq!(
        total_in_one_snapshot(&client, &banks).await.unwrap(),
        2 * ACCOUNTS * START + 14
    );
    // Decided: a client's abort through any router (with the recovery token) cannot undo
    // it, and a commit sent again is answered from the decision.
    let token = doc! {"recoveryShardId": "shard0", "participants": ["shard0", "shard1"]};
    let end = |name: &str| {
        doc! {name: 1, "lsid": lsid.clone(), "txnNumber": 1_i64, "autocommit": false,
        "recoveryToken": token.clone(), "$db": "admin"}
    };
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let reply = tests::raw_command(&mut conn, 7, end("abortTransaction")).await;
    assert_eq!(reply.get_i32("code"), Ok(256), "{reply}");
    let reply = tests::raw_command(&mut conn, 8, end("commitTransaction")).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    assert_eq!(balance(&banks[1], 0).await, START + 7);

    // A prepared transaction refuses other statements; a write to its document waits.
    let lsid = statements(&cluster).await;
    to_shard(&cluster, "shard1", prepare(&lsid, 1)).await;
    let find = doc! {"find": "accounts", "lsid": lsid.clone(), "txnNumber": 1_i64,
    "autocommit": false, "$db": "bank_1"};
    let mut conn = tokio::net::TcpStream::connect(cluster.routers[0])
        .await
        .unwrap();
    let reply = tests::raw_command(&mut conn, 9, find).await;
    assert_eq!(reply.get_i32("code"), Ok(267), "{reply}");
    // The session's next operation (a driver reuses the session) waits until the
    // recovery ends the prepared transaction, then runs.
    let started = Instant::now();
    let insert = doc! {"insert": "accounts", "documents": [{"_id": 100}], "lsid": lsid.clone(),
    "txnNumber": 2_i64, "$db": "bank_1"};
    let reply = tests::raw_command(&mut conn, 10, insert).await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the write waited for the resolution"
    );
    cluster.stop().await;
}

/// A transaction prepared on a replica set stays prepared through the loss of its primary
/// and through a restart of every member at once: its writes stay hidden, a write to one
/// of its documents waits (here until its `maxTimeMS`), and the commit its coordinator
/// decides applies on whichever member is primary then, at the decided time. Its Prepare
/// is split over several entries (a 1 KiB `txn_entry_kb`), and holds every key of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prepared_transaction_survives_failover_and_a_restart_of_every_member() {
    let liveness = Duration::from_secs(30);
    let split = Tuning {
        txn_entry_kb: Some(1),
        ..Tuning::default()
    };
    let mut set = TestReplicaSet::start_tuned(&THREE_SITES, split).await;
    let (p, _) = set.wait_for_primary(liveness).await.expect("primary");
    let client = set.client(0, "").await;
    let coll = client.database("bank").collection::<Document>("accounts");
    coll.insert_many(vec![doc! {"_id": 1, "n": 100}, doc! {"_id": 2, "n": 0}])
        .await
        .unwrap();
    let lsid = doc! {"id": bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: rand::random::<[u8; 16]>().to_vec(),
    }};
    let txn = |mut cmd: Document| {
        cmd.extend(doc! {"lsid": lsid.clone(), "txnNumber": 1_i64, "autocommit": false});
        cmd
    };
    let ok = |reply: &Document| assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "{reply}");
    let mut first =
        txn(doc! {"update": "accounts", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": -10}}}]});
    first.insert("startTransaction", true);
    ok(&set.run_on_member(p, "bank", first).await);
    let second =
        txn(doc! {"update": "accounts", "updates": [{"q": {"_id": 2}, "u": {"$inc": {"n": 10}}}]});
    ok(&set.run_on_member(p, "bank", second).await);
    ok(&set
        .run_on_member(
            p,
            "bank",
            txn(doc! {"insert": "accounts", "documents": [{"_id": 3, "n": 1, "pad": "p".repeat(3000)}]}),
        )
        .await);
    let prepare =
        txn(doc! {"prepareTransaction": 1, "coordinator": "shard0", "isCoordinator": true});
    let reply = set.run_on_member(p, "admin", prepare.clone()).await;
    let at = reply.get_timestamp("prepareTimestamp").expect("prepared");

    set.kill(p).await;
    let (q, _) = set.wait_for_primary(liveness).await.expect("a new primary");
    // Prepared there too: a write to its document waits, and gives up at its time limit.
    let write = doc! {"update": "accounts", "updates": [{"q": {"_id": 1}, "u": {"$set": {"x": 1}}}], "maxTimeMS": 500};
    // The write's error: the command's, or its first write error.
    let code = |outcome: mongodb::error::Result<Document>| match outcome {
        Err(e) => match *e.kind {
            mongodb::error::ErrorKind::Command(c) => c.code,
            other => panic!("{other:?}"),
        },
        Ok(reply) => {
            let errors = reply.get_array("writeErrors").expect("a write error");
            errors[0].as_document().unwrap().get_i32("code").unwrap()
        }
    };
    let started = Instant::now();
    let bank = client.database("bank");
    assert_eq!(code(bank.run_command(write).await), 50);
    // An insert of a key it inserts waits too.
    let insert = doc! {"insert": "accounts", "documents": [{"_id": 3}], "maxTimeMS": 500};
    assert!([24, 50].contains(&code(bank.run_command(insert).await)));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // Prepared again after the primary failed over: the same prepare time.
    let again = set.run_on_member(q, "admin", prepare.clone()).await;
    assert_eq!(again.get_timestamp("prepareTimestamp"), Ok(at), "{again}");

    // Every member stops at once and starts again from its own disk.
    set.restart(p).await;
    for i in 0..3 {
        set.kill(i).await;
    }
    for i in 0..3 {
        set.restart(i).await;
    }
    let (r, _) = set
        .wait_for_primary(liveness)
        .await
        .expect("a primary after the restart");
    let again = set.run_on_member(r, "admin", prepare).await;
    assert_eq!(again.get_timestamp("prepareTimestamp"), Ok(at), "{again}");
    let commit = txn(doc! {"commitTransaction": 1, "commitTimestamp": at, "recordDecision": true});
    ok(&set.run_on_member(r, "admin", commit).await);
    let client = set.client(0, "").await;
    let coll = client.database("bank").collection::<Document>("accounts");
    let n = |d: Option<Document>| d.and_then(|d| d.get_i32("n").ok());
    assert_eq!(n(coll.find_one(doc! {"_id": 1}).await.unwrap()), Some(90));
    assert_eq!(n(coll.find_one(doc! {"_id": 2}).await.unwrap()), Some(10));
    assert_eq!(n(coll.find_one(doc! {"_id": 3}).await.unwrap()), Some(1));
    set.stop().await;
}

/// Elle's list-append workload over keys on both shards (three members each), through
/// three routers, while each shard's primary is killed in turn and one router is killed
/// outright (its transactions left prepared are finished by the config server): the
/// history is valid under snapshot isolation and no committed append is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_append_across_shards_stays_snapshot_isolated_through_faults() {
    const ATTEMPTS: usize = 30;
    let liveness = Duration::from_secs(30);
    let seed = tests::seed("cross-shard list-append");
    let mut cluster = TestShardedCluster::start_with(2, 3, 3).await;
    let clients = [
        cluster.client(0).await,
        cluster.client(1).await,
        cluster.client(2).await,
    ];
    let run = tests::list_append::Run::new(6);
    let coll = ("chaos", "lists");
    let admin = clients[0].database("admin");
    admin
        .run_command(doc! {"enableSharding": "chaos", "primaryShard": "shard0"})
        .await
        .unwrap();
    let lists = clients[0].database(coll.0).collection::<Document>(coll.1);
    lists.insert_many(run.empty_lists()).await.unwrap();
    admin
        .run_command(doc! {"shardCollection": "chaos.lists", "key": {"_id": 1}})
        .await
        .unwrap();
    admin
        .run_command(doc! {"split": "chaos.lists", "middle": {"_id": 3_i64}})
        .await
        .unwrap();
    admin
        .run_command(doc! {"moveChunk": "chaos.lists", "find": {"_id": 3_i64}, "to": "shard1"})
        .await
        .unwrap();
    let per_router: Vec<mongodb::Client> = clients
        .iter()
        .flat_map(|c| [c.clone(), c.clone()])
        .collect();
    let total = per_router.len() * ATTEMPTS;
    let tasks = run.spawn(&per_router, coll, ATTEMPTS, seed);
    let mut faults = Vec::new();
    for (k, share) in [(0, 4), (1, 2)] {
        let at = run.after(total / share).await;
        cluster.kill_shard_primary(k).await;
        faults.push(format!("shard{k}'s primary killed after {at} transactions"));
    }
    let at = run.after(total * 3 / 4).await;
    cluster.kill_router(2);
    faults.push(format!("router 2 killed after {at} transactions"));
    let history = tests::list_append::Run::histories(tasks).await;
    for k in 0..2 {
        cluster
            .wait_for_shard_primary(k, liveness)
            .await
            .expect("a primary");
    }
    // Reads of what a killed router left prepared wait for the config server's recovery.
    let last = run
        .final_reads(&clients[0], coll, per_router.len() as u32)
        .await;
    println!("{}", faults.join("; "));
    tests::list_append::assert_valid(history, last, seed, ATTEMPTS / 3);
    cluster.stop().await;
}
