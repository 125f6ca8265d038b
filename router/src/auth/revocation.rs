//! Revocation across routers. Every change to users or roles counts one in the user
//! store (`AuthState::changed`); each router reads that count every [`POLL`] and, when
//! it moves, forgets its cached users and makes every connection re-resolve its
//! privileges before its next command. So `dropUser` or `revokeRolesFromUser` through
//! one router reaches the open connections of every other router within [`POLL`] plus
//! one read, where MongoDB's routers take up to their 30 s cache period.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::AuthState;

/// How often a router reads the change count: one point read of a tiny document.
pub const POLL: Duration = Duration::from_millis(200);

/// Watches the change count until shutdown (only with `auth` on).
pub fn spawn(tasks: &TaskTracker, auth: &Arc<AuthState>, shutdown: CancellationToken) {
    if !auth.enabled {
        return;
    }
    let auth = auth.clone();
    tasks.spawn(async move {
        // Unknown at start: the first count read also drops anything cached before it.
        let mut seen = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(POLL) => {}
            }
            match auth.store.generation().await {
                Ok(n) if seen != Some(n) => {
                    auth.invalidate();
                    seen = Some(n);
                }
                Ok(_) => {}
                // The shard is unreachable or electing: commands fail the same way now.
                Err(e) => tracing::debug!(error = %e, "reading the user change count"),
            }
        }
    });
}
