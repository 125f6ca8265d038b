//! The checker's verdict, for a program and for a human.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::{Anomaly, Txn};
use crate::history::Outcome;

/// How many anomalies of one name [`Report`]'s `Display` spells out.
const SHOWN_PER_NAME: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub txns: usize,
    pub committed: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Everything found: violations, and cycles snapshot isolation allows (G2-item).
    pub anomalies: Vec<Anomaly>,
    /// No anomaly that snapshot isolation forbids.
    pub valid_under_si: bool,
}

impl Report {
    pub(super) fn new(history: &[Txn], anomalies: Vec<Anomaly>) -> Self {
        let count = |o: Outcome| history.iter().filter(|t| t.outcome == o).count();
        Report {
            txns: history.len(),
            committed: count(Outcome::Ok),
            failed: count(Outcome::Fail),
            unknown: count(Outcome::Unknown),
            valid_under_si: !anomalies.iter().any(Anomaly::violates_si),
            anomalies,
        }
    }

    pub fn ok(&self) -> bool {
        self.valid_under_si
    }

    /// How many anomalies of each name.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for a in &self.anomalies {
            *counts.entry(a.name()).or_default() += 1;
        }
        counts
    }

    /// The anomalies named `name`.
    pub fn named<'r>(&'r self, name: &'r str) -> impl Iterator<Item = &'r Anomaly> {
        self.anomalies.iter().filter(move |a| a.name() == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} transactions ({} committed, {} failed, {} unknown): ",
            self.txns, self.committed, self.failed, self.unknown
        )?;
        let verdict = if self.valid_under_si {
            "valid"
        } else {
            "NOT valid"
        };
        write!(f, "{verdict} under snapshot isolation")?;
        for (title, violation) in [
            ("violations", true),
            ("allowed under snapshot isolation", false),
        ] {
            let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
            let group: Vec<&Anomaly> = self
                .anomalies
                .iter()
                .filter(|a| a.violates_si() == violation)
                .collect();
            if !group.is_empty() {
                write!(f, "\n{title}:")?;
            }
            for a in group {
                let n = shown.entry(a.name()).or_default();
                *n += 1;
                if *n <= SHOWN_PER_NAME {
                    write!(f, "\n  {a}")?;
                }
            }
            for (name, n) in shown.into_iter().filter(|(_, n)| *n > SHOWN_PER_NAME) {
                write!(f, "\n  ... {} more {name}", n - SHOWN_PER_NAME)?;
            }
        }
        Ok(())
    }
}
