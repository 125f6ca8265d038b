//! Bad bytes on the wire: each gets a MongoDB error or a closed connection, the router
//! stays up, and other clients keep being served.

use bson::{doc, Document};
use tests::TestCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn send_raw(addr: std::net::SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let _ = s.shutdown().await;
    let mut out = Vec::new();
    match tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await {
        Ok(Ok(_)) if !out.is_empty() => Some(out),
        _ => None,
    }
}

fn op_msg(body: &Document) -> Vec<u8> {
    wire::encode_op_msg_request(7, &wire::OpMsg::new(body.clone()), None).unwrap()
}

fn nested(depth: usize) -> Document {
    let mut d = doc! {"x": 1};
    for _ in 0..depth {
        d = doc! {"x": d};
    }
    d
}

#[tokio::test]
async fn garbage_truncated_and_oversized_frames_close_the_connection() {
    let cluster = TestCluster::start().await;
    let addr = cluster.router_addr;
    assert!(send_raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .is_none());
    // length says 48 MB + 1
    let mut huge = (48_000_001i32).to_le_bytes().to_vec();
    huge.extend_from_slice(&[0u8; 12]);
    assert!(send_raw(addr, &huge).await.is_none());
    // truncated: a valid header promising more than is sent
    let full = op_msg(&doc! {"ping": 1, "$db": "admin"});
    assert!(send_raw(addr, &full[..full.len() - 3]).await.is_none());
    // negative length
    let mut neg = (-5i32).to_le_bytes().to_vec();
    neg.extend_from_slice(&[0u8; 12]);
    assert!(send_raw(addr, &neg).await.is_none());

    // the router still serves a real driver
    let client = cluster.client().await;
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
}

#[tokio::test]
async fn too_deep_nesting_gets_an_error_reply() {
    let cluster = TestCluster::start().await;
    let mut body = doc! {"insert": "deep", "$db": "t"};
    body.insert("documents", vec![bson::Bson::Document(nested(150))]);
    let reply = send_raw(cluster.router_addr, &op_msg(&body))
        .await
        .expect("an error reply");
    let (_, doc) = wire::decode_reply(&reply).unwrap();
    assert_eq!(doc.get_f64("ok").unwrap(), 0.0, "{doc}");
    assert!(doc.get_i32("code").is_ok(), "{doc}");
    // Nothing was inserted, and the server is fine.
    let client = cluster.client().await;
    assert_eq!(
        client
            .database("t")
            .collection::<Document>("deep")
            .count_documents(doc! {})
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn unacknowledged_writes_with_more_to_come_get_no_reply_but_apply() {
    let cluster = TestCluster::start().await;
    let body =
        doc! {"insert": "w0", "$db": "t", "documents": [{"_id": 1}], "writeConcern": {"w": 0}};
    let mut msg = op_msg(&body);
    // flagBits live right after the 16-byte header; bit 1 is moreToCome.
    msg[16] |= 0b10;
    let mut s = TcpStream::connect(cluster.router_addr).await.unwrap();
    s.write_all(&msg).await.unwrap();
    // A ping on the same connection is answered, proving the insert sent no reply.
    let ping =
        wire::encode_op_msg_request(8, &wire::OpMsg::new(doc! {"ping": 1, "$db": "admin"}), None)
            .unwrap();
    s.write_all(&ping).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut rest = vec![0u8; i32::from_le_bytes(len) as usize - 4];
    s.read_exact(&mut rest).await.unwrap();
    let mut frame = len.to_vec();
    frame.extend(rest);
    let (header, doc) = wire::decode_reply(&frame).unwrap();
    assert_eq!(header.response_to, 8);
    assert_eq!(doc.get_f64("ok").unwrap(), 1.0);
    let client = cluster.client().await;
    assert_eq!(
        client
            .database("t")
            .collection::<Document>("w0")
            .count_documents(doc! {"_id": 1})
            .await
            .unwrap(),
        1
    );
}

/// Hostile updates (issue: one aborted every node, one poisoned the collection) fail
/// alone; unsupported find options are refused, not ignored; the collection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_commands_fail_alone_and_unsupported_options_are_refused() {
    let cluster = TestCluster::start().await;
    let client = cluster.client().await;
    let db = client.database("hostile");
    let coll = db.collection::<Document>("c");
    let long_path = vec!["a"; 100_000].join(".");
    let e = coll
        .update_one(doc! {}, doc! {"$set": {long_path: 1}})
        .upsert(true)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("code: 15,"), "Overflow (15): {e}");
    coll.insert_one(doc! {"_id": 1, "s": "2020-01-01T00:00+0000é"})
        .await
        .unwrap();
    let pipeline = vec![doc! {"$set": {"d": {"$dateFromString": {"dateString": "$s"}}}}];
    let e = coll.update_one(doc! {}, pipeline).await.unwrap_err();
    assert!(
        e.to_string().contains("241") || e.to_string().contains("ConversionFailure"),
        "{e}"
    );
    for (option, value) in [
        ("min", bson::Bson::Document(doc! {"_id": 0})),
        ("max", bson::Bson::Document(doc! {"_id": 9})),
        ("returnKey", bson::Bson::Boolean(true)),
        ("showRecordId", bson::Bson::Boolean(true)),
        ("noCursorTimeout", bson::Bson::Boolean(true)),
        ("sort", bson::Bson::Document(doc! {"$natural": 1})),
        (
            "collation",
            bson::Bson::Document(doc! {"locale": "en", "strength": 2}),
        ),
    ] {
        let reply = db
            .run_command(doc! {"find": "c", option: value})
            .await
            .unwrap_err();
        assert!(
            reply.to_string().contains("not supported"),
            "{option}: {reply}"
        );
    }
    for create in [
        doc! {"create": "capped", "capped": true, "size": 4096},
        doc! {"create": "validated", "validator": {"a": {"$type": "int"}}},
    ] {
        let e = db.run_command(create.clone()).await.unwrap_err();
        assert!(e.to_string().contains("not supported"), "{create}: {e}");
    }
    coll.insert_one(doc! {"_id": 2}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
    cluster.stop().await;
}

/// A misspelt or unknown top-level field is refused with 40415, not ignored: an ignored
/// `fitler` would have deleted or returned the whole collection.
#[tokio::test]
async fn unknown_command_fields_are_refused() {
    let cluster = TestCluster::start().await;
    let client = cluster.client().await;
    let db = client.database("strict");
    let coll = db.collection::<Document>("c");
    coll.insert_many(vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 2}])
        .await
        .unwrap();
    for cmd in [
        doc! {"find": "c", "fitler": {"a": 1}},
        doc! {"delete": "c", "deletes": [{"q": {"a": 1}, "limit": 0}], "upsert": true},
        doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "batchsize": 1},
        doc! {"count": "c", "filter": {"a": 1}},
        doc! {"explain": {"find": "c", "fitler": {}}},
        doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}], "x": 1},
    ] {
        let e = db.run_command(cmd.clone()).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("40415") && text.contains("is an unknown field"),
            "{cmd}: {text}"
        );
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
    let found = db
        .run_command(doc! {"find": "c", "filter": {"a": 1}, "comment": "ok", "maxTimeMS": 5000})
        .await
        .unwrap();
    assert_eq!(
        found
            .get_document("cursor")
            .unwrap()
            .get_array("firstBatch")
            .unwrap()
            .len(),
        1
    );
    cluster.stop().await;
}
