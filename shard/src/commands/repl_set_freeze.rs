//! `replSetFreeze: N`: this secondary does not seek to become primary for N seconds
//! (0 thaws it). Refused on the primary, as MongoDB does.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;

/// MongoDB's upper bound on a freeze (and on `stepDownSecs`).
pub const MAX_FREEZE_SECS: i64 = 365 * 24 * 3600;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let replica = super::args::replica(ctx)?;
    let secs = seconds(cmd.get("replSetFreeze"), "replSetFreeze")?;
    if replica.status().role == raft::StateRole::Leader {
        return Err(MongoError::new(
            ErrorCode::NotSecondary,
            "cannot freeze node when primary or running for election. state: Primary",
        ));
    }
    if secs == 0 {
        replica.freeze(None);
        return Ok(doc! {"info": "unfreezing"});
    }
    replica.freeze(Some(Instant::now() + Duration::from_secs(secs as u64)));
    Ok(doc! {})
}

/// A non-negative whole number of seconds.
pub fn seconds(v: Option<&Bson>, field: &str) -> MongoResult<i64> {
    let n = match v {
        Some(Bson::Int32(n)) => *n as i64,
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) if f.fract() == 0.0 => *f as i64,
        _ => {
            return Err(MongoError::type_mismatch(format!(
                "{field} must be a number of seconds"
            )))
        }
    };
    if !(0..=MAX_FREEZE_SECS).contains(&n) {
        return Err(MongoError::bad_value(format!(
            "{field} must be between 0 and {MAX_FREEZE_SECS} seconds"
        )));
    }
    Ok(n)
}
