//! Throughput probing: the read pool's ticket count follows what the machine can do,
//! like mongod's execution control since 7.0.
//!
//! Every interval the prober measures reads completed per second. While the tickets were
//! all in use it tries one step more; it keeps the step if throughput rose, and goes back
//! otherwise. While they were not all in use it tries one step fewer, and keeps it unless
//! throughput fell: fewer tickets for the same work means less contention and shorter
//! service times, which is what the queue's shedding predictions rest on. The count stays
//! within configured bounds.
//!
//! Only reads are probed. A write holds its ticket while it waits for replication, so the
//! write pool bounds the group-commit pipeline, not CPU work, and its throughput says
//! little about its size.
//!
//! The measurement reads counters the pool keeps anyway (tickets returned) and samples
//! whether tickets ran out from a background task, so probing adds nothing to the path of
//! a command.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::admission::Pool;

/// How long each measurement lasts.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// How often, within an interval, the prober looks whether all tickets are in use.
const SAMPLE: Duration = Duration::from_millis(10);
/// A step is kept only when throughput moves by more than this (noise).
const MARGIN: f64 = 0.05;
/// The step, as a fraction of the current count (at least one ticket).
const STEP: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Stable,
    Up,
    Down,
}

/// The probing decisions, separate from the clock so tests can drive them.
#[derive(Debug)]
pub struct Probe {
    state: State,
    /// The count in force before the current probe.
    stable: usize,
    stable_throughput: f64,
    min: usize,
    max: usize,
}

impl Probe {
    pub fn new(initial: usize, min: usize, max: usize) -> Probe {
        let min = min.max(1);
        let max = max.max(min);
        Probe {
            state: State::Stable,
            stable: initial.clamp(min, max),
            stable_throughput: 0.0,
            min,
            max,
        }
    }

    /// One interval's measurement at the current count; returns the count to use next.
    pub fn step(&mut self, throughput: f64, exhausted: bool) -> usize {
        match self.state {
            State::Stable => {
                self.stable_throughput = throughput;
                if exhausted && self.stable < self.max {
                    self.state = State::Up;
                    return self.probed_up();
                }
                if !exhausted && self.stable > self.min {
                    self.state = State::Down;
                    return self.probed_down();
                }
                self.stable
            }
            State::Up => {
                self.state = State::Stable;
                let probed = self.probed_up();
                if throughput > self.stable_throughput * (1.0 + MARGIN) {
                    self.stable = probed;
                }
                self.stable
            }
            State::Down => {
                self.state = State::Stable;
                let probed = self.probed_down();
                if throughput >= self.stable_throughput * (1.0 - MARGIN) {
                    self.stable = probed;
                }
                self.stable
            }
        }
    }

    fn step_size(&self) -> usize {
        ((self.stable as f64 * STEP).round() as usize).max(1)
    }

    fn probed_up(&self) -> usize {
        (self.stable + self.step_size()).min(self.max)
    }

    fn probed_down(&self) -> usize {
        self.stable.saturating_sub(self.step_size()).max(self.min)
    }
}

/// Probes `pool` until `shutdown`, while `enabled` says so (an explicitly configured
/// ticket count switches probing off, as in mongod).
pub async fn run(
    pool: Arc<Pool>,
    min: usize,
    max: usize,
    enabled: impl Fn() -> bool,
    shutdown: CancellationToken,
) {
    let mut probe = Probe::new(pool.limit(), min, max);
    let mut returned = pool.returned();
    let mut since = Instant::now();
    let mut exhausted = false;
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SAMPLE) => {}
        }
        exhausted |= pool.available() == 0;
        ticks += 1;
        if ticks < (INTERVAL.as_millis() / SAMPLE.as_millis()) as u32 {
            continue;
        }
        let now_returned = pool.returned();
        let throughput = (now_returned - returned) as f64 / since.elapsed().as_secs_f64();
        if enabled() {
            let next = probe.step(throughput, exhausted);
            if next != pool.limit() {
                pool.set_limit(next);
            }
        }
        returned = now_returned;
        since = Instant::now();
        exhausted = false;
        ticks = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine whose throughput grows with tickets up to `best`, then falls.
    fn machine(best: usize) -> impl Fn(usize) -> f64 {
        move |tickets| {
            let t = tickets as f64;
            let b = best as f64;
            if t <= b {
                1000.0 * t
            } else {
                1000.0 * b - 200.0 * (t - b)
            }
        }
    }

    #[test]
    fn under_load_the_count_climbs_to_what_the_machine_does_best_and_stays() {
        let tput = machine(6);
        let mut probe = Probe::new(2, 1, 32);
        let mut tickets = 2;
        let mut seen = Vec::new();
        for _ in 0..200 {
            tickets = probe.step(tput(tickets), true);
            seen.push(tickets);
        }
        // Settled: it stays at the best count, probing one above now and then.
        let tail = &seen[150..];
        assert!(tail.iter().all(|&t| t == 6 || t == 7), "{tail:?}");
        assert!(tail.iter().filter(|&&t| t == 6).count() >= tail.len() / 2);
    }

    #[test]
    fn without_load_it_gives_tickets_back_down_to_the_minimum() {
        // Throughput is whatever arrives (not limited by tickets).
        let mut probe = Probe::new(8, 2, 32);
        let mut tickets = 8;
        for _ in 0..100 {
            tickets = probe.step(500.0, false);
        }
        assert_eq!(tickets, 2);
    }

    #[test]
    fn the_count_never_leaves_its_bounds() {
        let tput = machine(100);
        let mut probe = Probe::new(1, 1, 5);
        let mut tickets = 1;
        for _ in 0..100 {
            tickets = probe.step(tput(tickets), true);
            assert!((1..=5).contains(&tickets), "{tickets}");
        }
        assert_eq!(tickets, 5);
        let mut probe = Probe::new(50, 3, 8);
        assert!(probe.step(1.0, false) <= 8);
    }

    #[test]
    fn a_probe_that_does_not_pay_is_undone() {
        // Flat throughput: more tickets buy nothing, so the count goes back.
        let mut probe = Probe::new(4, 1, 32);
        assert_eq!(probe.step(1000.0, true), 5);
        assert_eq!(probe.step(1000.0, true), 4);
    }

    /// Commands that each hold a ticket for 5 ms without using CPU: the more tickets, the
    /// more done, so a saturated pool's count must rise.
    async fn saturate(pool: &Arc<Pool>, clients: usize, stop: &CancellationToken) {
        for _ in 0..clients {
            let (pool, stop) = (pool.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    let t = pool
                        .admit(crate::control::deadline::Deadline::default())
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    drop(t);
                }
            });
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_saturated_pool_that_gains_from_tickets_gets_more() {
        let pool = Pool::new(crate::control::admission::Class::Read, 2);
        let stop = CancellationToken::new();
        saturate(&pool, 16, &stop).await;
        tokio::spawn(run(pool.clone(), 1, 8, || true, stop.clone()));
        let started = Instant::now();
        while pool.limit() <= 2 && started.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
        assert!(pool.limit() > 2, "probing never added a ticket");
        assert!(pool.limit() <= 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_explicit_ticket_count_is_left_alone() {
        let pool = Pool::new(crate::control::admission::Class::Read, 2);
        let stop = CancellationToken::new();
        saturate(&pool, 16, &stop).await;
        tokio::spawn(run(pool.clone(), 1, 8, || false, stop.clone()));
        tokio::time::sleep(INTERVAL * 6).await;
        stop.cancel();
        assert_eq!(pool.limit(), 2);
    }
}
