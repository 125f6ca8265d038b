//! What building and encoding an overload refusal costs, as a `Document` (the general
//! error path: `MongoError::overloaded`, `cluster_time::stamp`, `encode_op_msg`) and as
//! bytes (`refusal::overloaded`, `encode_op_msg_raw`), message formatting included.
//! Prints figures; asserts nothing.
//!
//!     cargo run --release -p router --example refusal_encoding

use std::hint::black_box;
use std::time::Instant;

use bson::Timestamp;

const REPLIES: i32 = 300_000;

fn message(i: i32) -> String {
    format!(
        "router overloaded: the line for this shard's 32 slots would take {} ms and a call about 3 ms more, too long for maxTimeMS 100; nothing was started, retry",
        i % 7
    )
}

fn per_reply_ns(f: impl Fn(i32) -> Vec<u8>) -> f64 {
    let t = Instant::now();
    for i in 0..REPLIES {
        black_box(f(i));
    }
    t.elapsed().as_nanos() as f64 / REPLIES as f64
}

fn main() {
    let ts = Timestamp {
        time: 1_796_450_000,
        increment: 77,
    };
    for round in 1..=3 {
        let document = per_reply_ns(|i| {
            let mut reply = wire::MongoError::overloaded(message(i)).to_document();
            router::cluster_time::stamp(&mut reply, ts);
            wire::encode_op_msg(i, 1, &reply, None)
        });
        let raw = per_reply_ns(|i| {
            let reply = router::overload::refusal::overloaded(&message(i), ts);
            wire::encode_op_msg_raw(i, 1, reply.as_bytes(), None)
        });
        println!("round {round}: as a Document {document:.0} ns a reply, as bytes {raw:.0} ns");
    }
}
