//! `getMore`: the next batch of an open cursor.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::batch_reply;
use super::args::{opt_count, type_name};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(v) => {
            return Err(MongoError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                type_name(v)
            )))
        }
        None => return Err(MongoError::failed_to_parse("missing cursor id")),
    };
    let coll = match cmd.get("collection") {
        Some(Bson::String(c)) => c,
        Some(v) => {
            return Err(MongoError::type_mismatch(format!(
                "BSON field 'getMore.collection' is the wrong type '{}', expected type 'string'",
                type_name(v)
            )))
        }
        None => {
            return Err(MongoError::failed_to_parse(
                "BSON field 'getMore.collection' is missing but a required field",
            ))
        }
    };
    let max = opt_count(cmd, "batchSize")?
        .filter(|&b| b > 0)
        .map(|b| b as usize)
        .unwrap_or(usize::MAX);
    let ns = format!("{}.{}", ctx.db, coll);
    let source = ctx.node.cursors.take(id, &ns)?;
    batch_reply(ctx.node, &ns, source, Some(id), max, false, &ctx.deadline)
}
