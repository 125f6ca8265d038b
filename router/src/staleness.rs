//! How stale a secondary is, for `maxStalenessSeconds` (server-selection spec).
//!
//! The spec measures staleness with each member's last write date. Bulwark's log entries
//! carry no wall-clock time, so the router measures it from what it sees: every time it
//! polls the members (`ShardHandle::monitor`) it records the highest log index any of
//! them has applied. A member that has applied index `a` has everything the set had at
//! the last poll where that highest index was still `<= a`; its staleness is the time
//! since then, plus one polling interval (the spec's `heartbeatFrequencyMS` term, for
//! what happened since the last poll). A member that is caught up is at most one interval
//! stale; one that stopped applying grows staler by the second, whether or not anything
//! is being written (as the spec's primary-relative formula does with idle writes).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the history reaches back: past the largest useful `maxStalenessSeconds` a
/// member is simply "staler than that".
const KEEP: Duration = Duration::from_secs(600);

/// The highest applied index at each poll, oldest first.
#[derive(Default)]
pub struct History {
    polls: VecDeque<(Instant, u64)>,
}

impl History {
    pub fn record(&mut self, at: Instant, highest_applied: u64) {
        self.polls.push_back((at, highest_applied));
        while self
            .polls
            .front()
            .is_some_and(|(t, _)| at.duration_since(*t) > KEEP)
        {
            self.polls.pop_front();
        }
    }

    /// The staleness of a member that has applied `applied`, as of `now`; `interval` is
    /// the polling interval. `None` before the first poll.
    pub fn staleness(&self, applied: u64, now: Instant, interval: Duration) -> Option<Duration> {
        let (first, _) = self.polls.front()?;
        // The last poll at which the set had nothing this member lacks; if there is none
        // in the history, it has been behind for at least as long as the history goes.
        let since = self
            .polls
            .iter()
            .rev()
            .find(|(_, highest)| *highest <= applied)
            .map_or(*first, |(t, _)| *t);
        Some(now.saturating_duration_since(since) + interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(500);

    /// A history of polls every 500 ms over `secs` seconds, the set writing `rate`
    /// entries a second.
    fn history(start: Instant, secs: u64, rate: u64) -> History {
        let mut h = History::default();
        for n in 0..=secs * 2 {
            h.record(start + POLL * n as u32, n * rate / 2);
        }
        h
    }

    #[test]
    fn a_caught_up_member_is_one_interval_stale() {
        let start = Instant::now();
        let h = history(start, 200, 10);
        let now = start + Duration::from_secs(200);
        assert_eq!(h.staleness(2_000, now, POLL), Some(POLL));
    }

    #[test]
    fn a_member_that_stopped_applying_grows_staler_even_without_writes() {
        let start = Instant::now();
        // Writes for 100 s (to index 1,000), then nothing for another 100 s.
        let mut h = history(start, 100, 10);
        for n in 201..=400u32 {
            h.record(start + POLL * n, 1_000);
        }
        let now = start + Duration::from_secs(200);
        // Stopped at index 500, reached at t = 50 s: 150 s stale.
        let s = h.staleness(500, now, POLL).unwrap();
        assert_eq!(s, Duration::from_secs(150) + POLL);
        assert!(
            s > Duration::from_secs(90),
            "excluded by maxStalenessSeconds 90"
        );
        // Caught up with the idle set: fresh.
        assert_eq!(h.staleness(1_000, now, POLL), Some(POLL));
    }

    #[test]
    fn behind_the_whole_history_and_before_any_poll() {
        assert_eq!(History::default().staleness(0, Instant::now(), POLL), None);
        let start = Instant::now();
        let mut h = History::default();
        h.record(start, 100);
        h.record(start + Duration::from_secs(30), 200);
        let s = h
            .staleness(10, start + Duration::from_secs(30), POLL)
            .unwrap();
        assert_eq!(s, Duration::from_secs(30) + POLL);
    }

    #[test]
    fn old_polls_are_forgotten() {
        let start = Instant::now();
        let h = history(start, 1_000, 1);
        assert!(h.polls.len() <= (KEEP.as_millis() / POLL.as_millis()) as usize + 1);
    }
}
