//! `find` over several shards: each shard gets the filter and sort, `skip + limit` as its
//! limit and no skip; the router merges their cursors (`merge_cursor.rs`) and applies
//! skip and limit. When a projection could drop the sort fields, it is applied here,
//! after the merge.

use bson::{doc, Document};
use query::projection::Projection;
use query::sort::SortSpec;
use wire::MongoResult;

use super::{count_arg, Ctx};
use crate::sharding::merge_cursor::MergeCursor;

/// A first batch's size when the client gives none (MongoDB's default).
const DEFAULT_BATCH: i64 = 101;

pub async fn run(ctx: &Ctx<'_>, mut cmd: Document) -> MongoResult<Document> {
    if cmd.get_bool("tailable").unwrap_or(false) {
        return Err(wire::MongoError::new(
            wire::ErrorCode::IllegalOperation,
            format!(
                "tailable cursors need a capped collection, and {} is sharded",
                ctx.table.ns
            ),
        ));
    }
    let filter = cmd.get_document("filter").cloned().unwrap_or_default();
    let shards = ctx.targets(&filter);
    let skip = count_arg(&cmd, "skip")?.unwrap_or(0).max(0) as u64;
    let raw_limit = count_arg(&cmd, "limit")?.unwrap_or(0);
    let limit = (raw_limit != 0).then_some(raw_limit.unsigned_abs());
    let single_batch = cmd.get_bool("singleBatch").unwrap_or(false) || raw_limit < 0;
    let batch_size = count_arg(&cmd, "batchSize")?
        .unwrap_or(DEFAULT_BATCH)
        .max(0) as usize;
    let sort = match cmd.get_document("sort") {
        Ok(s) if !s.is_empty() => Some(SortSpec::new(s)?),
        _ => None,
    };
    let projection = match (&sort, cmd.get_document("projection")) {
        (Some(_), Ok(p)) if !p.is_empty() => {
            let p = Projection::new(p)?;
            cmd.remove("projection");
            Some(p)
        }
        _ => None,
    };
    cmd.remove("skip");
    if let Some(l) = limit {
        cmd.insert("limit", (l + skip) as i64);
    }
    let answers = ctx.each(&shards, &cmd).await?;
    let sources = super::cursor_sources(answers)?;
    let mut cursor = MergeCursor::new(ctx.db, ctx.coll, sources, &ctx.session.peer_text)
        .sorted(sort)
        .projected(projection)
        .skip_limit(skip, limit);
    let batch = cursor.next_batch(batch_size).await?;
    let id = finish(ctx, cursor, single_batch).await;
    Ok(doc! {"cursor": {"firstBatch": batch, "id": id, "ns": ctx.ns()}})
}

/// Keeps `cursor` for `getMore` unless it is done: its id, or 0.
pub async fn finish(ctx: &Ctx<'_>, mut cursor: MergeCursor, single_batch: bool) -> i64 {
    if single_batch || cursor.exhausted() {
        cursor.kill().await;
        return 0;
    }
    ctx.session.state.cursors.opened_merged(
        crate::cursors::Held::Merge(cursor),
        ctx.session.auth.owner(),
    )
}
