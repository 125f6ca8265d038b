//! The balancer: the config server primary runs a round every `balancer_interval_ms`
//! (`Settings`), so one round runs at a time in the cluster, and a round cut short by a
//! failover leaves nothing a router must clean up. For `balancerStatus` it marks
//! `config.locks` `{_id: "balancer"}` while a round runs.
//!
//! A round, for each sharded collection that allows balancing:
//! 1. splits chunks grown past the chunk size (`config.settings` `chunksize`), at keys
//!    the owning shard computes from the documents it holds;
//! 2. takes one step of `balance_policy` (zone splits, zone moves, draining shards,
//!    even chunk counts), moving chunks with `migrate`.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use router::sharding::catalog::{self, call, delete};
use router::sharding::routing::RoutingTable;
use router::sharding::{internal, scatter};
use tracing::{debug, info};
use wire::MongoResult;

use crate::balance_policy::{next_step, Step};
use crate::context::Ctx;
use crate::migrate;
use crate::term::Term;
use crate::zones::zone_ranges;

/// Chunk splits per collection per round.
const MAX_SPLITS: usize = 16;

/// How often the loop looks at the interval, which may change while it waits.
const TICK: Duration = Duration::from_millis(100);

/// Runs a round every `settings.balancer_interval()` until `stop`.
pub fn spawn(term: &Term) {
    let (ctx, settings, stop) = (term.ctx.clone(), term.settings.clone(), term.stop.clone());
    term.tasks.spawn(async move {
        let mut last = Instant::now();
        loop {
            let pause = settings.balancer_interval().min(TICK);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            if last.elapsed() < settings.balancer_interval() || settings.paused() {
                continue;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                done = round(&ctx) => match done {
                    Ok(0) => {}
                    Ok(steps) => info!(steps, "balancer round"),
                    Err(e) => debug!(error = %e, "balancer round failed"),
                },
            }
            last = Instant::now();
        }
    });
}

/// One balancer round, if the balancer is on; returns the number of splits and moves
/// made.
pub async fn round(ctx: &Ctx) -> MongoResult<usize> {
    if catalog::balancer_mode(&ctx.config).await? == "off" {
        return Ok(0);
    }
    let mark = doc! {"q": {"_id": "balancer"}, "u": {"_id": "balancer", "started": bson::DateTime::now()}, "upsert": true};
    call(
        &ctx.config,
        doc! {"update": "locks", "updates": [mark]},
        true,
    )
    .await?;
    let steps = balance_all(ctx).await;
    let counted = catalog::count_balancer_round(&ctx.config).await;
    let unmarked = clear_mark(ctx).await;
    let steps = steps?;
    counted.and(unmarked).map(|_| steps)
}

/// Removes the mark of a round (this primary's, or one a former primary left).
pub async fn clear_mark(ctx: &Ctx) -> MongoResult<()> {
    delete(&ctx.config, "locks", doc! {"_id": "balancer"}).await
}

async fn balance_all(cluster: &Ctx) -> MongoResult<usize> {
    let shard_docs = catalog::shards(&cluster.config).await?;
    let name = |d: &Document| d.get_str("_id").unwrap_or_default().to_string();
    let shards: Vec<String> = shard_docs.iter().map(name).collect();
    let draining: Vec<String> = shard_docs
        .iter()
        .filter(|d| d.get_bool("draining") == Ok(true))
        .map(name)
        .collect();
    let max_bytes = catalog::max_chunk_bytes(&cluster.config).await?;
    let colls = catalog::find_all(
        &cluster.config,
        "config",
        "collections",
        doc! {"noBalance": {"$ne": true}},
    )
    .await?;
    let mut steps = 0;
    for coll in colls {
        let Ok(ns) = coll.get_str("_id") else {
            continue;
        };
        let Some(table) = cluster.refresh(ns).await? else {
            continue;
        };
        let splits = split_large(cluster, &table, max_bytes).await?;
        steps += splits;
        let table = match splits {
            0 => table,
            _ => match cluster.refresh(ns).await? {
                Some(t) => t,
                None => continue,
            },
        };
        let zones = zone_ranges(cluster, ns, &table.key).await?;
        match next_step(&table.chunks, &shards, &draining, &zones) {
            None => {}
            Some(Step::Split { chunk_min, at }) => {
                let chunk = table.chunk_for_key(&chunk_min).clone();
                catalog::split_chunk(&cluster.config, &table, &chunk, &at).await?;
                if let Some(t) = cluster.refresh(ns).await? {
                    cluster.publish(&t).await?;
                }
                steps += 1;
            }
            Some(Step::Move { chunk_min, to }) => {
                migrate::move_range(cluster, ns, &chunk_min, None, &to).await?;
                steps += 1;
            }
        }
    }
    Ok(steps)
}

/// Splits the chunks of `table` holding more than `max_bytes`, on shards whose chunks
/// average at least half that (the others cannot have one so large). Returns the splits.
async fn split_large(cluster: &Ctx, table: &RoutingTable, max_bytes: i64) -> MongoResult<usize> {
    let (db, coll) = table.ns.split_once('.').unwrap_or((&table.ns, ""));
    let mut splits = 0;
    for shard_name in table.all_shards() {
        let shard = cluster.shard(&shard_name).await?;
        let mine: Vec<_> = table
            .chunks
            .iter()
            .filter(|c| c.shard == shard_name)
            .collect();
        let stats = internal(&shard.handle, db, &doc! {"collStats": coll}, false).await?;
        let size = scatter::number(&stats, "size");
        if size < max_bytes || size / (mine.len() as i64).max(1) < max_bytes / 2 {
            continue;
        }
        for chunk in mine {
            let cmd = doc! {
                "_shardsvrSplitPoints": coll,
                "min": chunk.min.clone(), "max": chunk.max.clone(), "maxBytes": max_bytes,
            };
            let reply = internal(&shard.handle, db, &cmd, true).await?;
            let points = reply.get_array("points").cloned().unwrap_or_default();
            // Split from the top down: each split leaves the lower part starting where
            // the chunk did, so the next point is still inside it.
            for point in points.iter().rev() {
                let Some(at) = point.as_array() else {
                    continue;
                };
                if splits >= MAX_SPLITS {
                    return Ok(splits);
                }
                let current = cluster.refresh(&table.ns).await?;
                let Some(current) = current else {
                    return Ok(splits);
                };
                let holder = current.chunk_for_key(at).clone();
                if holder.min == *at {
                    continue;
                }
                catalog::split_chunk(&cluster.config, &current, &holder, at).await?;
                splits += 1;
                debug!(ns = %table.ns, "split a chunk grown past the chunk size");
            }
        }
    }
    if splits > 0 {
        if let Some(t) = cluster.refresh(&table.ns).await? {
            cluster.publish(&t).await?;
        }
    }
    Ok(splits)
}
