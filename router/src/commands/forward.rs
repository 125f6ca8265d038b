//! Forwarding a data command to the shard: strip the fields that only concern this hop
//! (sessions, read preference, cluster time) and turn `maxTimeMS` into a deadline.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use crate::conn::Session;

/// Generic arguments the router consumes; the shard never sees them.
const ROUTER_ONLY: &[&str] = &[
    "$db",
    "lsid",
    "$clusterTime",
    "$readPreference",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "readConcern",
    "writeConcern",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "$audit",
    "mayBypassWriteBlocking",
];

pub async fn run(session: &mut Session, db: &str, mut cmd: Document) -> MongoResult<Document> {
    let max_time_ms = max_time_ms(cmd.get("maxTimeMS"))?;
    for f in ROUTER_ONLY {
        cmd.remove(*f);
    }
    session
        .state
        .shard
        .run(db, &cmd, max_time_ms, &session.peer_text)
        .await
}

/// Validates `maxTimeMS` as MongoDB does: a non-negative 32-bit integer (0 = no limit).
pub fn max_time_ms(v: Option<&Bson>) -> MongoResult<u64> {
    let n = match v {
        None | Some(Bson::Null) => return Ok(0),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) if d.fract() == 0.0 && d.is_finite() => *d as i64,
        Some(Bson::Double(_)) => {
            return Err(MongoError::bad_value("maxTimeMS has non-integral value"))
        }
        Some(_) => return Err(MongoError::bad_value("maxTimeMS must be a number")),
    };
    if !(0..=i64::from(i32::MAX)).contains(&n) {
        return Err(MongoError::bad_value(format!(
            "{n} value for maxTimeMS is out of range [0, 2147483647]"
        )));
    }
    Ok(n as u64)
}
