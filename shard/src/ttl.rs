//! Background work of a node: the TTL monitor (documents really expire, and with it the
//! pruning of idle sessions and of orphaned transaction parts), the range deleter (ranges
//! a migration moved away, once no reader needs them) and the reaper of idle cursors.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::control::deadline::Deadline;
use crate::execution::read::{collect, FindArgs};
use crate::execution::write_path::delete_document;
use crate::migrations::range_deleter;
use crate::Node;

pub fn spawn_background(
    node: Arc<Node>,
    ttl_interval: Duration,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ttl = tokio::time::interval(ttl_interval);
        let mut reap = tokio::time::interval(
            Duration::from_secs(1)
                .max(node.cursors.idle_timeout / 10)
                .min(Duration::from_secs(60)),
        );
        let mut ranges = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ranges.tick() => {
                    let n = node.clone();
                    blocking_pass("range deleter", move || range_deleter::run_pending(&n)).await;
                }
                _ = ttl.tick() => {
                    let n = node.clone();
                    blocking_pass("TTL monitor", move || {
                        Ok(expire_once(&n)? + prune_sessions(&n)? + sweep_txn_parts(&n)?)
                    })
                    .await;
                }
                _ = reap.tick() => {
                    let closed = node.cursors.reap();
                    if closed > 0 {
                        debug!(closed, "closed idle cursors");
                    }
                }
            }
        }
    })
}

/// Runs one pass of background work off the async threads; logs what it deleted or why it
/// failed.
async fn blocking_pass<F>(what: &'static str, pass: F)
where
    F: FnOnce() -> wire::MongoResult<usize> + Send + 'static,
{
    match tokio::task::spawn_blocking(pass).await {
        Ok(Ok(0)) => {}
        Ok(Ok(k)) => debug!(deleted = k, "{what} pass"),
        Ok(Err(e)) => warn!(error = %e, "{what} pass failed"),
        Err(e) => warn!(error = %e, "{what} task failed"),
    }
}

/// Deletes the records of sessions idle longer than `retry::SESSION_TIMEOUT` (on the
/// primary; the deletions replicate). Returns how many.
pub fn prune_sessions(node: &Node) -> wire::MongoResult<usize> {
    if node.replica.as_ref().is_some_and(|r| !r.status().writable) {
        return Ok(0);
    }
    let cutoff = bson::DateTime::from_millis(
        bson::DateTime::now().timestamp_millis()
            - crate::sessions::retry::SESSION_TIMEOUT.as_millis() as i64,
    );
    crate::sessions::retry::prune(node.engine.as_ref(), &node.sessions, cutoff)
}

/// Deletes the parts of transactions a former primary split over several entries and
/// never finished (`repl::txn_parts`). Returns how many.
fn sweep_txn_parts(node: &Node) -> wire::MongoResult<usize> {
    match node.replica.as_deref() {
        Some(replica) => crate::repl::txn_parts::sweep(replica, node.engine.as_ref()),
        None => Ok(0),
    }
}

/// Deletes every document whose TTL-indexed date is older than its expiry. Returns how many.
pub fn expire_once(node: &Node) -> wire::MongoResult<usize> {
    // Only the primary deletes; the deletions replicate to the other members.
    if node.replica.as_ref().is_some_and(|r| !r.status().writable) {
        return Ok(0);
    }
    let now = bson::DateTime::now().timestamp_millis();
    let mut deleted = 0;
    for db in node.catalog.databases() {
        for meta in node.catalog.list(&db) {
            for index in meta
                .indexes
                .iter()
                .filter(|i| i.expire_after_seconds.is_some() && i.fields.len() == 1)
            {
                let secs = index.expire_after_seconds.unwrap_or(0);
                let cutoff =
                    bson::DateTime::from_millis(now.saturating_sub(secs.saturating_mul(1000)));
                let field = &index.fields[0].0;
                let args = FindArgs {
                    filter: doc! {field.clone(): {"$lt": cutoff}},
                    hint: Some(Bson::String(index.name.clone())),
                    ..Default::default()
                };
                let lock = meta.write_lock.clone();
                let _guard = node.catalog.exclusive(&lock);
                let current = node.catalog.get(&meta.ns()).unwrap_or(meta.clone());
                for d in collect(node.engine.as_ref(), &current, &args, &Deadline::default())? {
                    delete_document(node.engine.as_ref(), &current, &d)?;
                    deleted += 1;
                }
            }
        }
    }
    Ok(deleted)
}
