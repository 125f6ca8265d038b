//! `count`: the number of documents matching a query, after skip and limit.

use bson::{doc, Document};
use wire::MongoResult;

use super::args::{collection_name, existing, opt_count, opt_doc, opt_i64};
use crate::execution::cursor::CursorSource;
use crate::execution::read::{open_find, FindArgs};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    super::unsupported::check_collation(cmd.get("collation"))?;
    let coll = collection_name(cmd)?;
    let filter = opt_doc(cmd, "query")?.cloned().unwrap_or_default();
    let skip = opt_count(cmd, "skip")?.unwrap_or(0);
    // A negative limit counts like its absolute value (legacy shell behaviour).
    let limit = opt_i64(cmd, "limit")?
        .map(|l| l.unsigned_abs())
        .filter(|&l| l > 0);
    let Some(meta) = existing(ctx, coll) else {
        query::matcher::Matcher::new(&filter)?;
        return Ok(doc! {"n": 0, "ok": 1.0});
    };
    ctx.check_read(&meta)?;
    let hint = super::args::opt_hint(cmd);
    let args = FindArgs {
        filter,
        skip,
        limit,
        hint,
        ..Default::default()
    };
    let (mut cursor, _) = open_find(&meta, &args)?;
    let mut n = 0i64;
    loop {
        let batch = cursor.next_batch(ctx.engine, 4096, &ctx.deadline)?;
        n += batch.len() as i64;
        if batch.is_empty() || cursor.exhausted() {
            break;
        }
    }
    Ok(doc! {"n": n as i32, "ok": 1.0})
}
