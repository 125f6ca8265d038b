//! The balancer: every router runs the loop, and a lease on the config servers
//! (`config.locks`) lets one round run at a time in the cluster. A router that dies
//! mid-round leaves a lease that expires; nothing else of the balancer lives in a router.
//!
//! A round, for each sharded collection that allows balancing:
//! 1. splits chunks grown past the chunk size (`config.settings` `chunksize`), at keys
//!    the owning shard computes from the documents it holds;
//! 2. takes one step of `balance_policy` (zone splits, zone moves, draining shards,
//!    even chunk counts), moving chunks with `migrate`.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};
use wire::MongoResult;

use super::balance_policy::{next_step, Step};
use super::routing::RoutingTable;
use super::{catalog, internal, migrate, Cluster};
use crate::context::RouterState;
use crate::sharding::zones::zone_ranges;

/// How long a round may hold the lock before another router may take it over.
const LEASE: Duration = Duration::from_secs(300);
/// Chunk splits per collection per round.
const MAX_SPLITS: usize = 16;

/// Starts the balancer loop of a router serving a sharded cluster.
pub fn spawn(tasks: &TaskTracker, state: &Arc<RouterState>, shutdown: CancellationToken) {
    if state.cluster.is_none() {
        return;
    }
    let every = Duration::from_millis(state.config.balancer_interval_ms);
    let holder = format!("{}:{}", state.host, bson::oid::ObjectId::new());
    let state = state.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let Some(cluster) = state.cluster.as_ref() else {
                return;
            };
            match round(cluster, &holder).await {
                Ok(0) => {}
                Ok(steps) => info!(steps, "balancer round"),
                Err(e) => debug!(error = %e, "balancer round failed"),
            }
        }
    });
}

/// One balancer round, if the balancer is on and this router gets the lock; returns the
/// number of splits and moves made.
pub async fn round(cluster: &Cluster, holder: &str) -> MongoResult<usize> {
    if catalog::balancer_mode(&cluster.config).await? == "off" {
        return Ok(0);
    }
    if !catalog::take_balancer_lock(&cluster.config, holder, LEASE).await? {
        return Ok(0);
    }
    let steps = balance_all(cluster).await;
    let counted = catalog::count_balancer_round(&cluster.config).await;
    let released = catalog::release_balancer_lock(&cluster.config, holder).await;
    let steps = steps?;
    counted.and(released).map(|_| steps)
}

async fn balance_all(cluster: &Cluster) -> MongoResult<usize> {
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
async fn split_large(
    cluster: &Cluster,
    table: &RoutingTable,
    max_bytes: i64,
) -> MongoResult<usize> {
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
        let size = super::scatter::number(&stats, "size");
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
