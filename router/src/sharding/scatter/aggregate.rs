//! `aggregate` over several shards. The pipeline is cut in two: the leading stages that
//! work one document at a time (`$match`, `$project`, `$unwind`, ...), plus a `$sort`
//! (and its `$limit`) right after them, run on every shard; the rest (grouping, sorting,
//! counting, facets) runs here on what the shards sent. The router re-runs that `$sort`,
//! which merges the shards' sorted streams.
//!
//! Stages that read other collections or write (`$lookup`, `$out`, ...) would read or
//! write here what lives on one shard only, so they are refused across shards.

use bson::{doc, Bson, Document};
use query::agg::{AggContext, Pipeline};
use query::expr::Variables;
use wire::{ErrorCode, MongoError, MongoResult};

use super::{count_arg, Ctx};
use crate::sharding::merge_cursor::MergeCursor;

/// Stages a shard can run alone: each looks at one document at a time.
const PER_DOCUMENT: &[&str] = &[
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$unset",
    "$unwind",
    "$replaceRoot",
    "$replaceWith",
    "$redact",
];
/// Stages that need other collections, or write, on one shard.
const SINGLE_SHARD_ONLY: &[&str] = &[
    "$lookup",
    "$graphLookup",
    "$unionWith",
    "$out",
    "$merge",
    "$geoNear",
    "$collStats",
    "$indexStats",
    "$changeStream",
];
/// What the router gathers from the shards for one aggregation, at most (MongoDB's
/// per-stage limit without `allowDiskUse`).
const GATHER_LIMIT: usize = 100 * 1024 * 1024;
const DEFAULT_BATCH: i64 = 101;

/// The name of a stage (its only key).
pub fn stage_name(stage: &Bson) -> &str {
    stage
        .as_document()
        .and_then(|d| d.keys().next())
        .map_or("", String::as_str)
}

/// Whether `pipeline` may run on any single shard as it is.
pub fn shard_local(pipeline: &[Bson]) -> bool {
    !pipeline
        .iter()
        .any(|s| SINGLE_SHARD_ONLY.contains(&stage_name(s)))
}

/// The filter of a leading `$match`, which decides the shards.
pub fn leading_filter(cmd: &Document) -> Document {
    cmd.get_array("pipeline")
        .ok()
        .and_then(|p| p.first())
        .and_then(Bson::as_document)
        .and_then(|s| s.get_document("$match").ok())
        .cloned()
        .unwrap_or_default()
}

struct Vars(Variables);

impl AggContext for Vars {
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>> {
        Err(MongoError::internal(format!(
            "the router cannot read {coll} for a merged aggregation"
        )))
    }
    fn variables(&self) -> Variables {
        self.0.clone()
    }
}

pub async fn run(ctx: &Ctx<'_>, mut cmd: Document) -> MongoResult<Document> {
    if cmd.get_bool("explain").unwrap_or(false) {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "aggregate with explain over several shards is not supported yet; use the explain command",
        ));
    }
    let stages = cmd.get_array("pipeline").cloned().unwrap_or_default();
    if let Some(s) = stages
        .iter()
        .find(|s| SINGLE_SHARD_ONLY.contains(&stage_name(s)))
    {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            format!(
                "{} over a sharded collection spanning several shards ({}) is not supported yet",
                stage_name(s),
                ctx.table.ns
            ),
        ));
    }
    let mut cut = stages
        .iter()
        .take_while(|s| PER_DOCUMENT.contains(&stage_name(s)))
        .count();
    let merge_from = cut;
    if stages.get(cut).map(stage_name) == Some("$sort") {
        cut += 1;
        if stages.get(cut).map(stage_name) == Some("$limit") {
            cut += 1;
        }
    }
    let batch_size = cmd
        .get_document("cursor")
        .ok()
        .map(|c| count_arg(c, "batchSize"))
        .transpose()?
        .flatten()
        .unwrap_or(DEFAULT_BATCH)
        .max(0) as usize;
    let mut vars = Variables::default();
    if let Ok(spec) = cmd.get_document("let") {
        vars.bind_let(spec, &Document::new())?;
    }
    vars.pin_now();
    let merge = Pipeline::parse(
        &stages[merge_from..]
            .iter()
            .filter_map(|s| s.as_document().cloned())
            .collect::<Vec<_>>(),
    )?;
    cmd.insert("pipeline", stages[..cut].to_vec());
    cmd.insert("cursor", doc! {"batchSize": 1000});
    let targets = ctx.targets(&leading_filter(&cmd));
    let answers = ctx.each(&targets, &cmd).await?;
    let sources = super::cursor_sources(answers)?;
    let mut gather = MergeCursor::new(ctx.db, ctx.coll, sources, &ctx.session.peer_text);
    let mut docs = Vec::new();
    let mut bytes = 0usize;
    while !gather.exhausted() {
        let batch = gather.next_batch(usize::MAX).await?;
        if batch.is_empty() {
            break;
        }
        bytes += batch
            .iter()
            .map(|d| bson::to_vec(d).map_or(0, |v| v.len()))
            .sum::<usize>();
        if bytes > GATHER_LIMIT {
            gather.kill().await;
            return Err(MongoError::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!(
                    "a merged aggregation over several shards gathered more than {} MB at the router",
                    GATHER_LIMIT >> 20
                ),
            ));
        }
        docs.extend(batch);
    }
    let merged = merge.run(docs, &Vars(vars))?;
    let mut cursor = MergeCursor::buffered(ctx.db, ctx.coll, merged);
    let batch = cursor.next_batch(batch_size).await?;
    let id = super::find::finish(ctx, cursor, false).await;
    Ok(doc! {"cursor": {"firstBatch": batch, "id": id, "ns": ctx.ns()}})
}
