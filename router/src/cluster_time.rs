//! Cluster time for `$clusterTime` / `operationTime` gossip: the router's wall clock in
//! seconds with a per-connection increment, monotonic for each client, which is what the
//! drivers' causal-consistency bookkeeping needs. Its value orders nothing on the members:
//! a read that carries `afterClusterTime` makes the member that serves it apply
//! everything the primary had committed when the read arrived (`Replica::catch_up`),
//! which covers every write acknowledged to the client before, whatever the time says.
//! The signature is unsigned (keyId 0), as on a deployment without cluster-key
//! authentication.

use std::sync::OnceLock;

use bson::raw::{RawBinaryRef, RawBsonRef};
use bson::{doc, spec::BinarySubtype, Binary, Document, RawDocumentBuf, Timestamp};

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

/// The unsigned signature's hash (keyId 0).
const UNSIGNED_HASH: [u8; 20] = [0; 20];

/// Adds `$clusterTime` and `operationTime` to a reply.
pub fn stamp(reply: &mut Document, ts: Timestamp) {
    reply.insert("operationTime", ts);
    reply.insert(
        "$clusterTime",
        doc! {"clusterTime": ts, "signature": {"hash": Binary {subtype: BinarySubtype::Generic, bytes: UNSIGNED_HASH.to_vec()}, "keyId": 0i64}},
    );
}

/// [`stamp`] for a reply built straight to BSON (`refusal.rs`); the same fields, in the
/// same order (a test compares the bytes).
pub fn stamp_raw(reply: &mut RawDocumentBuf, ts: Timestamp) {
    // The signature never changes: built once.
    static SIGNATURE: OnceLock<RawDocumentBuf> = OnceLock::new();
    let signature = SIGNATURE.get_or_init(|| {
        let mut s = RawDocumentBuf::new();
        s.append_ref(
            "hash",
            RawBinaryRef {
                subtype: BinarySubtype::Generic,
                bytes: &UNSIGNED_HASH,
            },
        );
        s.append_ref("keyId", RawBsonRef::Int64(0));
        s
    });
    reply.append_ref("operationTime", RawBsonRef::Timestamp(ts));
    let mut cluster_time = RawDocumentBuf::new();
    cluster_time.append_ref("clusterTime", RawBsonRef::Timestamp(ts));
    cluster_time.append_ref("signature", signature);
    reply.append_ref("$clusterTime", &cluster_time);
}
