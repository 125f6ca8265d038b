//! How late the router's runtime runs its tasks: one task asks to wake every [`TICK`] and
//! measures how much it overslept. When every worker thread is busy, or the OS gives the
//! process less CPU than it asks for, every task waits about that long each time it is
//! woken: a queue nobody sees, in front of every command at every step.
//!
//! Why it matters: under overload a router's commands all slow down together until they
//! outlast their clients' deadlines. A driver closes the connection of an operation that
//! timed out after it was sent, and opens another, so the router also pays a handshake
//! for every timeout: the overload turns into a connection storm and goodput collapses.
//! With the lag known, a command is answered at once with `ExceededTimeLimit` (262,
//! retryable) when the lag is a sizeable fraction of its deadline (`commands/forward.rs`):
//! the client keeps its connection and the rest of its time, and the router does the work
//! it can finish.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often the probe asks to be woken.
const TICK: Duration = Duration::from_millis(5);
/// Tokio's timer rounds wake-ups up to the next millisecond: oversleeping by that much is
/// not lag.
const TIMER_SLACK: Duration = Duration::from_millis(1);
/// A command is shed when the lag reaches this fraction of its deadline (3 ms of 100 ms).
/// A forwarded command waits for the runtime several times (reading the request, the
/// shard's reply, writing the answer, the steps between), and a lag that persists is a
/// standing queue (CoDel's signal): past a few percent of the deadline the router is
/// overloaded, and every command it admits makes every other one later. Measured with
/// `bulwark chaos overload`: a sixteenth kept pools of 100 but left tiny pools collapsed
/// (the queue builds in the clients' pools, and the router's lag stays lower).
pub const DEADLINE_FRACTION: u32 = 32;
/// Below this the lag is the timer's and the scheduler's noise, not a queue: a short
/// deadline alone never gets a command shed.
const MIN_SHED_LAG: Duration = Duration::from_millis(2);

/// The smoothed lag. One task writes it; commands only read it (no shared writes on the
/// command path).
#[derive(Default)]
pub struct RuntimeLag {
    micros: AtomicU64,
}

impl RuntimeLag {
    pub fn current(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    /// True when a command with `max_time_ms` should be refused: the lag is a standing
    /// queue and at least [`DEADLINE_FRACTION`]th of the deadline.
    pub fn should_shed(&self, max_time_ms: u64) -> bool {
        let lag = self.current();
        max_time_ms > 0
            && lag >= MIN_SHED_LAG
            && lag * DEADLINE_FRACTION >= Duration::from_millis(max_time_ms)
    }

    /// Measures until `shutdown`.
    pub fn spawn(self: &Arc<Self>, tasks: &TaskTracker, shutdown: CancellationToken) {
        let lag = self.clone();
        tasks.spawn(async move {
            loop {
                let asked = Instant::now();
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(TICK) => {}
                }
                let late = asked
                    .elapsed()
                    .saturating_sub(TICK + TIMER_SLACK)
                    .as_micros() as u64;
                lag.record(late);
            }
        });
    }

    /// Exponential moving average, each sample weighing a quarter: a few ticks (tens of
    /// milliseconds) to follow a change, one late tick does not shed.
    fn record(&self, late_us: u64) {
        let old = self.micros.load(Ordering::Relaxed);
        self.micros
            .store((old * 3 + late_us) / 4, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_follows_samples_and_sheds_only_past_its_threshold() {
        let lag = RuntimeLag::default();
        assert!(!lag.should_shed(100));
        for _ in 0..20 {
            lag.record(40_000);
        }
        // About 40 ms: more than a thirty-second of 100 ms and of 1 s, not of 2 s; no
        // deadline is never shed.
        assert!(lag.current() > Duration::from_millis(35));
        assert!(lag.should_shed(100));
        assert!(lag.should_shed(1_000));
        assert!(!lag.should_shed(2_000));
        assert!(!lag.should_shed(0));
        // A tiny deadline is not shed on noise.
        for _ in 0..20 {
            lag.record(1_000);
        }
        assert!(!lag.should_shed(1));
        for _ in 0..20 {
            lag.record(0);
        }
        assert!(!lag.should_shed(100));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_runtime_shows_as_lag() {
        let lag = Arc::new(RuntimeLag::default());
        let tasks = TaskTracker::new();
        let stop = CancellationToken::new();
        lag.spawn(&tasks, stop.clone());
        tokio::time::sleep(Duration::from_millis(30)).await;
        let idle = lag.current();
        // Hog the only worker thread: the probe cannot run meanwhile.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(40));
            tokio::task::yield_now().await;
        }
        let busy = lag.current();
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        assert!(
            busy > idle + Duration::from_millis(10),
            "idle {idle:?}, busy {busy:?}"
        );
    }
}
