//! `find`: filter, projection, sort, skip, limit, batchSize, singleBatch, hint.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{
    batch_reply, collection_name, existing_to_read, ns, opt_bool, opt_count, opt_doc, opt_i64,
};
use crate::execution::cursor::DEFAULT_FIRST_BATCH;
use crate::execution::read::{open_find, FindArgs};
use crate::node::Ctx;

/// `find` options MongoDB has and Bulwark does not implement: refused, never ignored (an
/// ignored `min` or `$natural` order would quietly return other documents or order, an
/// ignored `noCursorTimeout` would let the idle cursor be closed under a long job).
const UNSUPPORTED: &[&str] = &["min", "max", "returnKey", "showRecordId", "noCursorTimeout"];

fn refuse_unsupported(cmd: &Document) -> MongoResult<()> {
    super::unsupported::check_collation(cmd.get("collation"))?;
    let set = |v: &Bson| !matches!(v, Bson::Boolean(false) | Bson::Null);
    if let Some(k) = UNSUPPORTED.iter().find(|k| cmd.get(**k).is_some_and(set)) {
        return Err(MongoError::new(
            ErrorCode::NotImplemented,
            format!("find's '{k}' option is not supported"),
        ));
    }
    if opt_doc(cmd, "sort")?.is_some_and(|s| s.contains_key("$natural")) {
        return Err(MongoError::new(
            ErrorCode::NotImplemented,
            "sorting by $natural is not supported",
        ));
    }
    Ok(())
}

pub fn parse(ctx: &Ctx, cmd: &Document) -> MongoResult<FindArgs> {
    refuse_unsupported(cmd)?;
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
        disk: ctx.disk_use(opt_bool(cmd, "allowDiskUse")?.unwrap_or(false)),
    })
}

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let args = parse(ctx, cmd)?;
    let batch_size = opt_count(cmd, "batchSize")?.map(|b| b as usize);
    let single_batch = opt_bool(cmd, "singleBatch")?.unwrap_or(false);
    let ns = ns(ctx, coll);
    let Some(meta) = existing_to_read(ctx, coll)? else {
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
        ctx.at_time(Box::new(cursor)),
        None,
        max,
        single,
        &ctx.deadline,
    )
}
