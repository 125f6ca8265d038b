//! `replSetStepDown`: the primary hands leadership to the most caught-up other data
//! member (a Raft leadership transfer, so no write is lost and no election timeout is
//! waited out).

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;

/// MongoDB's default `stepDownSecs`: the old primary stays out of elections this long.
const DEFAULT_STEP_DOWN_SECS: i64 = 60;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let replica = super::args::replica(ctx)?;
    // `replSetStepDown: <stepDownSecs>`, as the shell's rs.stepDown(secs) sends it.
    let secs = match cmd.get("replSetStepDown") {
        Some(Bson::Boolean(true)) | None => DEFAULT_STEP_DOWN_SECS,
        v => super::repl_set_freeze::seconds(v, "stepDownSecs")?,
    };
    let status = replica.status();
    if status.role != raft::StateRole::Leader {
        return Err(MongoError::new(
            ErrorCode::NotWritablePrimary,
            "not primary so can't step down",
        ));
    }
    let config = &replica.config;
    let target = status
        .matched
        .iter()
        .filter(|(id, _, active)| {
            *active
                && *id != config.me
                && config
                    .members
                    .iter()
                    .any(|m| m.id == *id && !m.arbiter && m.votes > 0 && m.priority > 0)
        })
        .max_by_key(|(_, matched, _)| *matched)
        .map(|(id, _, _)| *id)
        .ok_or_else(|| {
            MongoError::new(
                ErrorCode::ExceededTimeLimit,
                "No electable secondaries caught up",
            )
        })?;
    // Frozen first, so neither the new primary's priority takeover nor an election hands
    // leadership straight back.
    replica.freeze(Some(Instant::now() + Duration::from_secs(secs as u64)));
    replica.transfer_leader(target);
    Ok(doc! {})
}
