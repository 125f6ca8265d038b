//! Per-second figures from a history: successful operations, errors, and the p99
//! latency of successful operations; and the plot of them.

use serde::Serialize;

use crate::history::{History, Outcome};
use crate::plot::{FaultMark, Timeline as Plot};

#[derive(Debug, Serialize)]
pub struct Timeline {
    pub title: String,
    pub ok_per_sec: Vec<f64>,
    pub errors_per_sec: Vec<f64>,
    pub p99_ms: Vec<f64>,
    /// (label, start, end) in seconds.
    pub faults: Vec<(String, f64, Option<f64>)>,
}

impl Timeline {
    pub fn from_history(
        history: &History,
        secs: usize,
        title: &str,
        faults: Vec<(String, f64, Option<f64>)>,
    ) -> Timeline {
        let mut ok = vec![0.0; secs];
        let mut errors = vec![0.0; secs];
        let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); secs];
        for e in &history.events {
            let s = (e.completed / 1_000_000_000) as usize;
            if s >= secs {
                continue;
            }
            if e.outcome == Outcome::Ok {
                ok[s] += 1.0;
                latencies[s].push(e.completed - e.invoked);
            } else {
                errors[s] += 1.0;
            }
        }
        let p99_ms = latencies
            .into_iter()
            .map(|mut l| {
                if l.is_empty() {
                    return 0.0;
                }
                l.sort_unstable();
                l[(l.len() * 99 / 100).min(l.len() - 1)] as f64 / 1e6
            })
            .collect();
        Timeline {
            title: title.into(),
            ok_per_sec: ok,
            errors_per_sec: errors,
            p99_ms,
            faults,
        }
    }

    pub fn svg(&self) -> String {
        crate::plot::svg(&Plot {
            title: self.title.clone(),
            bucket_secs: 1.0,
            ok_per_sec: self.ok_per_sec.clone(),
            errors_per_sec: self.errors_per_sec.clone(),
            p99_ms: self.p99_ms.clone(),
            faults: self
                .faults
                .iter()
                .map(|(label, start, end)| FaultMark {
                    label: label.clone(),
                    start_secs: *start,
                    end_secs: *end,
                })
                .collect(),
        })
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
