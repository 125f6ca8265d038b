//! `aggregate` over several shards. The pipeline is cut in two: the leading stages that
//! work one document at a time (`$match`, `$project`, `$unwind`, ...), plus a `$sort`
//! (and its `$limit`) right after them, run on every shard; the rest (grouping, sorting,
//! counting, facets) runs here on what the shards sent. The router re-runs that `$sort`,
//! which merges the shards' sorted streams: when only streaming stages follow it (or
//! follow the shards' part), they run on the merged stream as the client reads it, and
//! the router holds a batch per shard, not the result. A `$group` right after the per-document
//! stages runs on the shards too, each sending its partial groups, which the router
//! folds together (`GroupTable::absorb`): the router then holds groups, not documents.
//!
//! Stages that read other collections or write (`$lookup`, `$out`, ...) would read or
//! write here what lives on one shard only, so they are refused across shards.

use bson::{doc, Bson, Document};
use query::agg::{AggContext, Blocking, Group, GroupTable, Pipeline, Stream, PARTIAL_GROUP_FIELD};
use query::expr::Variables;
use query::sort::SortSpec;
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
const GATHER_LIMIT: usize = query::memory::BLOCKING_STAGE_BYTES;
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
    let stages = desugared(&stages)?;
    let Split {
        cut,
        merge_from,
        grouped,
    } = Split::of(&stages);
    if grouped {
        cmd.insert(PARTIAL_GROUP_FIELD, true);
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
    let documents = |stages: &[Bson]| -> Vec<Document> {
        stages
            .iter()
            .filter_map(|s| s.as_document().cloned())
            .collect()
    };
    let merge = Pipeline::parse(&documents(&stages[merge_from..]))?;
    let group = match grouped {
        true => Some(group_of(&documents(&stages[cut - 1..cut]), &vars)?),
        false => None,
    };
    let allow_disk_use = cmd.get_bool("allowDiskUse").unwrap_or(false);
    cmd.insert("pipeline", stages[..cut].to_vec());
    cmd.insert("cursor", doc! {"batchSize": 1000});
    let targets = ctx.targets(&leading_filter(&cmd));
    let answers = ctx.each(&targets, &cmd).await?;
    let sources = super::cursor_sources(answers)?;
    let mut gather = MergeCursor::new(ctx.db, ctx.coll, sources, &ctx.session.peer_text);
    if group.is_none() {
        if let Some((sort, stages)) = streamable(&merge, &vars) {
            // Nothing after the shards needs its whole input: merged as it streams.
            let cursor = gather.sorted(sort).then(stages);
            return reply(ctx, cursor, batch_size).await;
        }
    }
    let docs = match &group {
        Some(group) => {
            let mut table = GroupTable::new(group, &vars);
            gather_all(&mut gather, allow_disk_use, |batch| {
                for partial in batch {
                    table.absorb(partial)?;
                }
                Ok(table.bytes())
            })
            .await?;
            table.finish()?
        }
        None => {
            let (mut docs, mut bytes) = (Vec::new(), 0usize);
            gather_all(&mut gather, allow_disk_use, |batch| {
                bytes += batch.iter().map(query::memory::approx_size).sum::<usize>();
                docs.extend(batch);
                Ok(bytes)
            })
            .await?;
            docs
        }
    };
    let merged = merge.run(docs, &Vars(vars))?;
    reply(
        ctx,
        MergeCursor::buffered(ctx.db, ctx.coll, merged),
        batch_size,
    )
    .await
}

/// The first batch of `cursor`, which is kept for `getMore` unless that was all.
async fn reply(ctx: &Ctx<'_>, mut cursor: MergeCursor, batch_size: usize) -> MongoResult<Document> {
    let batch = match cursor.next_batch(batch_size).await {
        Ok(batch) => batch,
        Err(e) => {
            cursor.kill().await;
            return Err(e);
        }
    };
    let id = super::find::finish(ctx, cursor, false).await;
    Ok(doc! {"cursor": {"firstBatch": batch, "id": id, "ns": ctx.ns()}})
}

/// What the router runs after the shards, when all of it streams: the sort that merges
/// the shards' sorted output (when they sorted) and the streaming stages after it.
/// `None` when some stage needs its whole input.
fn streamable(merge: &Pipeline, vars: &Variables) -> Option<(Option<SortSpec>, Stream)> {
    match merge.split_blocking(vars.clone()) {
        Some((Blocking::Sort { spec, .. }, after, rest)) if !rest.blocks() => {
            Some((Some(spec), after))
        }
        Some(_) => None,
        None => {
            let (stages, rest) = merge.split_streaming(vars.clone());
            (!rest.blocks()).then_some((None, stages))
        }
    }
}

/// Where a pipeline over several shards is cut: the shards run `..cut`, the router
/// `merge_from..` (a `$sort` it re-runs to merge is in both).
#[derive(Debug, PartialEq)]
struct Split {
    cut: usize,
    merge_from: usize,
    /// The shards end with a `$group`, sending partial groups.
    grouped: bool,
}

impl Split {
    fn of(stages: &[Bson]) -> Split {
        let mut cut = stages
            .iter()
            .take_while(|s| PER_DOCUMENT.contains(&stage_name(s)))
            .count();
        let mut merge_from = cut;
        let grouped = stages.get(cut).map(stage_name) == Some("$group");
        if grouped {
            cut += 1;
            merge_from = cut;
        } else if stages.get(cut).map(stage_name) == Some("$sort") {
            cut += 1;
            if stages.get(cut).map(stage_name) == Some("$limit") {
                cut += 1;
            }
        }
        Split {
            cut,
            merge_from,
            grouped,
        }
    }
}

/// The pipeline with each `$count`, `$sortByCount` and `$bucket` written as the `$group`
/// and the stage after it that it stands for (`query::agg::desugar`), so that the group
/// runs on the shards and the router holds groups, not documents.
fn desugared(stages: &[Bson]) -> MongoResult<Vec<Bson>> {
    let mut out = Vec::with_capacity(stages.len());
    for stage in stages {
        let expanded = match stage.as_document() {
            Some(d) if d.len() == 1 => {
                let (name, arg) = d.iter().next().expect("one field");
                query::agg::desugar(name, arg)?
            }
            _ => None,
        };
        match expanded {
            Some(docs) => out.extend(docs.into_iter().map(Bson::Document)),
            None => out.push(stage.clone()),
        }
    }
    Ok(out)
}

/// The `$group` of a one-stage pipeline.
fn group_of(stage: &[Document], vars: &Variables) -> MongoResult<Group> {
    match Pipeline::parse(stage)?.split_blocking(vars.clone()) {
        Some((Blocking::Group(group), _, _)) => Ok(group),
        _ => Err(MongoError::internal("a $group stage that is not one")),
    }
}

/// Reads every shard's output into `take`, which answers how many bytes it holds then.
/// Past `GATHER_LIMIT` the aggregation fails, as a blocking stage past MongoDB's 100 MB.
async fn gather_all(
    gather: &mut MergeCursor,
    allow_disk_use: bool,
    mut take: impl FnMut(Vec<Document>) -> MongoResult<usize>,
) -> MongoResult<()> {
    while !gather.exhausted() {
        let batch = gather.next_batch(usize::MAX).await?;
        if batch.is_empty() {
            break;
        }
        let held = match take(batch) {
            Ok(held) => held,
            Err(e) => {
                gather.kill().await;
                return Err(e);
            }
        };
        if held > GATHER_LIMIT {
            gather.kill().await;
            let what = "An aggregation merged at the router from several shards";
            return Err(query::memory::exceeded(what, GATHER_LIMIT, allow_disk_use));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pipeline: Bson) -> Split {
        let Bson::Array(stages) = pipeline else {
            unreachable!()
        };
        Split::of(&desugared(&stages).unwrap())
    }

    #[test]
    fn what_follows_the_shards_streams_unless_it_needs_its_whole_input() {
        let merge = |p: Bson| {
            let Bson::Array(stages) = p else {
                unreachable!()
            };
            let docs: Vec<Document> = stages
                .iter()
                .filter_map(|s| s.as_document().cloned())
                .collect();
            streamable(&Pipeline::parse(&docs).unwrap(), &Variables::default())
                .map(|(sort, _)| sort.is_some())
        };
        assert_eq!(
            merge(
                bson::bson!([{"$sort": {"a": 1}}, {"$skip": 2}, {"$limit": 3}, {"$project": {"a": 1}}])
            ),
            Some(true)
        );
        assert_eq!(
            merge(bson::bson!([{"$skip": 2}, {"$unwind": "$a"}])),
            Some(false)
        );
        assert_eq!(merge(bson::bson!([])), Some(false));
        assert_eq!(
            merge(bson::bson!([{"$sort": {"a": 1}}, {"$group": {"_id": "$a"}}])),
            None
        );
        assert_eq!(
            merge(bson::bson!([{"$limit": 3}, {"$sort": {"a": 1}}])),
            None
        );
        assert_eq!(merge(bson::bson!([{"$facet": {"f": []}}])), None);
    }

    #[test]
    fn counting_stages_group_on_the_shards() {
        for counting in [
            bson::bson!({"$count": "n"}),
            bson::bson!({"$sortByCount": "$a"}),
            bson::bson!({"$bucket": {"groupBy": "$a", "boundaries": [0, 10]}}),
            bson::bson!({"$group": {"_id": "$a"}}),
        ] {
            let plan = split(bson::bson!([{"$match": {"a": 1}}, counting.clone()]));
            let grouped = Split {
                cut: 2,
                merge_from: 2,
                grouped: true,
            };
            assert_eq!(plan, grouped, "{counting}");
        }
        let sorted = split(bson::bson!([{"$sort": {"a": 1}}, {"$limit": 3}, {"$count": "n"}]));
        assert_eq!(
            sorted,
            Split {
                cut: 2,
                merge_from: 0,
                grouped: false
            }
        );
    }
}
