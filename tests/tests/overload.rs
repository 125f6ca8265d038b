//! Work nobody waits for is not done: a command whose client hangs up while it waits is
//! dropped by the router before it reaches the shard.

use std::time::Duration;

use bson::{doc, Document};
use tests::TestCluster;
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_client_hung_up_is_never_run() {
    let c = with_test_commands().await;
    let client = c.client().await;
    let admin = client.database("admin");
    // Every insert waits 1.5 s in the router before it is dispatched.
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "blockConnection": true, "blockTimeMS": 1500},
        })
        .await
        .unwrap();
    // A raw client sends an insert and hangs up long before the wait ends.
    let mut raw = tokio::net::TcpStream::connect(c.router_addr).await.unwrap();
    let insert = doc! {"insert": "gone", "documents": [{"_id": 1}], "$db": "test"};
    raw.write_all(&wire::encode_op_msg(7, 0, &insert, None))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(raw);

    let cancelled = || async {
        let status = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
        status
            .get_document("bulwark")
            .unwrap()
            .get_i64("cancelledByClientDisconnect")
            .unwrap()
    };
    let started = std::time::Instant::now();
    while cancelled().await == 0 && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(cancelled().await, 1);
    // Well past the moment the insert would have been dispatched: it never was.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let n = client
        .database("test")
        .collection::<Document>("gone")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(n, 0, "the abandoned insert ran");
    c.stop().await;
}

/// The sum of a `serverStatus.bulwark.waits` histogram.
fn histogram_total(waits: &Document, which: &str) -> i64 {
    waits
        .get_document(which)
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum()
}

#[tokio::test]
async fn server_status_shows_where_commands_waited() {
    let c = TestCluster::builder().memory().start().await;
    let client = c.client().await;
    let coll = client.database("test").collection::<Document>("w");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    for _ in 0..10 {
        coll.find_one(doc! {"_id": 1}).await.unwrap();
    }
    let status = client
        .database("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .unwrap();
    let waits = status
        .get_document("bulwark")
        .unwrap()
        .get_document("waits")
        .unwrap();
    // Every forwarded command is counted once in each histogram.
    let total = histogram_total(waits, "total");
    assert!(total >= 11, "{waits}");
    assert_eq!(histogram_total(waits, "routerQueue"), total);
    assert_eq!(histogram_total(waits, "shardQueue"), total);
    assert_eq!(histogram_total(waits, "shardExec"), total);
    assert_eq!(histogram_total(waits, "replication"), total);
    // The line for the shard's slots: its bound, and nobody in it once all answered.
    let gate = status
        .get_document("bulwark")
        .unwrap()
        .get_document("forwardGate")
        .unwrap();
    assert_eq!(
        gate.get_i64("slots").unwrap(),
        router::overload::forward_gate::DEFAULT_SLOTS as i64
    );
    assert_eq!(gate.get_i64("waiting").unwrap(), 0, "{gate}");
    assert_eq!(
        gate.get_i64("available").unwrap(),
        gate.get_i64("slots").unwrap(),
        "{gate}"
    );
    c.stop().await;
}

/// A long scan gives its read ticket back every few milliseconds while others queue, so
/// a short read arriving mid-scan does not wait for the whole scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_read_does_not_wait_for_a_long_scan() {
    let c = TestCluster::builder().memory().start().await;
    c.node.admission.configure(1, 0);
    let client = c.client().await;
    let coll = client.database("test").collection::<Document>("big");
    let docs: Vec<Document> = (0..50_000)
        .map(|i| doc! {"_id": i, "v": i % 7, "pad": "x".repeat(100)})
        .collect();
    coll.insert_many(docs).await.unwrap();
    let (done, mut order) = tokio::sync::mpsc::unbounded_channel();
    let scan = {
        let (coll, done) = (coll.clone(), done.clone());
        tokio::spawn(async move {
            let found = coll.find_one(doc! {"v": 99}).await.unwrap();
            done.send("scan").unwrap();
            found
        })
    };
    // Once the scan runs on the shard, a short read arrives.
    let started = std::time::Instant::now();
    let scanning = loop {
        let running = c.node.ops.all().into_iter().find(|op| {
            op.phase() == shard::control::ops::Phase::Running
                && op.to_document("").get_str("ns") == Ok("test.big")
        });
        if let Some(op) = running {
            break op;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the scan never ran"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let short = coll.find_one(doc! {"_id": 5}).await.unwrap();
    done.send("short").unwrap();
    assert_eq!(short.unwrap().get_i32("v").unwrap(), 5);
    assert_eq!(scan.await.unwrap(), None);
    assert_eq!(
        order.recv().await,
        Some("short"),
        "the short read waited for the scan"
    );
    assert!(scanning.yields() >= 1, "the scan never yielded its ticket");
    c.stop().await;
}

/// Over the configured new-connection rate, connections wait their turn; beyond the
/// queue they are closed at once, before any handshake work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_rate_wait_or_are_refused_at_once() {
    let c = TestCluster::builder()
        .memory()
        .router(|r| {
            r.connection_rate_per_sec = 0.5;
            r.connection_rate_burst = 3;
            r.connection_rate_queue = 2;
        })
        .start()
        .await;
    // The cluster's own client took a token when it connected; `status` reuses it.
    let client = c.client().await;
    let admin = client.database("admin");
    let status = || async {
        let s = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
        s.get_document("bulwark")
            .unwrap()
            .get_document("ingress")
            .unwrap()
            .get_document("rateLimiter")
            .unwrap()
            .clone()
    };
    let before = status().await;
    let mut raw = Vec::new();
    for _ in 0..8 {
        raw.push(tokio::net::TcpStream::connect(c.router_addr).await.unwrap());
    }
    // Closed at once: the refused ones read end-of-stream without sending anything.
    let mut closed = 0;
    for s in &mut raw {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(300), async {
            tokio::io::AsyncReadExt::read(s, &mut byte).await
        })
        .await;
        if matches!(read, Ok(Ok(0)) | Ok(Err(_))) {
            closed += 1;
        }
    }
    let after = status().await;
    let rejected = after.get_i64("rejected").unwrap() - before.get_i64("rejected").unwrap();
    let delayed = after.get_i64("delayed").unwrap() - before.get_i64("delayed").unwrap();
    // The status client's connections may have used part of the burst; every one of
    // the eight is either through, waiting (at most two), or refused.
    assert!(delayed <= 2, "{after}");
    assert!(rejected >= 3, "{after}");
    assert_eq!(
        closed, rejected,
        "every refused connection was closed, and only those"
    );
    c.stop().await;
}

/// A command whose shard work outlasts its `maxTimeMS` is answered MaxTimeMSExpired (50)
/// on the same connection, which stays usable: a driver that got no answer in time would
/// close it and reconnect. The shard's work stops as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_deadline_gets_an_answer_and_keeps_its_connection() {
    let c = with_test_commands().await;
    let mut raw = tokio::net::TcpStream::connect(c.router_addr).await.unwrap();
    let sleep = doc! {"sleep": 1, "millis": 10_000, "maxTimeMS": 200, "$db": "admin"};
    let reply = tests::raw_command(&mut raw, 1, sleep).await;
    assert_eq!(reply.get_i32("code"), Ok(50), "{reply}");
    let reply = tests::raw_command(&mut raw, 2, doc! {"ping": 1, "$db": "admin"}).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let started = std::time::Instant::now();
    while !c.node.ops.all().is_empty() && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(c.node.ops.all().is_empty(), "the shard kept sleeping");
    c.stop().await;
}

/// An in-memory cluster whose router accepts test commands (`sleep`, fail points).
async fn with_test_commands() -> TestCluster {
    TestCluster::builder()
        .memory()
        .router(|r| r.enable_test_commands = true)
        .start()
        .await
}

/// A command whose `maxTimeMS` is shorter than the router's answers wait now is refused
/// at once as overloaded (462), not forwarded to expire: an expiry costs nearly a whole
/// answer, a refusal an eighth of one. Commands with time enough, or no deadline, still
/// run, a slow execution alone refuses nothing, and once answers are quick again the
/// short deadline is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_shorter_than_answers_take_is_refused_at_once() {
    let c = with_test_commands().await;
    let addr = c.router_addr;
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    let find = |max_time_ms: i32| {
        doc! {"find": "t", "filter": {}, "maxTimeMS": max_time_ms, "$db": "test"}
    };
    // Slow executions (30 ms sleeps on the member) are the commands' own: a short
    // deadline is still served.
    for id in 0..24 {
        let sleep = doc! {"sleep": 1, "millis": 30, "$db": "admin"};
        tests::raw_command(&mut raw, id, sleep).await;
    }
    let status = tests::raw_command(&mut raw, 30, doc! {"serverStatus": 1, "$db": "admin"}).await;
    let due = status
        .get_document("bulwark")
        .unwrap()
        .get_i64("answerDueMicros")
        .unwrap();
    assert!(
        due < 30_000,
        "the sleeps' execution counted as waiting: {due} µs"
    );
    // Every find now waits 30 ms in the router before it is dispatched: a wait every
    // command shares. Four connections keep such finds (without a deadline) going.
    let on = doc! {
        "configureFailPoint": "failCommand", "mode": "alwaysOn", "$db": "admin",
        "data": {"failCommands": ["find"], "blockConnection": true, "blockTimeMS": 30},
    };
    tests::raw_command(&mut raw, 31, on).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut slow = Vec::new();
    for _ in 0..4 {
        let stop = stop.clone();
        slow.push(tokio::spawn(async move {
            let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut id = 0;
            while !stop.is_cancelled() && id < 2_000 {
                id += 1;
                let find = doc! {"find": "t", "filter": {}, "$db": "test"};
                tests::raw_command(&mut raw, id, find).await;
            }
        }));
    }
    // Each connection samples one answer in eight: wait until the estimate has risen.
    let mut refused = None;
    for n in 0..300 {
        let reply = tests::raw_command(&mut raw, 100 + n, find(5)).await;
        if reply
            .get_str("errmsg")
            .is_ok_and(|m| m.contains("answers take up to"))
        {
            refused = Some(reply);
            break;
        }
    }
    let reply = refused.expect("a 5 ms deadline was never refused while answers waited 30 ms");
    assert_eq!(reply.get_i32("code"), Ok(462), "{reply}");
    let labels = reply.get_array("errorLabels").unwrap();
    assert!(labels.contains(&"SystemOverloadedError".into()), "{reply}");
    // Time enough, or no deadline: served meanwhile.
    let reply = tests::raw_command(&mut raw, 1_000, find(60_000)).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let no_deadline = doc! {"find": "t", "filter": {}, "$db": "test"};
    let reply = tests::raw_command(&mut raw, 1_001, no_deadline).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let status =
        tests::raw_command(&mut raw, 1_002, doc! {"serverStatus": 1, "$db": "admin"}).await;
    let bulwark = status.get_document("bulwark").unwrap();
    // Counted under its own rule (`shedByRouter` counts the lag controller's).
    assert!(
        bulwark.get_i64("shedByAnswerTime").unwrap() >= 1,
        "{bulwark}"
    );
    assert!(
        bulwark.get_i64("answerDueMicros").unwrap() > 5_000,
        "{bulwark}"
    );
    // The wait ends: the estimate fades and the short deadline is served again.
    let off = doc! {"configureFailPoint": "failCommand", "mode": "off", "$db": "admin"};
    tests::raw_command(&mut raw, 1_003, off).await;
    stop.cancel();
    for t in slow {
        t.await.unwrap();
    }
    let mut last = Document::new();
    for n in 0..500 {
        last = tests::raw_command(&mut raw, 2_000 + n, find(5)).await;
        if last.get_f64("ok") == Ok(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        last.get_f64("ok"),
        Ok(1.0),
        "a 5 ms deadline stayed refused after answers were quick again: {last}"
    );
    c.stop().await;
}

/// A refusal at the front of the router's path (`Session::shed`, answered from
/// `router/src/overload/refusal.rs` without building a `Document`) is the overload error a driver
/// knows: 462 with the overload labels and the cluster time, through the Rust driver and
/// raw. Commands without a deadline still run; a refused write writes nothing; a refused
/// fire-and-forget message gets no reply and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_shed_at_the_front_gets_the_overload_error() {
    let c = with_test_commands().await;
    let client = c.client().await;
    let admin = client.database("admin");
    let coll = client.database("test").collection::<Document>("shed");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    admin
        .run_command(doc! {"configureFailPoint": "shedCommands", "mode": "alwaysOn"})
        .await
        .unwrap();

    // Through the driver: the code and both labels.
    let err = coll
        .find_one(doc! {"_id": 1})
        .max_time(Duration::from_millis(100))
        .await
        .unwrap_err();
    match *err.kind {
        mongodb::error::ErrorKind::Command(ref e) => {
            assert_eq!(e.code, 462, "{e:?}");
            assert_eq!(e.code_name, "IngressRequestRateLimitExceeded");
        }
        ref other => panic!("not a command error: {other:?}"),
    }
    assert!(err.contains_label("SystemOverloadedError"), "{err:?}");
    assert!(err.contains_label("RetryableError"), "{err:?}");
    // No deadline: nothing to shed.
    assert!(coll.find_one(doc! {"_id": 1}).await.unwrap().is_some());

    // Raw: the whole reply, cluster time included.
    let mut raw = tokio::net::TcpStream::connect(c.router_addr).await.unwrap();
    let insert =
        doc! {"insert": "shed", "documents": [{"_id": 2}], "maxTimeMS": 100, "$db": "test"};
    let reply = tests::raw_command(&mut raw, 1, insert).await;
    assert_eq!(reply.get_f64("ok"), Ok(0.0), "{reply}");
    assert_eq!(reply.get_i32("code"), Ok(462), "{reply}");
    assert!(reply
        .get_str("errmsg")
        .unwrap()
        .contains("router overloaded"));
    assert!(reply.get_timestamp("operationTime").is_ok(), "{reply}");
    let cluster_time = reply.get_document("$clusterTime").unwrap();
    assert!(cluster_time.get_timestamp("clusterTime").is_ok(), "{reply}");
    // Bad input keeps its own error: a command without `$db` is not refused as overloaded.
    let no_db = doc! {"find": "shed", "filter": {}, "maxTimeMS": 100};
    let reply = tests::raw_command(&mut raw, 4, no_db).await;
    assert_eq!(reply.get_i32("code"), Ok(40571), "{reply}");
    // A fire-and-forget insert (moreToCome) refused: no reply, and the next command on
    // the same connection is answered as its own.
    let mut quiet = wire::OpMsg::new(
        doc! {"insert": "shed", "documents": [{"_id": 3}], "maxTimeMS": 100, "$db": "test"},
    );
    quiet.flags |= wire::OpMsg::MORE_TO_COME;
    let frame = wire::encode_op_msg_request(2, &quiet, None).unwrap();
    raw.write_all(&frame).await.unwrap();
    let ping = tests::raw_command(&mut raw, 3, doc! {"ping": 1, "$db": "admin"}).await;
    assert_eq!(ping.get_f64("ok"), Ok(1.0), "{ping}");

    let status = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    let shed = status
        .get_document("bulwark")
        .unwrap()
        .get_i64("shedByRouter")
        .unwrap();
    assert!(shed >= 3, "shedByRouter {shed}");
    admin
        .run_command(doc! {"configureFailPoint": "shedCommands", "mode": "off"})
        .await
        .unwrap();
    // With the fail point off a deadline is served, and neither refused insert wrote.
    let served = coll
        .find_one(doc! {"_id": 1})
        .max_time(Duration::from_millis(5_000))
        .await
        .unwrap();
    assert!(served.is_some());
    assert_eq!(tests::ids_of(&coll, doc! {}).await, vec![1]);
    c.stop().await;
}
