//! How long the router takes to answer a forwarded command, apart from the member's
//! execution of it: from reading the command to having its reply, less the execution the
//! member reports. That is the wait every command shares now (the router's runtime, the
//! line for the shard's slots, the network and the member's scheduling, its ticket
//! queue); the execution is the command's own (a long scan, an `awaitData` getMore that
//! waits for data), and one slow command must not make every short deadline look
//! hopeless. Kept as a mean and a mean deviation, as TCP estimates a round trip (RFC
//! 6298's SRTT and RTTVAR), with the time by which an answer is due: mean + 4
//! deviations, the RFC's retransmission timeout (an answer rarely waits longer).
//!
//! Why: a command whose whole `maxTimeMS` is shorter than that will most likely expire,
//! and an expiry costs the cluster nearly a full answer (the member reads, the router
//! forwards and waits) while a refusal costs about an eighth of one
//! (`chaos/src/refusal_cost.rs`). Clients whose requests wait in their own connection
//! pool send what is left of their deadline (a CSOT driver does): measured with tiny
//! pools at 130% of capacity, requests arrived with 1–2 ms left, and as many expired
//! (5,300 a second) as were served. The part of a call the router watched before (the
//! transit, 1.1–1.6 ms) never crossed the floor below which nothing is refused.
//! Refused at once, such a command frees its client's connection in a fraction of a
//! millisecond, the client's queue drains, and its next requests arrive with time enough.
//!
//! Expiries are censored samples: a wait cut off at the deadline says only that it would
//! have lasted at least that long. Such a sample moves the estimate only upwards;
//! otherwise short deadlines would pull it down exactly when waits are long.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Multiples of the mean deviation between the mean answer and the time it is due.
const DEVIATIONS: u64 = 4;

#[derive(Default)]
pub struct AnswerTime {
    /// Mean answer time, microseconds (a new sample weighs 1/8).
    mean_us: AtomicU64,
    /// Mean deviation from it, microseconds (a new sample weighs 1/4).
    dev_us: AtomicU64,
}

impl AnswerTime {
    /// One forwarded command's wait for an answer (its time less the member's
    /// execution). `cut_off`: the command expired, so the wait would have been longer
    /// than `took`. Callers sample (with the transit, whose sample count tells the
    /// runtime's probe when to [`fade`](Self::fade) both), so that the estimate is not a
    /// word every command writes; a lost update does not matter.
    pub fn record(&self, took: Duration, cut_off: bool) {
        let r = took.as_micros().min(u64::MAX as u128) as u64;
        let mean = self.mean_us.load(Ordering::Relaxed);
        if cut_off && r <= mean {
            return;
        }
        let dev = self.dev_us.load(Ordering::Relaxed);
        let err = r.abs_diff(mean);
        self.dev_us
            .store(dev - dev / 4 + err / 4, Ordering::Relaxed);
        self.mean_us
            .store(mean - mean / 8 + r / 8, Ordering::Relaxed);
    }

    pub fn mean(&self) -> Duration {
        Duration::from_micros(self.mean_us.load(Ordering::Relaxed))
    }

    /// The time by which an answer is due: the mean plus four mean deviations.
    pub fn due(&self) -> Duration {
        let (mean, dev) = (
            self.mean_us.load(Ordering::Relaxed),
            self.dev_us.load(Ordering::Relaxed),
        );
        Duration::from_micros(mean + DEVIATIONS * dev)
    }

    /// Halves the estimate: nobody measured it for a while (every command with a short
    /// deadline refused), and an old high value must not refuse them for ever.
    pub fn fade(&self) {
        for v in [&self.mean_us, &self.dev_us] {
            v.store(v.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn steady_answers_are_due_at_their_time() {
        let a = AnswerTime::default();
        for _ in 0..100 {
            a.record(ms(3), false);
        }
        assert!(a.mean() > Duration::from_micros(2_900), "{:?}", a.mean());
        // No spread: due when the mean says.
        assert!(a.due() < Duration::from_micros(3_200), "{:?}", a.due());
    }

    #[test]
    fn spread_answers_are_due_later_than_their_mean() {
        let a = AnswerTime::default();
        for i in 0..200 {
            a.record(ms(if i % 2 == 0 { 1 } else { 5 }), false);
        }
        // Mean about 3 ms, deviation about 2: due about 11 ms.
        assert!(a.due() > ms(9), "{:?}", a.due());
        assert!(a.due() < ms(13), "{:?}", a.due());
    }

    #[test]
    fn an_expiry_only_raises_the_estimate() {
        let a = AnswerTime::default();
        for _ in 0..100 {
            a.record(ms(4), false);
        }
        let before = a.due();
        // Cut off at 1 ms: says the answer takes at least 1 ms, which is known.
        for _ in 0..100 {
            a.record(ms(1), true);
        }
        assert_eq!(a.due(), before);
        // Cut off at 20 ms: the answers got slower.
        for _ in 0..20 {
            a.record(ms(20), true);
        }
        assert!(a.mean() > ms(15), "{:?}", a.mean());
    }

    #[test]
    fn fading_halves_it() {
        let a = AnswerTime::default();
        for _ in 0..100 {
            a.record(ms(8), false);
        }
        let due = a.due();
        a.fade();
        assert!(a.due() <= due / 2 + Duration::from_micros(1));
    }
}
