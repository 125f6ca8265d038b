//! The bank's verdict (`bank_workload`): every snapshot read sees every account, no
//! negative balance, and the total the bank started with; and the balances after the
//! run are what the committed transfers made of the start, give or take transfers whose
//! outcome is unknown.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::bank_workload::{BankOp, Step, ACCOUNTS, START};
use crate::history::Outcome;

/// At most this many bad reads are kept in the report.
const KEPT: usize = 10;

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub transfers_committed: usize,
    pub transfers_failed: usize,
    pub transfers_unknown: usize,
    /// Why transfers failed or may have: the most frequent answers (the first 80
    /// characters of each), with how many had each.
    pub transfer_errors: Vec<(String, usize)>,
    /// Reads checked, by kind.
    pub reads: BTreeMap<&'static str, usize>,
    /// Reads that broke the invariant (the first [`KEPT`]), and how many did.
    pub bad_reads: Vec<String>,
    pub bad_read_count: usize,
    /// Accounts whose balance after the run no committed history explains.
    pub unexplained_balances: Vec<String>,
}

impl Report {
    /// No broken read, every balance explained, and some transfer committed (without
    /// one the run says nothing about transfers).
    pub fn ok(&self) -> bool {
        self.bad_read_count == 0
            && self.unexplained_balances.is_empty()
            && self.transfers_committed > 0
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "bank: {} transfers committed, {} failed, {} unknown; {} snapshot reads ({}); {} broke the total; {} balances unexplained",
            self.transfers_committed,
            self.transfers_failed,
            self.transfers_unknown,
            self.reads.values().sum::<usize>(),
            self.reads
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.bad_read_count,
            self.unexplained_balances.len()
        );
        for line in self.bad_reads.iter().chain(&self.unexplained_balances) {
            s.push_str(&format!("\n  {line}"));
        }
        if let Some((e, n)) = self.transfer_errors.first() {
            s.push_str(&format!("\n  most frequent transfer error ({n}): {e}"));
        }
        s
    }
}

/// Checks the workers' `steps` and the balances read after the run.
pub fn check(steps: &[Step], last: &[(i64, i64)]) -> Report {
    let mut r = Report::default();
    let mut expected: BTreeMap<i64, i64> = (0..ACCOUNTS).map(|a| (a, START)).collect();
    let mut slack: BTreeMap<i64, i64> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for step in steps {
        match &step.op {
            BankOp::Transfer {
                from,
                to,
                amount,
                outcome,
                error,
            } => match outcome {
                Outcome::Ok => {
                    r.transfers_committed += 1;
                    *expected.entry(*from).or_default() -= amount;
                    *expected.entry(*to).or_default() += amount;
                }
                Outcome::Fail => {
                    r.transfers_failed += 1;
                    count_error(&mut errors, error);
                }
                Outcome::Unknown => {
                    r.transfers_unknown += 1;
                    count_error(&mut errors, error);
                    *slack.entry(*from).or_default() += amount;
                    *slack.entry(*to).or_default() += amount;
                }
            },
            BankOp::Read { how, balances } => {
                *r.reads.entry(how).or_default() += 1;
                if let Some(why) = broken(balances) {
                    r.bad_read_count += 1;
                    if r.bad_reads.len() < KEPT {
                        r.bad_reads.push(format!(
                            "client {} {how} at {:.3}s..{:.3}s: {why} in {balances:?}",
                            step.client,
                            step.invoked as f64 / 1e9,
                            step.completed as f64 / 1e9
                        ));
                    }
                }
            }
        }
    }
    let mut errors: Vec<(String, usize)> = errors.into_iter().collect();
    errors.sort_by_key(|e| std::cmp::Reverse(e.1));
    r.transfer_errors = errors.into_iter().take(KEPT).collect();
    *r.reads.entry("final read").or_default() += 1;
    if let Some(why) = broken(last) {
        r.bad_read_count += 1;
        r.bad_reads.push(format!("final read: {why} in {last:?}"));
    }
    for (account, want) in expected {
        let got = last
            .iter()
            .find(|(a, _)| *a == account)
            .map_or(0, |(_, n)| *n);
        let allowed = slack.get(&account).copied().unwrap_or(0);
        if (got - want).abs() > allowed {
            r.unexplained_balances.push(format!(
                "account {account}: {got} after the run, committed transfers make it {want}, unknown ones move at most {allowed}"
            ));
        }
    }
    r
}

fn count_error(errors: &mut BTreeMap<String, usize>, error: &Option<String>) {
    let e = error.as_deref().unwrap_or("timed out");
    *errors.entry(e.chars().take(80).collect()).or_default() += 1;
}

/// Why a snapshot of every balance cannot be right, if it cannot.
fn broken(balances: &[(i64, i64)]) -> Option<String> {
    let total: i64 = balances.iter().map(|(_, n)| n).sum();
    if balances.len() != ACCOUNTS as usize {
        Some(format!("{} accounts, not {ACCOUNTS}", balances.len()))
    } else if let Some((a, n)) = balances.iter().find(|(_, n)| *n < 0) {
        Some(format!("account {a} holds {n}"))
    } else if total != ACCOUNTS * START {
        Some(format!("total {total}, not {}", ACCOUNTS * START))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(op: BankOp) -> Step {
        Step {
            client: 1,
            invoked: 0,
            completed: 1,
            op,
        }
    }

    fn transfer(from: i64, to: i64, amount: i64, outcome: Outcome) -> Step {
        step(BankOp::Transfer {
            from,
            to,
            amount,
            outcome,
            error: None,
        })
    }

    fn start() -> Vec<(i64, i64)> {
        (0..ACCOUNTS).map(|a| (a, START)).collect()
    }

    fn moved(mut b: Vec<(i64, i64)>, from: i64, to: i64, amount: i64) -> Vec<(i64, i64)> {
        b[from as usize].1 -= amount;
        b[to as usize].1 += amount;
        b
    }

    #[test]
    fn a_consistent_history_passes() {
        let after = moved(start(), 0, 5, 30);
        let steps = [
            transfer(0, 5, 30, Outcome::Ok),
            transfer(1, 6, 10, Outcome::Fail),
            step(BankOp::Read {
                how: "transaction",
                balances: after.clone(),
            }),
        ];
        let r = check(&steps, &after);
        assert!(r.ok(), "{}", r.summary());
        assert_eq!((r.transfers_committed, r.transfers_failed), (1, 1));
    }

    #[test]
    fn a_run_without_a_committed_transfer_fails() {
        let r = check(&[transfer(0, 5, 30, Outcome::Fail)], &start());
        assert!(!r.ok(), "{}", r.summary());
    }

    #[test]
    fn a_torn_read_a_negative_balance_and_a_missing_account_are_found() {
        let torn = {
            let mut b = start();
            b[0].1 -= 30;
            b
        };
        let negative = moved(start(), 0, 5, START + 1);
        let missing = start()[1..].to_vec();
        for balances in [torn, negative, missing] {
            let steps = [step(BankOp::Read {
                how: "snapshot find",
                balances,
            })];
            let r = check(&steps, &start());
            assert_eq!(r.bad_read_count, 1, "{}", r.summary());
            assert!(!r.ok());
        }
    }

    #[test]
    fn a_lost_transfer_is_found_and_an_unknown_one_is_allowed() {
        let lost = check(&[transfer(0, 5, 30, Outcome::Ok)], &start());
        assert_eq!(lost.unexplained_balances.len(), 2, "{}", lost.summary());
        let committed = transfer(1, 6, 10, Outcome::Ok);
        let after = moved(start(), 1, 6, 10);
        let unknown = check(
            &[committed.clone(), transfer(0, 5, 30, Outcome::Unknown)],
            &after,
        );
        assert!(unknown.ok(), "{}", unknown.summary());
        let happened = check(
            &[committed, transfer(0, 5, 30, Outcome::Unknown)],
            &moved(after, 0, 5, 30),
        );
        assert!(happened.ok(), "{}", happened.summary());
    }
}
