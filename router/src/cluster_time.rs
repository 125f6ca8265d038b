//! Cluster time for `$clusterTime` / `operationTime` gossip: the router's wall clock in
//! seconds with a per-connection increment, monotonic for each client, which is what the
//! drivers' causal-consistency bookkeeping needs. Its value orders nothing on the members:
//! a read that carries `afterClusterTime` makes the member that serves it apply
//! everything the primary had committed when the read arrived (`Replica::catch_up`),
//! which covers every write acknowledged to the client before, whatever the time says.
//! The signature is unsigned (keyId 0), as on a deployment without cluster-key
//! authentication.

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
