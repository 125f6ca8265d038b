//! Per-second figures from a history — successful operations, errors, and the p99
//! latency of successful operations — as the [`plot`](crate::plot) draws them and the
//! report records them.

use crate::check::recovery::ok_per_sec;
use crate::history::{History, Outcome};
use crate::plot::{FaultMark, Timeline};

pub fn from_history(
    history: &History,
    secs: usize,
    title: &str,
    faults: Vec<FaultMark>,
) -> Timeline {
    let mut errors = vec![0.0; secs];
    let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); secs];
    for e in &history.events {
        let s = (e.completed / 1_000_000_000) as usize;
        if s >= secs {
            continue;
        }
        if e.outcome == Outcome::Ok {
            latencies[s].push(e.completed - e.invoked);
        } else {
            errors[s] += 1.0;
        }
    }
    let p99_ms = latencies
        .into_iter()
        .map(|mut l| quantile_ms(&mut l, 0.99))
        .collect();
    Timeline {
        title: title.into(),
        bucket_secs: 1.0,
        ok_per_sec: ok_per_sec(history, secs),
        errors_per_sec: errors,
        p99_ms,
        faults,
    }
}

/// "N ok, N failed, N unknown".
pub fn counts(history: &History) -> String {
    let n = |o: Outcome| history.events.iter().filter(|e| e.outcome == o).count();
    format!(
        "{} ok, {} failed, {} unknown",
        n(Outcome::Ok),
        n(Outcome::Fail),
        n(Outcome::Unknown)
    )
}

/// The `q` quantile of durations in nanoseconds, in milliseconds (0 for no samples).
pub fn quantile_ms(nanos: &mut [u64], q: f64) -> f64 {
    if nanos.is_empty() {
        return 0.0;
    }
    nanos.sort_unstable();
    let i = ((nanos.len() as f64 * q) as usize).min(nanos.len() - 1);
    nanos[i] as f64 / 1e6
}
