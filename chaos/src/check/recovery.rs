//! Recovery: after the fault ends, throughput returns to its pre-fault level within a
//! bound, with no manual step. Also measures how long the workload saw no successful
//! operation at all once the fault began (for a failover, the failover time).

use serde::Serialize;

use crate::history::{History, Nanos, Outcome};

/// Throughput counts as recovered at this fraction of the pre-fault median.
pub const RECOVERED_FRACTION: f64 = 0.7;
/// Over this many consecutive seconds.
const SUSTAINED_SECS: usize = 3;
/// The baseline is the median of the last this many seconds before the fault: the
/// workloads' operations cost more as the run goes on (lists and histories grow), so
/// throughput drifts down without any fault, and the run's first seconds would set a
/// level the cluster no longer had when the fault came.
const BASELINE_SECS: usize = 5;

#[derive(Debug, Serialize)]
pub struct Report {
    /// Median successful operations per second over the seconds just before the fault.
    pub baseline_ops: f64,
    /// Seconds after the fault ended until throughput was back to
    /// `RECOVERED_FRACTION × baseline` for `SUSTAINED_SECS` seconds (None: never).
    pub recovered_after_secs: Option<f64>,
    pub bound_secs: f64,
    /// Longest stretch without any successful operation, from the fault's start on.
    pub longest_outage_secs: f64,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.baseline_ops > 0.0
            && self
                .recovered_after_secs
                .is_some_and(|s| s <= self.bound_secs)
    }
}

/// Successful operations completed in each one-second bucket.
pub fn ok_per_sec(history: &History, secs: usize) -> Vec<f64> {
    let mut b = vec![0.0; secs];
    for e in history.events.iter().filter(|e| e.outcome == Outcome::Ok) {
        if let Some(x) = b.get_mut((e.completed / 1_000_000_000) as usize) {
            *x += 1.0;
        }
    }
    b
}

/// The baseline window is the last [`BASELINE_SECS`] seconds before `fault_start`, none
/// before `warmup`; the fault ran until `fault_end`.
pub fn check(
    history: &History,
    warmup: usize,
    fault_start: usize,
    fault_end: usize,
    total: usize,
    bound_secs: f64,
) -> Report {
    let ops = ok_per_sec(history, total);
    let from = warmup.max(fault_start.saturating_sub(BASELINE_SECS));
    let mut before: Vec<f64> = ops[from.min(fault_start)..fault_start].to_vec();
    before.sort_by(f64::total_cmp);
    let baseline_ops = before.get(before.len() / 2).copied().unwrap_or(0.0);
    let target = baseline_ops * RECOVERED_FRACTION;
    let recovered_after_secs = (fault_end..total.saturating_sub(SUSTAINED_SECS - 1))
        .find(|&t| ops[t..t + SUSTAINED_SECS].iter().all(|&x| x >= target))
        .map(|t| (t - fault_end) as f64);
    // Completion times of successful operations, to find the longest gap.
    let start = fault_start as Nanos * 1_000_000_000;
    let mut times: Vec<Nanos> = history
        .events
        .iter()
        .filter(|e| e.outcome == Outcome::Ok && e.completed >= start)
        .map(|e| e.completed)
        .collect();
    times.sort_unstable();
    let mut longest = 0;
    let mut prev = start;
    for t in times {
        longest = longest.max(t - prev);
        prev = t;
    }
    Report {
        baseline_ops,
        recovered_after_secs,
        bound_secs,
        longest_outage_secs: longest as f64 / 1e9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Event, Op};

    fn ok_at(sec: f64) -> Event {
        Event {
            client: 0,
            key: 0,
            op: Op::Write { value: 1 },
            outcome: Outcome::Ok,
            invoked: 0,
            completed: (sec * 1e9) as Nanos,
            code: 0,
        }
    }

    /// 10 ops/s, a gap from 10 s to 14.5 s, back to 10 ops/s after.
    fn history_with_gap(resume_at: f64, total: usize) -> History {
        let mut events = Vec::new();
        for tenth in 0..total * 10 {
            let t = tenth as f64 / 10.0;
            if !(10.0..resume_at).contains(&t) {
                events.push(ok_at(t));
            }
        }
        History { events }
    }

    #[test]
    fn measures_the_outage_and_the_recovery() {
        let r = check(&history_with_gap(14.5, 30), 2, 10, 12, 30, 10.0);
        assert_eq!(r.baseline_ops, 10.0);
        // Bucket 14 holds only 5 ops; 15, 16, 17 are full: recovered 3 s after the end.
        assert_eq!(r.recovered_after_secs, Some(3.0));
        assert!((r.longest_outage_secs - 4.5).abs() < 0.11, "{r:?}");
        assert!(r.ok());
    }

    #[test]
    fn the_baseline_is_the_level_just_before_the_fault() {
        // 20 ops/s until 7 s, then 10 ops/s to the fault at 10 s, and 8 ops/s after it: the
        // whole window before the fault would make 20 the baseline, and 8 not recovered.
        let mut events = Vec::new();
        for sec in 0..30 {
            let n = match sec {
                0..7 => 20,
                7..10 => 10,
                _ => 8,
            };
            events.extend((0..n).map(|i| ok_at(sec as f64 + f64::from(i) / f64::from(n))));
        }
        let r = check(&History { events }, 2, 10, 12, 30, 10.0);
        assert_eq!(r.baseline_ops, 10.0, "{r:?}");
        assert_eq!(r.recovered_after_secs, Some(0.0), "8 of 10 is back: {r:?}");
    }

    #[test]
    fn never_recovering_fails() {
        let r = check(&history_with_gap(1e9, 30), 2, 10, 12, 30, 10.0);
        assert_eq!(r.recovered_after_secs, None);
        assert!(!r.ok());
    }
}
