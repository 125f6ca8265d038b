//! Cluster time for `$clusterTime` / `operationTime` gossip. Until replication lands
//! (issue #3) there is one shard and no oplog, so the router's clock is its wall clock in
//! seconds with a per-connection increment: monotonic for each client, which is what the
//! drivers' causal-consistency bookkeeping needs. The signature is unsigned (keyId 0),
//! as on a deployment without cluster-key authentication.

use bson::{doc, spec::BinarySubtype, Binary, Document, Timestamp};

pub fn now(increment: u32) -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Timestamp {
        time: secs as u32,
        increment,
    }
}

/// Adds `$clusterTime` and `operationTime` to a reply.
pub fn stamp(reply: &mut Document, ts: Timestamp) {
    reply.insert("operationTime", ts);
    reply.insert(
        "$clusterTime",
        doc! {"clusterTime": ts, "signature": {"hash": Binary {subtype: BinarySubtype::Generic, bytes: vec![0; 20]}, "keyId": 0i64}},
    );
}
