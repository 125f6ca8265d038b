//! Background passes every router runs over the cluster to finish work another router
//! left half done (`move_recovery.rs`, `migration_recovery.rs`). Every router runs each
//! pass, so the work is finished while any router lives; each pass is written so that
//! two routers running it at once end in the same state.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};
use wire::MongoResult;

use super::Cluster;
use crate::context::RouterState;

/// One kind of pass.
pub trait Sweep: Send + 'static {
    /// The pause between passes.
    const EVERY: Duration;
    /// What a pass that did something did, for the log.
    const DONE: &'static str;
    /// One pass; how many things it finished.
    fn sweep(cluster: &Cluster) -> impl Future<Output = MongoResult<usize>> + Send;
}

/// Runs `S`'s pass every `S::EVERY` on a sharded router, until `shutdown`.
pub fn spawn<S: Sweep>(tasks: &TaskTracker, state: &Arc<RouterState>, shutdown: CancellationToken) {
    if state.cluster.is_none() {
        return;
    }
    let state = state.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(S::EVERY) => {}
            }
            let Some(cluster) = state.cluster.as_ref() else {
                return;
            };
            match S::sweep(cluster).await {
                Ok(0) => {}
                Ok(n) => info!(n, "{}", S::DONE),
                Err(e) => debug!(error = %e, "{}: pass failed", S::DONE),
            }
        }
    });
}
