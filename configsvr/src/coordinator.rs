//! The coordinator: what a config server member runs while it is the primary of the
//! config server replica set. Routers only cache the catalog and forward; everything that
//! changes where data lives runs here (`requests.rs`, `balancer.rs`), and so does the
//! recovery of work left half done (`migration_recovery.rs`, `move_recovery.rs`).
//!
//! A member watches its own replication state. When it becomes primary (a new term with
//! it as leader), it starts a fresh `Ctx` and the tasks above; when it stops being
//! primary, it cancels them. Whatever a cancelled task left is in the catalog (pending
//! requests, orphaned locks) and the next primary takes it from there.

use std::sync::Arc;
use std::time::Duration;

use router::sharding::Cluster;
use shard::node::Node;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::context::Ctx;
use crate::migration_recovery::MigrationRecovery;
use crate::move_recovery::MoveRecovery;
use crate::prepared_recovery::PreparedRecovery;
use crate::sweeper::Sweep;
use crate::term::{Settings, Term};
use crate::{balancer, requests, sweeper};

/// How long a new primary's first recovery pass may hold up its requests.
const FIRST_RECOVERY: Duration = Duration::from_secs(30);
/// How often a member looks at whether it is primary.
const WATCH: Duration = Duration::from_millis(50);

/// Runs the coordinator of the config server member `node` until `shutdown`; `cluster`
/// is how it reaches the catalog and the shards.
pub async fn run(
    node: Arc<Node>,
    cluster: Arc<Cluster>,
    settings: Arc<Settings>,
    shutdown: CancellationToken,
) {
    loop {
        let Some(term) = wait_for_primary(&node, &shutdown).await else {
            return;
        };
        info!(term, "config server primary: the coordinator starts");
        let t = Term {
            tasks: TaskTracker::new(),
            ctx: Arc::new(Ctx::new(cluster.clone())),
            settings: settings.clone(),
            stop: shutdown.child_token(),
        };
        if let Err(e) = balancer::clear_mark(&t.ctx).await {
            tracing::debug!(error = %e, "clearing a former primary's balancer mark");
        }
        // Orphaned locks first: a request a former primary was running, run again now,
        // would otherwise meet its own first run's lock while the pass holds it.
        let first = tokio::time::timeout(FIRST_RECOVERY, MigrationRecovery::sweep(&t.ctx));
        if let Ok(Err(e)) = first.await {
            tracing::warn!(error = %e, "recovering orphaned migrations at step-up");
        }
        requests::spawn(&t);
        balancer::spawn(&t);
        sweeper::spawn::<MigrationRecovery>(&t);
        sweeper::spawn::<MoveRecovery>(&t);
        sweeper::spawn::<PreparedRecovery>(&t);
        t.tasks.close();
        while primary_term(&node) == Some(term) && !shutdown.is_cancelled() {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(WATCH) => {}
            }
        }
        t.stop.cancel();
        t.tasks.wait().await;
        if !shutdown.is_cancelled() {
            info!(term, "the coordinator stops: no longer primary");
        }
    }
}

/// The term in which `node` is a writable primary, if it is one.
fn primary_term(node: &Node) -> Option<u64> {
    let status = node.replica.as_ref()?.status();
    status.writable.then_some(status.term)
}

async fn wait_for_primary(node: &Node, shutdown: &CancellationToken) -> Option<u64> {
    loop {
        if shutdown.is_cancelled() {
            return None;
        }
        if let Some(term) = primary_term(node) {
            return Some(term);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(WATCH) => {}
        }
    }
}
