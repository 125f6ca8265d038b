//! How many forwarded calls one router has in flight to one shard, and one first-come,
//! first-served line at the router for the rest, where the wait is measured and a command
//! that would wait too long is refused at once.
//!
//! Why the line is here: a connection pool only moves where requests wait.
//! Without a bound, a router under a burst forwarded every command it admitted, and with
//! 800 client connections the waits moved into places nobody could see or shed: the
//! HTTP/2 connection to the member, the member's runtime, and the run queue of the core
//! both processes share. The router saw that only as a call's transit (20–100 ms against
//! 1 ms at half load), sampled late, and its controller refused two to three times the
//! excess while the commands it let through waited 30–50 ms and many expired at the
//! member (`docs/journal/overload-experiments.md`, "the wait belongs in one line at the
//! router"). With a
//! bound the member sees about as much concurrency as the closed loop that measured its
//! capacity, the transit stays at a few milliseconds, and the queue is one line at the
//! router whose wait is predicted from its length (Little's law, as the members' ticket
//! pools do).
//!
//! * A command with a deadline is refused at once (462, `SystemOverloadedError`, as the
//!   shedder refuses) when the predicted wait exceeds [`QUEUE_TARGET`], or when the wait
//!   plus a call's mean time would not fit in what is left of its deadline (only when no
//!   slot is free: with one, the command is sent at once whatever its budget): the line
//!   stays short, so what waits in it is served fresh, and what would expire in it is
//!   refused instead (the prediction is a mean, so now and then one still does).
//!   After the line the member gets what is left of the deadline.
//! * A command without a deadline is never refused; it waits its turn.
//! * A call gives its slot back when it is answered or after [`HOLD_LIMIT`], whichever is
//!   first. Long calls (a cross-site write's replication, an `awaitData` getMore, a long
//!   scan, which the member's own tickets pace) then cannot take every slot, and the
//!   bound applies to the short commands whose pile-up it is for. So the slots bound the
//!   calls younger than the hold limit, not every call in flight; calls that all take
//!   longer (a primary in another site) pass at most slots ÷ hold limit a second (3,200
//!   with the defaults) before they queue.
//!
//! Per command the gate touches the semaphore (whose release takes its waiters' lock)
//! and a timer for the hold limit, and the waiting count only when no slot is free; the
//! mean hold time is written by one call in eight per connection, without a lock (a lost
//! sample does not matter).

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use tokio::sync::Semaphore;

/// The most slots `forward_slots` may ask for (tokio's semaphore has a limit).
pub const MAX_SLOTS: usize = 1 << 20;
/// Slots per shard unless the router's `forward_slots` says otherwise: on the 2-core
/// test machine a closed loop of 32 lookups in flight already reaches the cluster's
/// capacity.
pub const DEFAULT_SLOTS: usize = 32;
/// The longest a command with a deadline is let wait in line. A longer line holds more
/// requests in the router at once, and each then costs more CPU (the overload
/// experiment's refusal-cost phase: 54–57 µs a lookup with 32 in flight, 65–66 with 160
/// over 800 connections). In eight alternating pairs of pools-of-100 bursts, 3 ms served
/// a median of 14,493 lookups a second against 13,931 with 10 ms
/// (`docs/journal/overload-experiments.md`, "the line's target"); a command let wait 3 ms
/// still has most of a 100 ms deadline.
pub const QUEUE_TARGET: Duration = Duration::from_millis(3);
/// A call that has held its slot this long gives it back.
pub const HOLD_LIMIT: Duration = Duration::from_millis(10);

pub struct ForwardGate {
    /// 0: no bound (the gate lets every call through at once).
    limit: usize,
    slots: Semaphore,
    /// Commands in line for a slot.
    waiting: AtomicUsize,
    /// Mean slot hold time in microseconds (EWMA, a new sample weighs 1/8).
    hold_us: AtomicU64,
}

/// Why the gate did not admit a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The wait the line predicted.
    pub predicted: Duration,
    /// A call's mean time once it has its slot (up to the hold limit).
    pub call: Duration,
}

impl Refused {
    /// The error the client gets (462 with the overload labels, as the shedder answers).
    pub fn to_error(self, slots: usize, max_time_ms: u64) -> wire::MongoError {
        wire::MongoError::overloaded(self.message(slots, max_time_ms))
    }

    /// The error's message (`refusal.rs` builds the reply from it at the front of the
    /// path).
    pub fn message(self, slots: usize, max_time_ms: u64) -> String {
        format!(
            "router overloaded: the line for this shard's {slots} slots would take {} ms and a call about {} ms more, too long for maxTimeMS {max_time_ms}; nothing was started, retry",
            self.predicted.as_millis(),
            self.call.as_millis()
        )
    }
}

impl ForwardGate {
    pub fn new(limit: usize) -> ForwardGate {
        ForwardGate {
            limit,
            slots: Semaphore::new(limit),
            waiting: AtomicUsize::new(0),
            // A first guess of a millisecond until calls have been timed.
            hold_us: AtomicU64::new(1_000),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The wait a command arriving now can expect: none while a slot is free; else
    /// its turn among those in line, one slot coming free every mean hold ÷ slots.
    pub fn predicted_wait(&self) -> Duration {
        if self.limit == 0 || self.slots.available_permits() > 0 {
            return Duration::ZERO;
        }
        let turn = self.waiting.load(Ordering::Relaxed) as u64 + 1;
        Duration::from_micros(turn * self.hold_us.load(Ordering::Relaxed) / self.limit as u64)
    }

    /// Whether a command with `budget` left (none: no deadline) may join the line: the
    /// wait must be within [`QUEUE_TARGET`], and the wait plus a call's mean time within
    /// the budget (as the members' ticket pools ask: would it finish in time?). A
    /// command that finds a slot free is always admitted.
    pub fn admit(&self, budget: Option<Duration>) -> Result<(), Refused> {
        let Some(budget) = budget else {
            return Ok(());
        };
        let predicted = self.predicted_wait();
        let call = Duration::from_micros(self.hold_us.load(Ordering::Relaxed));
        // With a slot free nothing is refused: a command that can go at once is sent,
        // however little time it has (an idle cluster answers what it can, as mongod
        // does).
        let must_wait = !predicted.is_zero();
        if predicted > QUEUE_TARGET || (must_wait && predicted + call > budget) {
            return Err(Refused { predicted, call });
        }
        Ok(())
    }

    /// Runs `call` once a slot is free, first come first served; returns its result and
    /// how long it waited in line. `sample`: this call's hold time feeds the mean.
    pub async fn run<T>(&self, sample: bool, call: impl Future<Output = T>) -> (T, Duration) {
        if self.limit == 0 {
            return (call.await, Duration::ZERO);
        }
        // A free slot is taken without joining the line, so an uncongested call writes
        // no shared count (tokio hands released permits to waiters first, so a free
        // slot means nobody is in line and taking it jumps no one).
        let (slot, waited) = match self.slots.try_acquire() {
            Ok(slot) => (slot, Duration::ZERO),
            Err(_) => {
                let queued = Instant::now();
                let _in_line = InLine::join(&self.waiting);
                let slot = self
                    .slots
                    .acquire()
                    .await
                    .expect("the gate's semaphore is never closed");
                (slot, queued.elapsed())
            }
        };
        let held_from = Instant::now();
        tokio::pin!(call);
        let answered = tokio::time::timeout(HOLD_LIMIT, &mut call).await;
        let held = held_from.elapsed().min(HOLD_LIMIT);
        drop(slot);
        if sample {
            self.record_hold(held);
        }
        let out = match answered {
            Ok(out) => out,
            Err(_) => call.await,
        };
        (out, waited)
    }

    fn record_hold(&self, held: Duration) {
        let us = held.as_micros() as u64;
        let mean = self.hold_us.load(Ordering::Relaxed);
        self.hold_us
            .store(mean - mean / 8 + us / 8, Ordering::Relaxed);
    }

    /// `serverStatus.bulwark.forwardGate` for one shard.
    pub fn to_document(&self) -> Document {
        doc! {
            "slots": self.limit as i64,
            "available": self.slots.available_permits() as i64,
            "waiting": self.waiting.load(Ordering::Relaxed) as i64,
            "meanHoldMicros": self.hold_us.load(Ordering::Relaxed) as i64,
            "predictedWaitMicros": self.predicted_wait().as_micros() as i64,
        }
    }
}

/// A place in line; leaving it (granted, or the command dropped while waiting) takes the
/// command out of the count.
struct InLine<'a>(&'a AtomicUsize);

impl<'a> InLine<'a> {
    fn join(waiting: &'a AtomicUsize) -> InLine<'a> {
        waiting.fetch_add(1, Ordering::Relaxed);
        InLine(waiting)
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn the_line_is_first_come_first_served() {
        let gate = Arc::new(ForwardGate::new(1));
        // The only slot is taken; three calls queue in order.
        let taken = gate.slots.acquire().await.unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut queued = Vec::new();
        for n in 0..3 {
            let (in_task, order) = (gate.clone(), order.clone());
            queued.push(tokio::spawn(async move {
                in_task.run(false, async { order.lock().push(n) }).await
            }));
            while gate.waiting.load(Ordering::Relaxed) < n + 1 {
                tokio::task::yield_now().await;
            }
        }
        assert!(order.lock().is_empty(), "nothing ran without a slot");
        // A newcomer's turn is fourth, one slot freeing every 1 ms (the first guess).
        assert_eq!(gate.predicted_wait(), Duration::from_millis(4));
        drop(taken);
        for q in queued {
            q.await.unwrap();
        }
        assert_eq!(*order.lock(), vec![0, 1, 2]);
        assert_eq!(gate.waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_long_call_gives_its_slot_back_after_the_hold_limit() {
        let gate = Arc::new(ForwardGate::new(1));
        let long = tokio::spawn({
            let gate = gate.clone();
            async move { gate.run(true, std::future::pending::<()>()).await }
        });
        while gate.slots.available_permits() == 1 {
            tokio::task::yield_now().await;
        }
        // A call that never answers holds the only slot, yet the next one runs.
        let next = tokio::time::timeout(Duration::from_secs(60), gate.run(false, async {})).await;
        assert!(next.is_ok(), "the second call never got the slot");
        assert!(!long.is_finished(), "the long call itself goes on");
        // Its hold time (the limit, not its whole time) moved the mean.
        assert_eq!(
            gate.hold_us.load(Ordering::Relaxed),
            1_000 - 1_000 / 8 + HOLD_LIMIT.as_micros() as u64 / 8
        );
        long.abort();
    }

    #[tokio::test]
    async fn a_command_that_would_wait_too_long_is_refused_and_one_without_a_deadline_never_is() {
        let gate = ForwardGate::new(2);
        gate.hold_us.store(1_000, Ordering::Relaxed);
        // A free slot: nothing is refused, however short the budget.
        gate.waiting.store(10, Ordering::Relaxed);
        assert_eq!(gate.predicted_wait(), Duration::ZERO);
        assert!(gate.admit(Some(Duration::from_micros(500))).is_ok());
        let _busy = gate.slots.acquire_many(2).await.unwrap();
        // Both slots busy, nine in line: the tenth turn, two slots, 1 ms a call, 5 ms,
        // over the 3 ms target however long the deadline.
        gate.waiting.store(9, Ordering::Relaxed);
        assert_eq!(gate.predicted_wait(), Duration::from_millis(5));
        let refused = gate.admit(Some(Duration::from_millis(90))).unwrap_err();
        assert_eq!(refused.predicted, Duration::from_millis(5));
        assert_eq!(refused.call, Duration::from_millis(1));
        assert!(gate.admit(None).is_ok());
        // Three in line: 2 ms, within the target; with the call's 1 ms it fits in
        // 3 ms, not in 2.9.
        gate.waiting.store(3, Ordering::Relaxed);
        assert!(gate.admit(Some(Duration::from_millis(90))).is_ok());
        assert!(gate.admit(Some(Duration::from_millis(3))).is_ok());
        assert!(gate.admit(Some(Duration::from_micros(2_900))).is_err());
        // Nobody in line but no slot free: the next slot is 0.5 ms away, and a command
        // with less than that and a call left is refused.
        gate.waiting.store(0, Ordering::Relaxed);
        assert_eq!(gate.predicted_wait(), Duration::from_micros(500));
        assert!(gate.admit(Some(Duration::from_micros(1_400))).is_err());
        assert!(gate.admit(Some(Duration::from_micros(1_500))).is_ok());
    }

    #[tokio::test]
    async fn a_command_dropped_while_in_line_leaves_it() {
        let gate = Arc::new(ForwardGate::new(1));
        let _slot = gate.slots.acquire().await.unwrap();
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.run(false, async {}).await }
        });
        while gate.waiting.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(gate.waiting.load(Ordering::Relaxed), 0);
    }
}
