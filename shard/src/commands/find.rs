//! `find`: filter, projection, sort, skip, limit, batchSize, singleBatch, hint.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::{collection_name, existing, ns, opt_bool, opt_count, opt_doc, opt_i64};
use crate::cursor::{batch_reply, DEFAULT_FIRST_BATCH};
use crate::node::Ctx;
use crate::read::{open_find, FindArgs};

pub fn parse(cmd: &Document) -> MongoResult<FindArgs> {
    if let Some(Bson::Boolean(true)) = cmd.get("tailable") {
        return Err(MongoError::bad_value(
            "error processing query: tailable cursor requested on non capped collection",
        ));
    }
    let limit = match opt_i64(cmd, "limit")? {
        Some(n) if n < 0 => {
            return Err(MongoError::bad_value(format!(
                "limit value must be non-negative, but received: {n}"
            )))
        }
        other => other.map(|n| n as u64),
    };
    Ok(FindArgs {
        filter: opt_doc(cmd, "filter")?.cloned().unwrap_or_default(),
        sort: opt_doc(cmd, "sort")?.cloned(),
        projection: opt_doc(cmd, "projection")?.cloned(),
        skip: opt_count(cmd, "skip")?.unwrap_or(0),
        limit,
        hint: super::args::opt_hint(cmd),
        vars: super::args::let_vars(cmd)?,
    })
}

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let args = parse(cmd)?;
    let batch_size = opt_count(cmd, "batchSize")?.map(|b| b as usize);
    let single_batch = opt_bool(cmd, "singleBatch")?.unwrap_or(false);
    let ns = ns(ctx, coll);
    let Some(meta) = existing(ctx, coll) else {
        // Still validate the filter so that bad input errors even on a missing collection.
        query::matcher::Matcher::new(&args.filter)?;
        return Ok(doc! {"cursor": {"firstBatch": [], "id": 0i64, "ns": ns}, "ok": 1.0});
    };
    ctx.check_read(&meta)?;
    let (cursor, _) = open_find(&meta, &args)?;
    let max = batch_size.unwrap_or(DEFAULT_FIRST_BATCH);
    let single = single_batch
        || args
            .limit
            .is_some_and(|l| l > 0 && l as usize <= max && batch_size.is_none());
    batch_reply(
        ctx.node,
        &ns,
        Box::new(cursor),
        None,
        max,
        single,
        &ctx.deadline,
    )
}
