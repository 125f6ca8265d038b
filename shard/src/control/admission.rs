//! Admission control at a shard member: a command runs only with a ticket from the read
//! or the write pool, and the pools hand tickets out strictly first come, first served
//! (tokio's semaphore queues waiters in order), unlike mongod's ticket line, which has
//! "no fairness guarantee".
//!
//! Work that cannot finish in time is not started:
//! * a command whose deadline has passed is refused before it queues;
//! * a command whose remaining time is shorter than the wait the queue ahead of it
//!   predicts is refused at once as overloaded (462, retryable after a backoff), instead of
//!   queueing, expiring, and having burnt a place in line;
//! * a command whose deadline passes while it queues leaves the queue
//!   (MaxTimeMSExpired) and never runs.
//!
//! The predicted wait is Little's law: commands ahead ÷ (tickets ÷ mean service time).
//! The mean is an exponentially weighted average of how long tickets were held.
//!
//! Each command touches two shared words per pool (the in-flight count and the
//! semaphore); the service-time average is written by one command in eight, so the pools
//! add little cache-line traffic to the hot path.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wire::{ErrorCode, MongoError, MongoResult};

use super::deadline::Deadline;

/// Which pool a command draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Read,
    Write,
    /// Replica-set administration and handshakes: never queued behind user work.
    Exempt,
}

pub struct Pool {
    name: &'static str,
    class: Class,
    permits: Arc<Semaphore>,
    limit: AtomicUsize,
    /// Commands holding or waiting for a ticket.
    in_flight: AtomicUsize,
    /// Mean ticket hold time, microseconds (EWMA, 1/8 weight for a new sample).
    service_us: AtomicU64,
    /// Samples seen, to write the average only every eighth time.
    samples: AtomicU64,
    /// Refuse work the queue predicts cannot finish in time (off only for comparisons).
    shedding: std::sync::atomic::AtomicBool,
}

/// A granted ticket; dropping it returns it and records how long it was held.
pub struct Ticket {
    pool: Arc<Pool>,
    _permit: OwnedSemaphorePermit,
    granted: Instant,
    /// How long the command queued for this ticket.
    pub queued: Duration,
}

impl Ticket {
    pub fn class(&self) -> Class {
        self.pool.class
    }

    /// How long the ticket has been held.
    pub fn held(&self) -> Duration {
        self.granted.elapsed()
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.pool.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.pool.record(self.granted.elapsed());
    }
}

/// Undoes the in-flight count of a command that leaves the queue without a ticket.
struct Leaving<'a>(&'a Pool);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    pub fn new(class: Class, limit: usize) -> Arc<Pool> {
        let limit = limit.max(1);
        let name = match class {
            Class::Write => "write",
            _ => "read",
        };
        Arc::new(Pool {
            name,
            class,
            permits: Arc::new(Semaphore::new(limit)),
            limit: AtomicUsize::new(limit),
            in_flight: AtomicUsize::new(0),
            service_us: AtomicU64::new(1_000),
            samples: AtomicU64::new(0),
            shedding: std::sync::atomic::AtomicBool::new(true),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the number of tickets (configuration; later, throughput probing). Fewer
    /// tickets take effect as running commands return theirs.
    pub fn set_limit(&self, n: usize) {
        let n = n.max(1);
        let old = self.limit.swap(n, Ordering::Relaxed);
        if n > old {
            self.permits.add_permits(n - old);
        } else if n < old {
            let permits = self.permits.clone();
            let take = (old - n) as u32;
            tokio::spawn(async move {
                if let Ok(p) = permits.acquire_many_owned(take).await {
                    p.forget();
                }
            });
        }
    }

    /// Tickets free right now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Tickets returned so far (a ticket returned is a command done, or a yield).
    pub fn returned(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// Commands waiting for a ticket right now.
    pub fn queued(&self) -> usize {
        self.in_flight
            .load(Ordering::Relaxed)
            .saturating_sub(self.limit())
    }

    /// The wait a command arriving now should expect.
    pub fn expected_wait(&self) -> Duration {
        let ahead = self.queued() as u64;
        if ahead == 0 {
            return Duration::ZERO;
        }
        let mean = self.service_us.load(Ordering::Relaxed);
        Duration::from_micros((ahead + 1) * mean / self.limit() as u64)
    }

    /// Turns shedding off or on (benchmarks compare the two).
    pub fn set_shedding(&self, on: bool) {
        self.shedding.store(on, Ordering::Relaxed);
    }

    /// Mean time a ticket is held.
    pub fn mean_service(&self) -> Duration {
        Duration::from_micros(self.service_us.load(Ordering::Relaxed))
    }

    fn record(&self, held: Duration) {
        if !self
            .samples
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(8)
        {
            return;
        }
        let sample = held.as_micros().min(u64::MAX as u128) as u64;
        let old = self.service_us.load(Ordering::Relaxed);
        let new = old - old / 8 + sample / 8;
        self.service_us.store(new.max(1), Ordering::Relaxed);
    }

    /// Waits for a ticket in arrival order, or refuses as described in the module docs.
    pub async fn admit(self: &Arc<Pool>, deadline: Deadline) -> MongoResult<Ticket> {
        self.admit_with(deadline, self.shedding.load(Ordering::Relaxed))
            .await
    }

    /// Queues again for a ticket given back at a yield point. Never shed: the operation
    /// has done part of its work, and only its deadline ends it.
    pub async fn readmit(self: &Arc<Pool>, deadline: Deadline) -> MongoResult<Ticket> {
        self.admit_with(deadline, false).await
    }

    async fn admit_with(self: &Arc<Pool>, deadline: Deadline, shed: bool) -> MongoResult<Ticket> {
        let arrived = Instant::now();
        let remaining = match deadline.0 {
            None => None,
            Some(d) if d <= arrived => return Err(expired(self.name)),
            Some(d) => Some(d - arrived),
        };
        if let Some(left) = remaining.filter(|_| shed) {
            // It must finish, not just start: the wait ahead plus its own service time.
            // With nobody ahead nothing is refused: the ticket is free now, and refusing on
            // the service time alone left the mean stale for ever once every short
            // deadline was refused (no command ran to correct it). Too short a deadline
            // for an answer is the router's call (`answer_time`), which fades.
            let wait = self.expected_wait();
            let expected = wait + self.mean_service();
            if !wait.is_zero() && expected > left {
                return Err(MongoError::overloaded(format!(
                    "the {} queue predicts the operation would finish in {} ms but it has \
                     {} ms left; not started, safe to retry",
                    self.name,
                    expected.as_millis(),
                    left.as_millis()
                )));
            }
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let leaving = Leaving(self);
        let acquire = self.permits.clone().acquire_owned();
        let permit = match remaining {
            None => acquire.await,
            Some(left) => match tokio::time::timeout(left, acquire).await {
                Ok(p) => p,
                Err(_) => return Err(expired(self.name)),
            },
        }
        .map_err(|_| MongoError::new(ErrorCode::ShutdownInProgress, "shutting down"))?;
        std::mem::forget(leaving);
        Ok(Ticket {
            pool: self.clone(),
            _permit: permit,
            granted: Instant::now(),
            queued: arrived.elapsed(),
        })
    }
}

fn expired(pool: &str) -> MongoError {
    MongoError::new(
        ErrorCode::MaxTimeMSExpired,
        format!("operation exceeded time limit while queued for a {pool} ticket"),
    )
}

/// The read and write pools of one node.
pub struct Admission {
    pub reads: Arc<Pool>,
    pub writes: Arc<Pool>,
    /// The read ticket count follows measured throughput (`throughput_probe`) unless
    /// it was configured explicitly.
    probing: std::sync::atomic::AtomicBool,
    /// Bounds of the probed read ticket count.
    probe_bounds: parking_lot::Mutex<(usize, usize)>,
}

/// Default tickets: reads one per core (mongod 8's starting point; more tickets than
/// cores make every CPU-bound read slower, so more of them miss their deadlines: on 2
/// cores overload-bench keeps 85% of capacity as goodput with 2 tickets, 64-74% with 4), and
/// writes generous because a write holds its ticket through replication (group commit
/// needs many writes in flight).
pub fn default_limits() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores.max(2), 128)
}

/// The probed read ticket count stays within one and four per core by default.
fn default_probe_bounds() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (1, 4 * cores)
}

impl Admission {
    pub fn new(read_tickets: usize, write_tickets: usize) -> Admission {
        let (r, w) = default_limits();
        Admission {
            reads: Pool::new(
                Class::Read,
                if read_tickets == 0 { r } else { read_tickets },
            ),
            writes: Pool::new(
                Class::Write,
                if write_tickets == 0 { w } else { write_tickets },
            ),
            probing: std::sync::atomic::AtomicBool::new(read_tickets == 0),
            probe_bounds: parking_lot::Mutex::new(default_probe_bounds()),
        }
    }

    /// Sets the ticket counts (0 keeps the default).
    pub fn configure(&self, read_tickets: usize, write_tickets: usize) {
        if read_tickets > 0 {
            self.probing.store(false, Ordering::Relaxed);
            self.reads.set_limit(read_tickets);
        }
        if write_tickets > 0 {
            self.writes.set_limit(write_tickets);
        }
    }

    /// No queue and no shedding: every command runs at once, as with unlimited tickets.
    /// Only for comparing against admission control.
    pub fn disable(&self) {
        self.probing.store(false, Ordering::Relaxed);
        for p in [&self.reads, &self.writes] {
            p.set_limit(100_000);
            p.set_shedding(false);
        }
    }

    /// Sets the bounds of the probed read ticket count (0 keeps a default).
    pub fn set_probe_bounds(&self, min: usize, max: usize) {
        let (dmin, dmax) = default_probe_bounds();
        let min = if min == 0 { dmin } else { min };
        let max = if max == 0 {
            dmax.max(min)
        } else {
            max.max(min)
        };
        *self.probe_bounds.lock() = (min, max);
    }

    pub fn probe_bounds(&self) -> (usize, usize) {
        *self.probe_bounds.lock()
    }

    /// Whether the read ticket count is being probed.
    pub fn probing(&self) -> bool {
        self.probing.load(Ordering::Relaxed)
    }

    /// `None` for exempt commands.
    pub async fn admit(&self, class: Class, deadline: Deadline) -> MongoResult<Option<Ticket>> {
        match class {
            Class::Exempt => Ok(None),
            Class::Read => self.reads.admit(deadline).await.map(Some),
            Class::Write => self.writes.admit(deadline).await.map(Some),
        }
    }
}

impl Default for Admission {
    fn default() -> Self {
        Admission::new(0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(ms: u64) -> Deadline {
        Deadline::after_ms(ms)
    }

    #[tokio::test]
    async fn tickets_are_granted_in_arrival_order() {
        let pool = Pool::new(Class::Read, 1);
        let first = pool.admit(Deadline::default()).await.unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..5 {
            let (pool, order) = (pool.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let t = pool.admit(Deadline::default()).await.unwrap();
                order.lock().unwrap().push(i);
                drop(t);
            }));
            // Let each waiter join the queue before the next arrives.
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.queued(), 5);
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(pool.queued(), 0);
    }

    #[tokio::test]
    async fn expired_work_never_starts_and_leaves_the_queue() {
        let pool = Pool::new(Class::Read, 1);
        let past = Deadline(Some(Instant::now() - Duration::from_millis(1)));
        let e = pool.admit(past).await.err().unwrap();
        assert_eq!(e.code, ErrorCode::MaxTimeMSExpired as i32);
        let held = pool.admit(Deadline::default()).await.unwrap();
        let e = pool.admit(within(30)).await.err().unwrap();
        assert_eq!(e.code, ErrorCode::MaxTimeMSExpired as i32);
        assert_eq!(pool.queued(), 0, "the expired waiter left the queue");
        drop(held);
        assert!(pool.admit(within(1_000)).await.is_ok());
    }

    #[tokio::test]
    async fn work_that_cannot_finish_in_time_is_shed_at_once() {
        let pool = Pool::new(Class::Write, 1);
        // Teach the pool that a ticket is held for about 100 ms.
        for _ in 0..64 {
            pool.record(Duration::from_millis(100));
        }
        let held = pool.admit(Deadline::default()).await.unwrap();
        let queued = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.admit(Deadline::default()).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(pool.queued(), 1);
        let e = pool.admit(within(50)).await.err().unwrap();
        assert_eq!(
            e.code,
            ErrorCode::IngressRequestRateLimitExceeded as i32,
            "{}",
            e.message
        );
        let labels = e.to_document().get_array("errorLabels").cloned();
        assert_eq!(
            labels.ok(),
            Some(vec![
                "SystemOverloadedError".into(),
                "RetryableError".into()
            ])
        );
        assert_eq!(
            pool.queued(),
            1,
            "the refused command never joined the queue"
        );
        // A deadline the queue can meet is admitted in turn.
        let patient = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.admit(within(10_000)).await.map(|_| ()) })
        };
        drop(held);
        patient.await.unwrap().unwrap();
        queued.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_free_ticket_is_never_refused_however_slow_the_last_commands_were() {
        let pool = Pool::new(Class::Read, 2);
        for _ in 0..64 {
            pool.record(Duration::from_millis(100));
        }
        // Nobody ahead: a 5 ms deadline gets the ticket, and its run corrects the mean.
        let admitted = pool.admit(within(5)).await;
        assert!(admitted.is_ok(), "{:?}", admitted.err());
    }
}
