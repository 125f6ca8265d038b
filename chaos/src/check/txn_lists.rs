//! The transactional workload's verdict (`txn_workload`): its history is valid under
//! snapshot isolation (`si`), with the lists read after the run as its last
//! transaction, and every append of a committed transaction is in those lists.

use serde::Serialize;

use super::si::{self, MicroOp, Txn};

#[derive(Debug, Serialize)]
pub struct Report {
    pub si: si::Report,
    /// Appends of committed transactions missing from the lists after the run.
    pub lost: Vec<(u32, i64)>,
    /// Committed transactions that appended: none means the workload's writes all
    /// failed, and the history proves nothing about them.
    pub committed_writers: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.si.ok() && self.lost.is_empty() && self.committed_writers > 0
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "transactions: {} committed ({} with appends), {} failed, {} unknown; {}; {} committed appends lost",
            self.si.committed,
            self.committed_writers,
            self.si.failed,
            self.si.unknown,
            if self.si.ok() {
                "valid under snapshot isolation"
            } else {
                "NOT valid under snapshot isolation"
            },
            self.lost.len()
        );
        if !self.si.ok() {
            s.push_str(&format!("\n{}", self.si));
        }
        s
    }
}

/// Checks `history` with `last`, the lists as read after the run.
pub fn check(mut history: Vec<Txn>, last: Txn) -> Report {
    let committed_writers = history
        .iter()
        .filter(|t| t.committed())
        .filter(|t| t.ops.iter().any(|op| matches!(op, MicroOp::Append { .. })))
        .count();
    let lost = history
        .iter()
        .filter(|t| t.committed())
        .flat_map(|t| &t.ops)
        .filter_map(|op| match op {
            MicroOp::Append { key, value } => Some((*key, *value)),
            MicroOp::Read { .. } => None,
        })
        .filter(|(key, value)| {
            !last.ops.iter().any(|op| {
                matches!(op, MicroOp::Read { key: k, value: Some(l) } if k == key && l.contains(value))
            })
        })
        .collect();
    history.push(last);
    Report {
        si: si::check(&history),
        lost,
        committed_writers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Outcome;

    fn txn(ops: Vec<MicroOp>, outcome: Outcome) -> Txn {
        Txn {
            client: 0,
            ops,
            outcome,
            invoked: 0,
            completed: 0,
        }
    }

    #[test]
    fn a_committed_append_missing_afterwards_is_lost() {
        let appended = txn(vec![MicroOp::Append { key: 1, value: 7 }], Outcome::Ok);
        let failed = txn(vec![MicroOp::Append { key: 1, value: 8 }], Outcome::Fail);
        let empty = txn(
            vec![MicroOp::Read {
                key: 1,
                value: Some(vec![]),
            }],
            Outcome::Ok,
        );
        let report = check(vec![appended.clone(), failed.clone()], empty);
        assert_eq!(report.lost, vec![(1, 7)]);
        assert!(!report.ok());
        let kept = txn(
            vec![MicroOp::Read {
                key: 1,
                value: Some(vec![7]),
            }],
            Outcome::Ok,
        );
        let report = check(vec![appended, failed], kept);
        assert!(report.ok(), "{}", report.summary());
    }
}
