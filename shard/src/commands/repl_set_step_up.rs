//! `replSetStepUp`: this member starts an election now.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let replica = super::args::replica(ctx)?;
    if replica.config.me().map_err(MongoError::internal)?.arbiter {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "an arbiter cannot become primary",
        ));
    }
    replica.campaign();
    Ok(doc! {})
}
