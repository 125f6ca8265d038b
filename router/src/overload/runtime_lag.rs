//! How late the router's runtime runs its tasks: one task asks to wake every [`TICK`] and
//! measures how much it overslept. When every worker thread is busy, or the OS gives the
//! process less CPU than it asks for, every task waits about that long each time it is
//! woken: a queue nobody sees, in front of every command at every step.
//!
//! Why it matters: under overload a router's commands all slow down together until they
//! outlast their clients' deadlines. A driver closes the connection of an operation that
//! timed out after it was sent, and opens another, so the router also pays a handshake
//! for every timeout: the overload turns into a connection storm and goodput collapses.
//! With the lag known, a command is answered at once as overloaded (462
//! `IngressRequestRateLimitExceeded`, retryable after a backoff) when the lag is a sizeable fraction of its deadline (`commands/forward.rs`):
//! the client keeps its connection and the rest of its time, and the router does the work
//! it can finish.
//!
//! How many to shed: a threshold on the lag (shed every command past it) oscillates — the
//! lag falls once everything is shed, everything is admitted, it rises again — and sheds
//! about twice the excess. Instead a proportional-integral controller (PIE's, RFC 8033,
//! on the runtime's lag instead of a packet queue's delay) moves a shedding probability
//! every tick: up while the lag is above its target, faster while it grows, down once it
//! is below. Under a steady overload the probability settles near the excess fraction,
//! and the lag near its target.
//!
//! **Transit.** The timer's lag sees only the runtime's own queue. With the router and the
//! members sharing cores, the queue is mostly elsewhere: in the OS scheduler between the
//! processes, and in the gRPC connection to the member. A forwarded command's *transit*
//! (its call to the member minus the member's reported queue and execution) measures
//! it. Beyond an allowance ([`TRANSIT_ALLOWANCE`]) the transit drives the probability, as
//! the lag does. A call the router gave up on (no answer before its share of the deadline ran out)
//! is a sample too, of the time it waited (`deadline::within`): counting only the calls
//! that came back, the estimate went stale exactly when the transit was longest.
//! Measured with `bulwark chaos overload`: with clients that keep 800
//! connections, the timer's lag stayed at 1–15 ms while commands spent 15–70 ms in
//! transit and half of them timed out, and almost nothing was shed.
//!
//! **Cannot finish.** A command whose whole `maxTimeMS` is shorter than the time by which
//! the router's answers are due now (`answer_time`) is refused at once, whatever the
//! probability: clients whose deadlines were mostly used up in their own connection queue
//! (a CSOT driver sends what is left) then cost the cluster a refusal, not an answer
//! nobody reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::overload::answer_time::AnswerTime;

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
/// The lag the controller steers to, in microseconds: a thirty-second of the 100 ms
/// deadlines of the overload experiment's clients (`chaos/src/overload.rs`), above the
/// timer's noise.
const TARGET_LAG_US: f64 = 3_000.0;
/// Probability added per tick per millisecond of lag above the target (the integral part:
/// 10 ms above it raises the probability by 0.02 a tick, 0.2 in 50 ms).
const ALPHA_PER_MS: f64 = 0.002;
/// Probability added per tick per millisecond the lag grew since the last tick (the
/// proportional part: it reacts to a building queue before the queue is long).
const BETA_PER_MS: f64 = 0.01;
/// Never shed everything: some commands keep getting through, so the lag they see keeps
/// telling the controller the truth.
const MAX_SHED: f64 = 0.95;
/// Probabilities are stored in millionths.
const SCALE: f64 = 1_000_000.0;
/// The transit the controller lets commands spend, a fifth of the 100 ms deadlines of the
/// overload experiment's clients: beyond it the transit drives the shedding probability as the
/// lag does beyond [`TARGET_LAG_US`]. On this 2-core host the transit is 2–10 ms at half
/// of capacity (the scheduler's latency with nine processes on one core) and 15–70 ms at
/// 130%: steering it to 3 ms shed 20–90% of an underloaded cluster's commands.
const TRANSIT_ALLOWANCE: Duration = Duration::from_millis(20);
/// A transit with no new sample for this many ticks is halved each tick: once every
/// command is refused as unable to finish, no command measures the transit any more, and
/// an old high value must not refuse short deadlines for ever.
const TRANSIT_STALE_TICKS: u32 = 20;

/// The smoothed lag, the transit and the shedding probability. One task writes the lag
/// and the probability; commands read them, and one forwarded command in eight per
/// connection writes the transit (sampled, so it is not a word every command writes).
#[derive(Default)]
pub struct RuntimeLag {
    micros: AtomicU64,
    /// Shedding probability, in millionths.
    shed: AtomicU64,
    /// Forwarded commands' transit, microseconds (EWMA, 1/8 weight per sample).
    transit: AtomicU64,
    /// Transit samples so far (the tick notices when they stop).
    transit_samples: AtomicU64,
    /// The controller's previous input, microseconds (written by the tick task only).
    pressure: AtomicU64,
    /// Forwarded commands' time to an answer (see `answer_time`).
    pub answer: AnswerTime,
}

impl RuntimeLag {
    pub fn current(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    /// Recent forwarded commands' transit (see the module docs).
    pub fn transit(&self) -> Duration {
        Duration::from_micros(self.transit.load(Ordering::Relaxed))
    }

    /// One forwarded command's transit. Callers sample (a connection records one command
    /// in eight), so the average is not a word every command writes.
    pub fn record_transit(&self, transit: Duration) {
        let sample = transit.as_micros().min(u64::MAX as u128) as u64;
        let old = self.transit.load(Ordering::Relaxed);
        self.transit
            .store(old - old / 8 + sample / 8, Ordering::Relaxed);
        self.transit_samples.fetch_add(1, Ordering::Relaxed);
    }

    /// The transit in excess of its allowance, on the lag's scale: zero up to
    /// [`TRANSIT_ALLOWANCE`] above the lag's target.
    fn transit_pressure(&self) -> u64 {
        let allowance = TRANSIT_ALLOWANCE.as_micros() as u64 - TARGET_LAG_US as u64;
        self.transit
            .load(Ordering::Relaxed)
            .saturating_sub(allowance)
    }

    /// What the controller steers on: the lag, or the transit beyond its allowance.
    pub fn pressure(&self) -> Duration {
        Duration::from_micros(self.pressure.load(Ordering::Relaxed))
    }

    /// True when a command's whole deadline is shorter than the time by which the router's
    /// answers are due now (`answer_time`): it would most likely expire. Below
    /// [`MIN_SHED_LAG`] that time is the scheduler's noise, and nothing is refused.
    pub fn cannot_finish(&self, max_time_ms: u64) -> bool {
        let due = self.answer.due();
        due >= MIN_SHED_LAG && Duration::from_millis(max_time_ms) < due
    }

    /// The probability that an eligible command is shed now.
    pub fn shed_probability(&self) -> f64 {
        self.shed.load(Ordering::Relaxed) as f64 / SCALE
    }

    /// True when a command with `max_time_ms` should be refused. It is eligible when the
    /// lag is a standing queue and at least half a [`DEADLINE_FRACTION`]th of its deadline
    /// (the lag matters to it); an eligible command is refused with the controller's
    /// probability. Commands without a deadline are never refused.
    pub fn should_shed(&self, max_time_ms: u64) -> bool {
        let lag = self.pressure();
        let eligible = max_time_ms > 0
            && lag >= MIN_SHED_LAG
            && lag * DEADLINE_FRACTION * 2 >= Duration::from_millis(max_time_ms);
        if !eligible {
            return false;
        }
        let p = self.shed.load(Ordering::Relaxed);
        p > 0 && rand::random::<u32>() as u64 % SCALE as u64 <= p
    }

    /// Measures until `shutdown`.
    pub fn spawn(self: &Arc<Self>, tasks: &TaskTracker, shutdown: CancellationToken) {
        let lag = self.clone();
        tasks.spawn(async move {
            let (mut samples, mut idle_ticks) = (0, 0);
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
                let seen = lag.transit_samples.load(Ordering::Relaxed);
                idle_ticks = if seen == samples { idle_ticks + 1 } else { 0 };
                samples = seen;
                // The answer time is sampled with the transit (`conn`, `deadline`), so
                // the transit's count tells when both went stale.
                if idle_ticks >= TRANSIT_STALE_TICKS {
                    lag.transit
                        .store(lag.transit.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
                    lag.answer.fade();
                }
                lag.record(late);
            }
        });
    }

    /// Exponential moving average, each sample weighing a quarter: a few ticks (tens of
    /// milliseconds) to follow a change, one late tick does not shed.
    fn record(&self, late_us: u64) {
        let old = self.micros.load(Ordering::Relaxed);
        let new = (old * 3 + late_us) / 4;
        self.micros.store(new, Ordering::Relaxed);
        let pressure = new.max(self.transit_pressure());
        let before = self.pressure.swap(pressure, Ordering::Relaxed);
        let above_ms = (pressure as f64 - TARGET_LAG_US) / 1000.0;
        let grew_ms = (pressure as f64 - before as f64) / 1000.0;
        let p = self.shed_probability() + ALPHA_PER_MS * above_ms + BETA_PER_MS * grew_ms;
        let p = p.clamp(0.0, MAX_SHED);
        self.shed.store((p * SCALE) as u64, Ordering::Relaxed);
    }
}

/// A connection records the transit of one forwarded command in this many.
const TRANSIT_SAMPLE_EVERY: u8 = 8;

/// Picks one forwarded call in [`TRANSIT_SAMPLE_EVERY`] per connection to measure the
/// transit the shedder steers on, so the average is not a word every command writes.
#[derive(Default)]
pub struct TransitSampler(u8);

impl TransitSampler {
    /// True for every [`TRANSIT_SAMPLE_EVERY`]th call.
    pub fn due(&mut self) -> bool {
        self.0 = self.0.wrapping_add(1);
        self.0.is_multiple_of(TRANSIT_SAMPLE_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of 10,000 commands with `max_time_ms` are shed.
    fn shed_of_10k(lag: &RuntimeLag, max_time_ms: u64) -> usize {
        (0..10_000).filter(|_| lag.should_shed(max_time_ms)).count()
    }

    #[test]
    fn a_standing_lag_raises_the_shedding_probability_and_its_end_lowers_it() {
        let lag = RuntimeLag::default();
        assert_eq!(shed_of_10k(&lag, 100), 0);
        // 40 ms late for 50 ticks (a quarter of a second): a standing queue.
        for _ in 0..50 {
            lag.record(40_000);
        }
        assert!(lag.current() > Duration::from_millis(35));
        assert!(lag.shed_probability() > 0.9, "{}", lag.shed_probability());
        assert!(shed_of_10k(&lag, 100) > 8_500);
        // Never all of them, and never a command without a deadline, nor one whose
        // deadline dwarfs the lag.
        assert!(shed_of_10k(&lag, 100) < 10_000);
        assert_eq!(shed_of_10k(&lag, 0), 0);
        assert_eq!(shed_of_10k(&lag, 10_000), 0);
        // Back under the target: the probability decays to nothing.
        for _ in 0..400 {
            lag.record(0);
        }
        assert_eq!(lag.shed_probability(), 0.0);
        assert_eq!(shed_of_10k(&lag, 100), 0);
    }

    #[test]
    fn a_deadline_shorter_than_an_answer_takes_cannot_finish() {
        let lag = RuntimeLag::default();
        assert!(!lag.cannot_finish(1));
        // Answers take 4–6 ms: due by about 9 ms.
        for i in 0..64 {
            lag.answer
                .record(Duration::from_millis(if i % 2 == 0 { 4 } else { 6 }), false);
        }
        assert!(lag.cannot_finish(5), "due {:?}", lag.answer.due());
        assert!(!lag.cannot_finish(50));
        // Answers within the scheduler's noise refuse nothing, even the shortest deadline.
        let quick = RuntimeLag::default();
        for _ in 0..64 {
            quick.answer.record(Duration::from_micros(800), false);
        }
        assert!(!quick.cannot_finish(1));
        // The transit alone no longer refuses: it is part of an answer's time.
        let transit_only = RuntimeLag::default();
        for _ in 0..64 {
            transit_only.record_transit(Duration::from_millis(10));
        }
        assert!(!transit_only.cannot_finish(5));
    }

    #[test]
    fn a_transit_beyond_its_allowance_raises_the_shedding_probability() {
        let lag = RuntimeLag::default();
        // Within the allowance: the scheduler's noise, not a queue.
        for _ in 0..64 {
            lag.record_transit(TRANSIT_ALLOWANCE / 2);
        }
        for _ in 0..100 {
            lag.record(0);
        }
        assert_eq!(lag.shed_probability(), 0.0);
        // Far beyond it while the timer is on time: the queue is outside the runtime.
        for _ in 0..64 {
            lag.record_transit(TRANSIT_ALLOWANCE * 3);
        }
        for _ in 0..50 {
            lag.record(0);
        }
        assert_eq!(lag.current(), Duration::ZERO);
        assert!(lag.shed_probability() > 0.5, "{}", lag.shed_probability());
        assert!(shed_of_10k(&lag, 100) > 4_000);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn estimates_nobody_measures_any_more_fade() {
        let lag = Arc::new(RuntimeLag::default());
        for _ in 0..64 {
            lag.record_transit(Duration::from_millis(40));
            lag.answer.record(Duration::from_millis(40), false);
        }
        let tasks = TaskTracker::new();
        let stop = CancellationToken::new();
        lag.spawn(&tasks, stop.clone());
        // 20 ticks without a sample, then halved every tick.
        tokio::time::sleep(Duration::from_millis(400)).await;
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        assert!(
            lag.transit() < Duration::from_millis(1),
            "{:?}",
            lag.transit()
        );
        assert!(!lag.cannot_finish(5));
    }

    #[test]
    fn a_lag_held_at_its_target_keeps_the_probability_steady() {
        let lag = RuntimeLag::default();
        for _ in 0..100 {
            lag.record(10_000);
        }
        let high = lag.shed_probability();
        // The lag settles at the target (the load now matches what is admitted): the
        // probability stops moving instead of swinging back to zero.
        for _ in 0..40 {
            lag.record(TARGET_LAG_US as u64);
        }
        let settled = lag.shed_probability();
        for _ in 0..40 {
            lag.record(TARGET_LAG_US as u64);
        }
        assert!(settled > 0.1 && settled <= high, "{high} then {settled}");
        assert!((lag.shed_probability() - settled).abs() < 0.01);
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
