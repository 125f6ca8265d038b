//! A command's `maxTimeMS` at the router: how long the shard may work on it, and how long
//! the router waits for the shard before it answers `MaxTimeMSExpired` itself.
//!
//! The router answers a little *before* the client's deadline. A reply that reaches a
//! driver after its own timeout fired is worse than useless: the driver closes a
//! connection whose operation timed out, and opens (and authenticates) another for its
//! next request. Under overload every late reply became a reconnect, and the reconnects
//! were the storm that took goodput down (`docs/overload.md`). An error in time keeps the
//! connection.
//!
//! The budget counts from when the router read the request, so the time the command
//! spent in the router is not given to the shard a second time. The shard's deadline
//! falls one margin before the router's, so the shard usually reports the expiry itself
//! (with its own message) and the router's wait is the backstop; dropping the call when
//! the wait ends also stops the shard's work (`shard::control::ops`).

use std::future::Future;
use std::time::Duration;

use wire::{ErrorCode, MongoError, MongoResult};

use crate::overload::runtime_lag::{RuntimeLag, TransitSampler};

/// The margin: a twentieth of the budget, at most 5 ms (a reply's write and the
/// client's wake-up take well under that on a loaded machine's loopback).
fn margin(budget: Duration) -> Duration {
    (budget / 20).min(Duration::from_millis(5))
}

/// How a command's time is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The deadline sent to the shard, in milliseconds (at least 1).
    pub shard_ms: u64,
    /// How long the router waits for the shard's answer.
    pub router_wait: Duration,
}

/// Splits `max_time_ms` (0 = none) for a command that has already spent `spent` in the
/// router; `Err(MaxTimeMSExpired)` when nothing is left.
pub fn split(max_time_ms: u64, spent: Duration) -> MongoResult<Option<Split>> {
    if max_time_ms == 0 {
        return Ok(None);
    }
    let budget = Duration::from_millis(max_time_ms);
    let margin = margin(budget);
    let router_wait = budget.saturating_sub(spent).saturating_sub(margin);
    if router_wait.is_zero() {
        return Err(expired());
    }
    let shard = router_wait.saturating_sub(margin);
    Ok(Some(Split {
        shard_ms: (shard.as_millis() as u64).max(1),
        router_wait,
    }))
}

/// Waits for a call to the shard within the router's share of the deadline (`split`;
/// `None`: no deadline), and answers `MaxTimeMSExpired` when it runs out. A call given up
/// on had no answer, not even the member's own expiry (due a margin earlier): its time
/// went to transit, so it is a transit sample for the shedder like an answered call
/// (`runtime_lag`, "Transit"). Counting only answered calls, the estimate went stale and
/// decayed exactly when the transit outgrew the deadlines, shedding stopped, and a flood
/// of admitted commands expired. Only the transit: the member's queue and execution are
/// unknown, so the wait histograms get nothing made up.
pub async fn within<T>(
    split: Option<Split>,
    call: impl Future<Output = MongoResult<T>>,
    sampler: &mut TransitSampler,
    lag: &RuntimeLag,
) -> MongoResult<T> {
    let Some(s) = split else {
        return call.await;
    };
    match tokio::time::timeout(s.router_wait, call).await {
        Ok(r) => r,
        Err(_) => {
            if sampler.due() {
                lag.record_transit(s.router_wait);
                lag.answer.record(s.router_wait, true);
            }
            Err(expired())
        }
    }
}

pub fn expired() -> MongoError {
    MongoError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_router_answers_before_the_client_gives_up() {
        let s = split(100, Duration::from_millis(2)).unwrap().unwrap();
        // 100 ms budget, 2 spent, 5 ms margin: the router waits 93, the shard has 88.
        assert_eq!(s.router_wait, Duration::from_millis(93));
        assert_eq!(s.shard_ms, 88);
    }

    #[test]
    fn small_budgets_keep_a_proportional_margin() {
        let s = split(10, Duration::ZERO).unwrap().unwrap();
        assert_eq!(s.router_wait, Duration::from_micros(9_500));
        assert_eq!(s.shard_ms, 9);
        let s = split(1, Duration::ZERO).unwrap().unwrap();
        assert_eq!(
            s.shard_ms, 1,
            "a deadline is never sent as 0 (which means none)"
        );
    }

    #[tokio::test]
    async fn a_call_given_up_on_is_a_transit_sample() {
        let (lag, mut sampler) = (RuntimeLag::default(), TransitSampler::default());
        let split = split(15, Duration::ZERO).unwrap();
        for _ in 0..8 {
            let never = std::future::pending::<MongoResult<()>>();
            let e = within(split, never, &mut sampler, &lag).await.unwrap_err();
            assert_eq!(e.code, ErrorCode::MaxTimeMSExpired as i32);
        }
        // One call in eight is sampled: the router's whole wait, 14.25 ms, at weight 1/8.
        assert_eq!(lag.transit(), Duration::from_micros(14_250 / 8));
        // An answered call is not a give-up and records nothing here.
        for _ in 0..8 {
            within(split, async { Ok(()) }, &mut sampler, &lag)
                .await
                .unwrap();
        }
        assert_eq!(lag.transit(), Duration::from_micros(14_250 / 8));
    }

    #[test]
    fn no_budget_left_or_none_given() {
        assert_eq!(split(0, Duration::from_secs(5)).unwrap(), None);
        let e = split(50, Duration::from_millis(60)).unwrap_err();
        assert_eq!(e.code, ErrorCode::MaxTimeMSExpired as i32);
    }
}
