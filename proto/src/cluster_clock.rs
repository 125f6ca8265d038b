//! The cluster clock: a hybrid logical clock with the shape of MongoDB's cluster time,
//! `Timestamp(seconds, increment)`, packed in a `u64` (seconds high, increment low) so
//! that it orders as a number.
//!
//! A replica set's primary ticks its clock for every entry it proposes
//! (`shard::repl::driver`), so the times of the log rise with the log's order. A tick follows the wall clock's seconds
//! when they are ahead, and otherwise adds one to the increment, so a clock that steps
//! back never makes time go back. Members advance their clock to every entry they append,
//! and a new primary to the newest entry in its log, so the next term's times are above
//! every entry that survives. Members send their time with every reply to a router
//! (`CommandReply.cluster_time`), and a router's clock follows the newest it has heard,
//! so the `operationTime` a client gets is at or after its writes. Times learned from
//! elsewhere move a clock forward, but not beyond `MAX_DRIFT` ahead of the wall clock,
//! which bounds what one bad clock does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How far ahead of this machine's wall clock a time learned from elsewhere may be
/// (MongoDB's `maxAcceptableLogicalClockDriftSecs` default: one year).
pub const MAX_DRIFT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A cluster time, `seconds << 32 | increment`. Zero is no time.
pub type ClusterTime = u64;

pub fn pack(seconds: u32, increment: u32) -> ClusterTime {
    (u64::from(seconds) << 32) | u64::from(increment)
}

pub fn seconds(t: ClusterTime) -> u32 {
    (t >> 32) as u32
}

pub fn increment(t: ClusterTime) -> u32 {
    t as u32
}

/// The time as BSON's `Timestamp`, as drivers see cluster times.
pub fn to_bson(t: ClusterTime) -> bson::Timestamp {
    bson::Timestamp {
        time: seconds(t),
        increment: increment(t),
    }
}

fn wall_seconds() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().min(u64::from(u32::MAX)) as u32)
}

/// A time further ahead of the wall clock than `MAX_DRIFT` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cluster time {0:#x} is too far ahead of this member's clock")]
pub struct TooFarAhead(pub ClusterTime);

#[derive(Debug, Default)]
pub struct ClusterClock {
    now: AtomicU64,
}

impl ClusterClock {
    /// The last time handed out or learned.
    pub fn now(&self) -> ClusterTime {
        self.now.load(Ordering::Acquire)
    }

    /// A new time, above every time this clock has given or learned.
    pub fn tick(&self) -> ClusterTime {
        self.tick_at(wall_seconds())
    }

    fn tick_at(&self, wall: u32) -> ClusterTime {
        let mut current = self.now.load(Ordering::Acquire);
        loop {
            let next = if wall > seconds(current) {
                pack(wall, 1)
            } else {
                // An increment at its end carries into the seconds: still above.
                current + 1
            };
            match self
                .now
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next,
                Err(seen) => current = seen,
            }
        }
    }

    /// Moves the clock to `t` if it is ahead, unless `t` is too far ahead of the wall
    /// clock.
    pub fn advance(&self, t: ClusterTime) -> Result<(), TooFarAhead> {
        // Routers call this on every member reply: most times are not ahead, and a read
        // costs neither the wall clock nor a write to the shared line.
        if t <= self.now() {
            return Ok(());
        }
        self.advance_at(t, wall_seconds())
    }

    fn advance_at(&self, t: ClusterTime, wall: u32) -> Result<(), TooFarAhead> {
        if u64::from(seconds(t)) > u64::from(wall) + MAX_DRIFT.as_secs() {
            return Err(TooFarAhead(t));
        }
        self.learn(t);
        Ok(())
    }

    /// Moves the clock to `t` if it is ahead, with no drift check: for times of this
    /// replica set's own log, which a primary of it assigned.
    pub fn learn(&self, t: ClusterTime) {
        if t > self.now() {
            self.now.fetch_max(t, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn ticks_follow_the_wall_clock_and_never_go_back() {
        let c = ClusterClock::default();
        assert_eq!(c.tick_at(100), pack(100, 1));
        assert_eq!(c.tick_at(100), pack(100, 2));
        // The wall clock steps back: the increment goes on.
        assert_eq!(c.tick_at(90), pack(100, 3));
        assert_eq!(c.tick_at(101), pack(101, 1));
        // A full increment carries into the seconds.
        c.learn(pack(200, u32::MAX));
        assert_eq!(c.tick_at(150), pack(201, 0));
        assert!(c.tick_at(150) > pack(201, 0));
    }

    #[test]
    fn learned_times_move_it_forward_within_the_drift_limit() {
        let c = ClusterClock::default();
        c.tick_at(1000);
        c.advance_at(pack(5000, 7), 1000).unwrap();
        assert_eq!(c.tick_at(1000), pack(5000, 8));
        // Behind: nothing changes.
        c.advance_at(pack(10, 1), 1000).unwrap();
        assert_eq!(c.now(), pack(5000, 8));
        let far = pack(1000 + MAX_DRIFT.as_secs() as u32 + 1, 1);
        assert_eq!(c.advance_at(far, 1000), Err(TooFarAhead(far)));
        assert_eq!(c.now(), pack(5000, 8));
    }

    #[test]
    fn concurrent_ticks_are_all_distinct() {
        let c = Arc::new(ClusterClock::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..10_000).map(|_| c.tick()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let times = t.join().unwrap();
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "a thread's ticks rise"
            );
            all.extend(times);
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "no time is handed out twice");
    }
}
