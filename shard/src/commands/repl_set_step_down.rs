//! `replSetStepDown`: the primary hands leadership to the most caught-up other data
//! member (a Raft leadership transfer, so no write is lost and no election timeout is
//! waited out).

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let replica = super::args::replica(ctx)?;
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
    replica.transfer_leader(target);
    Ok(doc! {})
}
