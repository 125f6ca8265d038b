//! No acknowledged write lost, none applied twice, none invented: every acknowledged
//! append is in its list exactly once, an append that failed is absent, one whose outcome
//! is unknown is there at most once, and nothing is there that no client appended.

use std::collections::HashMap;

use serde::Serialize;

use crate::history::{History, Op, Outcome};

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub acknowledged: usize,
    pub unknown: usize,
    /// Unknown-outcome appends that turned out to be applied.
    pub unknown_applied: usize,
    pub lost: Vec<i64>,
    pub duplicated: Vec<i64>,
    /// Present although the append failed, or never attempted.
    pub unexpected: Vec<i64>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.lost.is_empty() && self.duplicated.is_empty() && self.unexpected.is_empty()
    }
}

/// `lists`: each list key and the values it holds after the run.
pub fn check(history: &History, lists: &[(u32, Vec<i64>)]) -> Report {
    let mut present: HashMap<(u32, i64), usize> = HashMap::new();
    for (key, vals) in lists {
        for v in vals {
            *present.entry((*key, *v)).or_default() += 1;
        }
    }
    let mut r = Report::default();
    let mut attempted: HashMap<(u32, i64), Outcome> = HashMap::new();
    for e in &history.events {
        let Op::Append { value } = e.op else { continue };
        attempted.insert((e.key, value), e.outcome);
        let n = present.get(&(e.key, value)).copied().unwrap_or(0);
        match e.outcome {
            Outcome::Ok => {
                r.acknowledged += 1;
                if n == 0 {
                    r.lost.push(value);
                }
            }
            Outcome::Unknown => {
                r.unknown += 1;
                r.unknown_applied += usize::from(n > 0);
            }
            Outcome::Fail if n > 0 => r.unexpected.push(value),
            Outcome::Fail => {}
        }
        if n > 1 {
            r.duplicated.push(value);
        }
    }
    for (k, v) in present.keys() {
        if !attempted.contains_key(&(*k, *v)) {
            r.unexpected.push(*v);
        }
    }
    for list in [&mut r.lost, &mut r.duplicated, &mut r.unexpected] {
        list.sort_unstable();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Event;

    fn append(key: u32, value: i64, outcome: Outcome) -> Event {
        Event {
            client: 0,
            key,
            op: Op::Append { value },
            outcome,
            invoked: 0,
            completed: 1,
            code: 0,
        }
    }

    #[test]
    fn every_kind_of_anomaly_is_found() {
        let h = History {
            events: vec![
                append(1, 10, Outcome::Ok),
                append(1, 11, Outcome::Ok),      // lost
                append(1, 12, Outcome::Unknown), // applied
                append(2, 20, Outcome::Ok),      // applied twice
                append(2, 21, Outcome::Fail),    // applied though it failed
                append(2, 22, Outcome::Unknown), // not applied: fine
            ],
        };
        let r = check(&h, &[(1, vec![10, 12, 99]), (2, vec![20, 20, 21])]);
        assert_eq!(r.lost, vec![11]);
        assert_eq!(r.duplicated, vec![20]);
        assert_eq!(r.unexpected, vec![21, 99]);
        assert_eq!((r.acknowledged, r.unknown, r.unknown_applied), (3, 2, 1));
        assert!(!r.ok());
    }

    #[test]
    fn a_clean_run_passes() {
        let h = History {
            events: vec![append(1, 1, Outcome::Ok), append(1, 2, Outcome::Unknown)],
        };
        assert!(check(&h, &[(1, vec![1])]).ok());
    }
}
