//! `currentOp` shows where each operation is waiting while it waits, and `killOp` (or a
//! client hanging up) stops work that nobody wants any more, queued or running.

use std::time::Duration;

use bson::{doc, Bson, Document};
use tests::TestCluster;
use tokio::io::AsyncWriteExt;

/// A cluster with test commands (`sleep`) and one read ticket on the shard, so a second
/// read queues behind a sleeping one.
async fn one_read_ticket() -> TestCluster {
    let c = TestCluster::builder()
        .memory()
        .router(|r| {
            r.enable_test_commands = true;
            // One slot to the shard as well: a 30 s command holds it only for the
            // gate's hold limit, so the find below still reaches the shard's queue.
            r.forward_slots = 1;
        })
        .start()
        .await;
    c.node.admission.configure(1, 0);
    c
}

/// Polls `currentOp` (filtered by `filter`) until `ready` holds for the entries, for at
/// most 20 s; returns the entries.
async fn wait_for_ops(
    admin: &mongodb::Database,
    filter: Document,
    ready: impl Fn(&[Document]) -> bool,
) -> Vec<Document> {
    let started = std::time::Instant::now();
    loop {
        let mut cmd = doc! {"currentOp": 1};
        cmd.extend(filter.clone());
        let reply = admin.run_command(cmd).await.unwrap();
        let ops: Vec<Document> = reply
            .get_array("inprog")
            .unwrap()
            .iter()
            .filter_map(|b| b.as_document().cloned())
            .collect();
        if ready(&ops) || started.elapsed() > Duration::from_secs(20) {
            return ops;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn phase(op: &Document) -> &str {
    op.get_str("phase").unwrap_or_default()
}

fn wait_us(op: &Document, which: &str) -> i64 {
    op.get_document("waits").unwrap().get_i64(which).unwrap()
}

fn sleeping() -> Document {
    doc! {"command.sleep": {"$exists": true}}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_op_shows_each_wait_and_kill_op_stops_a_running_command() {
    let c = one_read_ticket().await;
    let client = c.client().await;
    let admin = client.database("admin");
    client
        .database("test")
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();

    // A sleeps holding the only read ticket; B's find queues behind it.
    let sleeper = {
        let admin = admin.clone();
        tokio::spawn(async move { admin.run_command(doc! {"sleep": 1, "millis": 30_000}).await })
    };
    let ops = wait_for_ops(&admin, sleeping(), |ops| {
        ops.iter().any(|o| phase(o) == "shardExec")
    })
    .await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    let a = &ops[0];
    assert_eq!(phase(a), "shardExec", "{a}");
    assert_eq!(a.get_str("ns").unwrap(), "admin.$cmd");
    assert_eq!(a.get_array("shards").unwrap().len(), 1, "{a}");

    let finder = {
        let coll = client.database("test").collection::<Document>("c");
        tokio::spawn(async move { coll.find_one(doc! {"_id": 1}).await })
    };
    let queued = wait_for_ops(&admin, doc! {"op": "query"}, |ops| {
        ops.iter()
            .any(|o| phase(o) == "shardQueue" && wait_us(o, "shardQueueMicros") > 0)
    })
    .await;
    let b = queued
        .iter()
        .find(|o| phase(o) == "shardQueue")
        .unwrap_or_else(|| panic!("the find never showed as queued: {queued:?}"));
    assert_eq!(b.get_str("ns").unwrap(), "test.c");
    assert!(wait_us(b, "shardQueueMicros") > 0, "{b}");
    assert_eq!(wait_us(b, "shardExecMicros"), 0, "{b}");
    // It waited in the router's line for the one slot at most until the sleep's hold
    // ran out (the field is there, and far below the sleep's 30 s).
    assert!(wait_us(b, "routerQueueMicros") < 5_000_000, "{b}");
    assert!(!finder.is_finished(), "the find ran without a ticket");
    // serverStatus shows the same queue from the member's side.
    let read = read_pool(&admin).await;
    assert_eq!(read.get_i64("tickets"), Ok(1), "{read}");
    assert_eq!(read.get_i64("queued"), Ok(1), "{read}");
    assert_eq!(
        read.get_bool("probing"),
        Ok(false),
        "an explicit count is not probed"
    );

    // Killing A answers its client Interrupted, frees the ticket, and B runs.
    let opid = a.get_i64("opid").unwrap();
    let reply = admin
        .run_command(doc! {"killOp": 1, "op": opid})
        .await
        .unwrap();
    assert_eq!(reply.get_str("info").unwrap(), "attempting to kill op");
    let err = sleeper
        .await
        .unwrap()
        .expect_err("a killed sleep succeeded");
    assert_eq!(code(&err), 11601, "{err}");
    let found = finder.await.unwrap().unwrap();
    assert_eq!(found, Some(doc! {"_id": 1}));
    // The shard's work stopped too: nothing is left sleeping there.
    let left = wait_for_ops(&admin, sleeping(), |ops| ops.is_empty()).await;
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(c.node.ops.interrupted_total(), 1);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_stops_its_running_command_on_the_shard() {
    let c = one_read_ticket().await;
    let client = c.client().await;
    let admin = client.database("admin");
    let mut raw = tokio::net::TcpStream::connect(c.router_addr).await.unwrap();
    let sleep = doc! {"sleep": 1, "millis": 60_000, "$db": "admin"};
    raw.write_all(&wire::encode_op_msg(7, 0, &sleep, None))
        .await
        .unwrap();
    // Seen through the `$currentOp` stage, as mongosh's db.currentOp() asks.
    let running = || async {
        let pipeline = vec![
            doc! {"$currentOp": {"allUsers": true}},
            doc! {"$match": {"command.sleep": {"$exists": true}, "phase": "shardExec"}},
        ];
        let mut cursor = admin.aggregate(pipeline).await.unwrap();
        let mut n = 0;
        while cursor.advance().await.unwrap() {
            n += 1;
        }
        n
    };
    let started = std::time::Instant::now();
    while running().await == 0 && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running().await, 1);
    drop(raw);
    // Long before the 60 s sleep would end, the shard has stopped it.
    let left = wait_for_ops(&admin, sleeping(), |ops| ops.is_empty()).await;
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(c.node.ops.interrupted_total(), 1);
    // The ticket it held is free again.
    let reply = admin
        .run_command(doc! {"sleep": 1, "millis": 1})
        .await
        .unwrap();
    assert_eq!(reply.get_f64("ok").unwrap(), 1.0);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_op_by_member_and_opid_stops_a_queued_shard_operation() {
    let c = one_read_ticket().await;
    let client = c.client().await;
    let admin = client.database("admin");
    let first = {
        let admin = admin.clone();
        tokio::spawn(async move { admin.run_command(doc! {"sleep": 1, "millis": 3_000}).await })
    };
    wait_for_ops(&admin, sleeping(), |ops| {
        ops.iter().any(|o| phase(o) == "shardExec")
    })
    .await;
    let second = {
        let admin = admin.clone();
        tokio::spawn(async move { admin.run_command(doc! {"sleep": 1, "millis": 1}).await })
    };
    let ops = wait_for_ops(&admin, sleeping(), |ops| {
        ops.iter().any(|o| phase(o) == "shardQueue")
    })
    .await;
    let queued = ops
        .iter()
        .find(|o| phase(o) == "shardQueue")
        .unwrap_or_else(|| panic!("no queued sleep: {ops:?}"));
    let shard_op = queued.get_array("shards").unwrap()[0]
        .as_document()
        .unwrap()
        .get_str("opid")
        .unwrap()
        .to_string();
    assert!(shard_op.contains(':'), "{shard_op}");
    admin
        .run_command(doc! {"killOp": 1, "op": shard_op.as_str()})
        .await
        .unwrap();
    // The queued one leaves the queue without running; the running one is untouched.
    let err = second
        .await
        .unwrap()
        .expect_err("a killed queued sleep ran");
    assert_eq!(code(&err), 11601, "{err}");
    assert!(!first.is_finished(), "the running sleep was stopped too");
    assert_eq!(c.node.ops.interrupted_total(), 1);
    first.await.unwrap().unwrap();
    c.stop().await;
}

#[tokio::test]
async fn kill_op_and_current_op_reject_bad_input() {
    let c = TestCluster::builder().memory().start().await;
    let client = c.client().await;
    let admin = client.database("admin");
    let cases: [(Document, i32); 4] = [
        (doc! {"killOp": 1}, 9),
        (doc! {"killOp": 1, "op": -1}, 2),
        (doc! {"killOp": 1, "op": "nonsense"}, 2),
        (doc! {"killOp": 1, "op": Bson::Boolean(true)}, 14),
    ];
    for (cmd, expected) in cases {
        let err = admin.run_command(cmd.clone()).await.expect_err("accepted");
        assert_eq!(code(&err), expected, "{cmd}: {err}");
    }
    let err = client
        .database("test")
        .run_command(doc! {"currentOp": 1})
        .await
        .expect_err("currentOp outside admin");
    assert_eq!(code(&err), 13, "{err}");
    // Without test commands, `sleep` does not exist.
    let err = admin
        .run_command(doc! {"sleep": 1, "millis": 1})
        .await
        .expect_err("sleep without test commands");
    assert_eq!(code(&err), 59, "{err}");
    c.stop().await;
}

/// The shard member's read pool as the router's `serverStatus` shows it.
async fn read_pool(admin: &mongodb::Database) -> Document {
    let status = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    let members = status
        .get_document("bulwark")
        .unwrap()
        .get_array("shardMembers")
        .unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    let member = members[0].as_document().unwrap();
    member
        .get_document("admission")
        .unwrap()
        .get_document("read")
        .unwrap()
        .clone()
}

fn code(e: &mongodb::error::Error) -> i32 {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => c.code,
        other => panic!("not a command error: {other:?}"),
    }
}
