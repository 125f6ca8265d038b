//! One term of the coordinator as primary (`Term`: its tasks, context and stop signal),
//! and the settings the coordinator can be told while it runs. The tasks of a term
//! (`requests.rs`, `balancer.rs`, `sweeper.rs`) depend on this, not on the coordinator
//! that starts them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::context::Ctx;

/// What the coordinator can be told while it runs.
pub struct Settings {
    balancer_interval_ms: AtomicU64,
    paused: AtomicBool,
}

impl Settings {
    pub fn new(balancer_interval: Duration) -> Arc<Settings> {
        Arc::new(Settings {
            balancer_interval_ms: AtomicU64::new(balancer_interval.as_millis() as u64),
            paused: AtomicBool::new(false),
        })
    }

    pub fn balancer_interval(&self) -> Duration {
        Duration::from_millis(self.balancer_interval_ms.load(Ordering::Relaxed).max(1))
    }

    pub fn set_balancer_interval(&self, every: Duration) {
        self.balancer_interval_ms
            .store(every.as_millis() as u64, Ordering::Relaxed);
    }

    /// While `paused`, the coordinator starts nothing new: requests stay pending, and no
    /// recovery pass or balancer round begins. Tests use it, as a fail point, to act while
    /// an operation is certainly unfinished or a recovery certainly has not run.
    pub fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }
}

/// What the tasks of one term as primary share.
pub struct Term {
    pub tasks: TaskTracker,
    pub ctx: Arc<Ctx>,
    pub settings: Arc<Settings>,
    /// Cancelled when the term ends (a step-down or shutdown).
    pub stop: CancellationToken,
}
