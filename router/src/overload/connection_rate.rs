//! A rate limit on new connections (MongoDB 8's ingress connection-establishment rate
//! limiter): connections are let through at `per_sec` a second with bursts of `burst`;
//! those over the rate wait their turn, and once the wait would exceed `max_queue`
//! connections' worth, a newcomer is closed at once — cheaply, before any handshake.
//!
//! It complements the handshake gate (`ingress.rs`), which bounds how many handshakes run
//! at once: the gate adapts to the machine's speed, the rate limit puts a ceiling an
//! operator chose on how fast clients can churn connections (a reconnect storm from a
//! misconfigured fleet) whatever the machine could absorb.
//!
//! The bucket is a GCRA (generic cell rate algorithm): one timestamp, the moment the
//! bucket is next empty, read and written once per connection under a lock; never per
//! command.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub struct ConnectionRate {
    /// Time between connections at the sustained rate.
    interval: Duration,
    /// How far ahead of the sustained rate a burst may run.
    burst_allowance: Duration,
    /// The longest a connection may be made to wait.
    max_wait: Duration,
    /// When the next connection is due at the sustained rate.
    due: Mutex<Instant>,
    delayed: AtomicU64,
    rejected: AtomicU64,
}

/// `serverStatus.bulwark.ingress.rateLimiter`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateStats {
    pub delayed: u64,
    pub rejected: u64,
}

impl ConnectionRate {
    /// `None` when `per_sec` is 0 (no limit).
    pub fn new(per_sec: f64, burst: usize, max_queue: usize) -> Option<ConnectionRate> {
        if per_sec <= 0.0 {
            return None;
        }
        let interval = Duration::from_secs_f64(1.0 / per_sec);
        Some(ConnectionRate {
            interval,
            burst_allowance: interval * (burst.max(1) as u32 - 1),
            max_wait: interval * max_queue as u32,
            due: Mutex::new(Instant::now()),
            delayed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// How long a connection arriving now must wait before it handshakes; `None` when
    /// the queue is full and it should be closed.
    pub fn admit(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut due = self.due.lock();
        let next = (*due).max(now);
        let wait = next.saturating_duration_since(now + self.burst_allowance);
        if wait > self.max_wait {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *due = next + self.interval;
        if !wait.is_zero() {
            self.delayed.fetch_add(1, Ordering::Relaxed);
        }
        Some(wait)
    }

    pub fn stats(&self) -> RateStats {
        RateStats {
            delayed: self.delayed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_connections_are_paced_then_refused() {
        // One a second, bursts of 3, at most 4 waiting.
        let rate = ConnectionRate::new(1.0, 3, 4).unwrap();
        let waits: Vec<Option<Duration>> = (0..10).map(|_| rate.admit()).collect();
        assert!(
            waits[..3].iter().all(|w| *w == Some(Duration::ZERO)),
            "{waits:?}"
        );
        // The next four wait one, two, three, four seconds (give or take the test's own
        // running time, which only shortens the waits).
        for (i, w) in waits[3..7].iter().enumerate() {
            let w = w.expect("queued, not refused");
            let expected = Duration::from_secs(i as u64 + 1);
            assert!(
                w <= expected && w + Duration::from_millis(500) > expected,
                "{i}: {w:?}"
            );
        }
        assert!(waits[7..].iter().all(Option::is_none), "{waits:?}");
        let stats = rate.stats();
        assert_eq!((stats.delayed, stats.rejected), (4, 3));
    }

    #[test]
    fn no_rate_means_no_limiter() {
        assert!(ConnectionRate::new(0.0, 10, 10).is_none());
    }
}
