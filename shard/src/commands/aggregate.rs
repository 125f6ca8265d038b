//! `aggregate`: run a pipeline over a collection (or `aggregate: 1` sources such as
//! `$documents`). A leading `$match` uses the planner; `$collStats` reads storage stats;
//! `$out`/`$merge` write their results here.

use std::collections::VecDeque;

use bson::{doc, Bson, Document};
use query::agg::{AggContext, Blocking, Emit, Pipeline, PARTIAL_GROUP_FIELD};
use query::expr::Variables;
use query::memory::MemoryBudget;
use wire::{MongoError, MongoResult};

use super::args::{
    cursor_reply, existing, existing_to_read, materialized_reply, opt_bool, opt_doc,
};
use crate::execution::cursor::CursorSource;
use crate::execution::cursor::DEFAULT_FIRST_BATCH;
use crate::execution::pipeline_cursor::{drain_bounded, PipelineCursor};
use crate::execution::read::{open_find, FindArgs};
use crate::execution::spill::{group_all, sample_all, sort_all, SortedSource};
use crate::node::Ctx;

struct ShardAggContext<'a, 'b> {
    ctx: &'a Ctx<'b>,
    vars: Variables,
    allow_disk_use: bool,
}

impl AggContext for ShardAggContext<'_, '_> {
    /// Another collection, whole, within a blocking stage's memory.
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>> {
        let Some(meta) = existing_to_read(self.ctx, coll)? else {
            return Ok(Vec::new());
        };
        let (mut scan, _) = open_find(&meta, &FindArgs::default())?;
        let budget = MemoryBudget::new("Reading another collection", self.allow_disk_use);
        drain_bounded(&mut scan, self.ctx.engine, &self.ctx.deadline, budget)
    }

    fn variables(&self) -> Variables {
        self.vars.clone()
    }
}

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    super::unsupported::check_collation(cmd.get("collation"))?;
    let coll =
        match cmd.get("aggregate") {
            Some(Bson::String(s)) if !s.is_empty() => Some(s.as_str()),
            Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(1.0)) => None,
            _ => return Err(MongoError::new(
                wire::ErrorCode::InvalidNamespace,
                "Invalid aggregate namespace: the 'aggregate' field must be a collection name or 1",
            )),
        };
    let stages = query::agg::command_stages(cmd)?;
    if query::change_stream::opens_stream(&stages)? {
        return crate::change_stream::open(ctx, cmd, coll, &stages);
    }
    let explain = matches!(cmd.get("explain"), Some(Bson::Boolean(true)));
    let cursor_opts = opt_doc(cmd, "cursor")?;
    if cursor_opts.is_none() && !explain {
        return Err(MongoError::failed_to_parse(
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    }

    // $collStats must be first and reads storage, not documents.
    let mut input: Vec<Document> = Vec::new();
    let mut skip_first = false;
    if let Some(first) = stages.first() {
        if let Some(Bson::Document(spec)) = first.get("$collStats") {
            let meta = coll.and_then(|c| existing(ctx, c)).ok_or_else(|| {
                MongoError::new(
                    wire::ErrorCode::NamespaceNotFound,
                    "Unable to retrieve storageStats in $collStats stage",
                )
            })?;
            let mut out =
                doc! {"ns": meta.ns(), "host": "bulwark-shard", "localTime": bson::DateTime::now()};
            let stats = super::coll_stats::storage_stats(ctx, &meta)?;
            if spec.contains_key("storageStats") {
                out.insert("storageStats", stats.clone());
            }
            if spec.contains_key("count") {
                out.insert(
                    "count",
                    doc! {"count": stats.get("count").cloned().unwrap_or(Bson::Int64(0))},
                );
            }
            input.push(out);
            skip_first = true;
        }
    }
    let allow_disk_use = opt_bool(cmd, "allowDiskUse")?.unwrap_or(false);
    let mut pipeline = Pipeline::parse(if skip_first {
        &stages[1..]
    } else {
        &stages[..]
    })?;
    let vars = super::args::let_vars(cmd)?.unwrap_or_else(|| {
        let mut v = Variables::default();
        v.pin_now();
        v
    });
    if !skip_first {
        if let Some(c) = coll {
            if let Some(meta) = existing_to_read(ctx, c)? {
                ctx.check_read(&meta)?;
                let filter = pipeline.leading_match().cloned().unwrap_or_default();
                let hint = super::args::opt_hint(cmd);
                let args = FindArgs {
                    filter,
                    hint,
                    vars: Some(vars.clone()),
                    ..Default::default()
                };
                let (scan, _) = open_find(&meta, &args)?;
                let (stream, rest) = pipeline.split_streaming(vars.clone());
                let source = PipelineCursor::new(Box::new(scan), stream);
                let partial = opt_bool(cmd, PARTIAL_GROUP_FIELD)?.unwrap_or(false);
                let how = (&vars, allow_disk_use, partial);
                let (mut source, rest) = run_blocking(ctx, Box::new(source), rest, how)?;
                if !rest.blocks() {
                    // Nothing needs the whole input: the cursor streams from storage.
                    let ns = format!("{}.{c}", ctx.db);
                    return cursor_reply(ctx, cmd, &ns, source, DEFAULT_FIRST_BATCH);
                }
                let budget = MemoryBudget::new(rest.first_stage_name(), allow_disk_use);
                input = drain_bounded(source.as_mut(), ctx.engine, &ctx.deadline, budget)?;
                pipeline = rest;
            }
        }
    }
    let agg_ctx = ShardAggContext {
        ctx,
        vars,
        allow_disk_use,
    };
    let results = pipeline.run(input, &agg_ctx)?;
    ctx.deadline.check()?;
    let results = super::aggregate_output::write(ctx, &pipeline, results)?;
    let ns = format!("{}.{}", ctx.db, coll.unwrap_or("$cmd.aggregate"));
    materialized_reply(ctx, cmd, &ns, VecDeque::from(results), DEFAULT_FIRST_BATCH)
}

/// Runs the leading `$sort`s, `$group`s and `$sample`s of `rest` over `source`, each within its own
/// memory (spilling with `allowDiskUse`), with the streaming stages after each reading
/// from its output. Returns the stream and the stages still to run in memory. With
/// `partial` (the router's `PARTIAL_GROUP_FIELD`) the pipeline must end with a `$group`,
/// whose partial groups are the output.
fn run_blocking(
    ctx: &Ctx,
    mut source: Box<dyn CursorSource>,
    mut rest: Pipeline,
    (vars, allow_disk_use, partial): (&Variables, bool, bool),
) -> MongoResult<(Box<dyn CursorSource>, Pipeline)> {
    let disk = ctx.disk_use(allow_disk_use);
    let mut partials_out = false;
    while let Some((blocking, after, remaining)) = rest.split_blocking(vars.clone()) {
        let (engine, deadline) = (ctx.engine, &ctx.deadline);
        let output: Box<dyn CursorSource> = match blocking {
            Blocking::Sort { spec, top } => {
                let sorted = sort_all(source.as_mut(), engine, deadline, &spec, top, &disk)?;
                Box::new(SortedSource::new(sorted, spec))
            }
            Blocking::Group(group) => {
                let last = after.is_empty() && !remaining.blocks();
                partials_out = partial && last;
                let emit = if partials_out {
                    Emit::Partial
                } else {
                    Emit::Output
                };
                group_all(
                    source.as_mut(),
                    engine,
                    deadline,
                    (&group, vars, emit),
                    &disk,
                )?
            }
            Blocking::Sample(n) => {
                sample_all(source.as_mut(), (engine, deadline), n, allow_disk_use)?
            }
        };
        source = Box::new(PipelineCursor::new(output, after));
        rest = remaining;
    }
    if partial && !partials_out {
        return Err(MongoError::bad_value(format!(
            "{PARTIAL_GROUP_FIELD} needs a pipeline that ends with a $group"
        )));
    }
    Ok((source, rest))
}
