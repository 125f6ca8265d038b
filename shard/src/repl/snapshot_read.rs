//! `readConcern: {level: "snapshot"}` outside transactions: a read of one point in the
//! cluster's time. Every page of it, `getMore`s included, reads as of that time, so a
//! cursor sees no write that committed after it opened, however long the client reads.
//!
//! The time is `atClusterTime` when the client gives one, otherwise the newest time this
//! member has applied (at or after `afterClusterTime`). The reply names it (`atClusterTime`),
//! and the driver sends it with the session's later reads. A time older than the history
//! window (`history_window_secs`) is gone: SnapshotTooOld (239).

use std::time::Duration;

use bson::{Bson, Document};
use storage::Timestamp;
use wire::{ErrorCode, MongoError, MongoResult};

use super::Replica;

/// The commands MongoDB reads at a snapshot outside transactions.
const COMMANDS: &[&str] = &["find", "aggregate", "distinct"];

/// How long a read waits for this member to reach its time when it sets no deadline.
const REACH_WAIT: Duration = Duration::from_secs(10);

/// Whether the read concern asks for a snapshot.
pub fn requested(rc: &Document) -> bool {
    rc.get_str("level").ok() == Some("snapshot")
}

/// The time the snapshot read runs at, once this member has applied everything up to it.
pub fn time(
    replica: Option<&Replica>,
    name: &str,
    rc: &Document,
    limit: Option<Duration>,
) -> MongoResult<Timestamp> {
    if !COMMANDS.contains(&name) {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("{name} does not support readConcern level snapshot outside a transaction"),
        ));
    }
    let Some(replica) = replica else {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "readConcern level snapshot needs a replica set",
        ));
    };
    at_or_after(replica, rc, limit)
}

/// The read concern's `atClusterTime`, or the newest time this member has applied at or
/// after its `afterClusterTime`, once this member has applied everything up to it (a
/// snapshot read's time, and a transaction's).
pub fn at_or_after(
    replica: &Replica,
    rc: &Document,
    limit: Option<Duration>,
) -> MongoResult<Timestamp> {
    let at = match (
        timestamp(rc, "atClusterTime")?,
        timestamp(rc, "afterClusterTime")?,
    ) {
        (Some(_), Some(_)) => {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                "atClusterTime and afterClusterTime cannot both be given",
            ))
        }
        (Some(at), None) => at,
        (None, after) => replica.applied_time().max(after.unwrap_or(0)).max(1),
    };
    let reached = replica
        .reach_time(at, limit.unwrap_or(REACH_WAIT))
        .map_err(|e| MongoError::new(e.code(), e.to_string()))?;
    if !reached {
        return Err(MongoError::new(
            ErrorCode::SnapshotUnavailable,
            format!("this member has not reached cluster time {}", show(at)),
        ));
    }
    Ok(at)
}

/// Names the time in the reply where drivers look for it: the cursor of `find` and
/// `aggregate`, the top level of `distinct`.
pub fn stamp(reply: &mut Document, at: Timestamp) {
    let ts = Bson::Timestamp(to_bson(at));
    match reply.get_document_mut("cursor") {
        Ok(cursor) => {
            cursor.insert("atClusterTime", ts);
        }
        Err(_) => {
            reply.insert("atClusterTime", ts);
        }
    }
}

fn timestamp(rc: &Document, field: &str) -> MongoResult<Option<Timestamp>> {
    match rc.get(field) {
        None => Ok(None),
        Some(Bson::Timestamp(t)) if t.time == 0 && t.increment == 0 => Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("readConcern.{field} cannot be a null timestamp"),
        )),
        Some(Bson::Timestamp(t)) => Ok(Some((u64::from(t.time) << 32) | u64::from(t.increment))),
        Some(_) => Err(MongoError::type_mismatch(format!(
            "BSON field 'readConcern.{field}' is the wrong type, expected type 'timestamp'"
        ))),
    }
}

fn to_bson(t: Timestamp) -> bson::Timestamp {
    bson::Timestamp {
        time: (t >> 32) as u32,
        increment: t as u32,
    }
}

fn show(t: Timestamp) -> String {
    format!("Timestamp({}, {})", t >> 32, t as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_goes_in_the_cursor_or_at_the_top() {
        let mut find = bson::doc! {"cursor": {"firstBatch": [], "id": 0i64}, "ok": 1.0};
        stamp(&mut find, (7 << 32) | 3);
        let ts = find
            .get_document("cursor")
            .unwrap()
            .get_timestamp("atClusterTime");
        assert_eq!(
            ts.unwrap(),
            bson::Timestamp {
                time: 7,
                increment: 3
            }
        );
        let mut distinct = bson::doc! {"values": [], "ok": 1.0};
        stamp(&mut distinct, 5 << 32);
        assert!(distinct.get_timestamp("atClusterTime").is_ok());
    }

    #[test]
    fn writes_and_other_commands_are_refused() {
        let rc = bson::doc! {"level": "snapshot"};
        let e = time(None, "count", &rc, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidOptions as i32);
        let e = time(None, "find", &rc, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::IllegalOperation as i32);
    }
}
