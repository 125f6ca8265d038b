//! Cluster time for `$clusterTime` / `operationTime` gossip. The router's clock follows
//! the newest cluster time any member reported (`CommandReply.cluster_time`: a member's
//! clock is at or after every entry it wrote, `proto::cluster_clock`), so the
//! `operationTime` a client gets is at or after its writes, and never goes back. Reads
//! do not compare times yet: a read that carries `afterClusterTime` makes the member that
//! serves it apply everything the primary had committed when the read arrived
//! (`Replica::catch_up`), which covers every write acknowledged to the client before.
//! The signature is unsigned (keyId 0), as on a deployment without cluster-key
//! authentication; a client's `$clusterTime` therefore moves nothing here.

use std::sync::{LazyLock, OnceLock};

use bson::raw::{RawBinaryRef, RawBsonRef};
use bson::{doc, spec::BinarySubtype, Binary, Document, RawDocumentBuf, Timestamp};
use proto::cluster_clock::{to_bson, ClusterClock, ClusterTime};

/// The process's router clock; it starts at the wall clock, so it is never zero.
static CLOCK: LazyLock<ClusterClock> = LazyLock::new(|| {
    let clock = ClusterClock::default();
    clock.tick();
    clock
});

/// The cluster time to report now.
pub fn now() -> Timestamp {
    to_bson(CLOCK.now())
}

/// The cluster time members are told of (gossip): the newest any member reported.
pub fn current() -> ClusterTime {
    CLOCK.now()
}

/// Moves the clock to a member's reported time `t` (0: a member without replication).
pub fn learn(t: ClusterTime) {
    if let Err(e) = CLOCK.advance(t) {
        tracing::warn!(error = %e, "a member reported a cluster time far ahead");
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
