//! `replSetStepUp`: this member starts an election now.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let replica = super::args::replica(ctx)?;
    let me = replica.config.me().map_err(MongoError::internal)?;
    if me.arbiter || me.priority <= 0 {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "an arbiter or a priority-0 member cannot become primary",
        ));
    }
    replica.campaign();
    Ok(doc! {})
}
