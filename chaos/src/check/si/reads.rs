//! Anomalies that need no cycle: what one committed transaction read (G1a, G1b, garbage
//! reads, internal inconsistency, future reads), and lost updates.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::infer::{appends, external_reads, Facts};
use super::{committed, Anomaly, MicroOp, Txn};
use crate::history::Outcome;

pub(super) fn check(history: &[Txn], facts: &Facts, anomalies: &mut Vec<Anomaly>) {
    for (t, txn) in committed(history) {
        elements_read(history, facts, t, txn, anomalies);
        intermediate_reads(facts, t, txn, anomalies);
        internal(t, txn, anomalies);
        future_reads(t, txn, anomalies);
    }
    lost_updates(history, anomalies);
}

/// Every element `txn` read must have been appended, and not by a failed transaction.
fn elements_read(history: &[Txn], facts: &Facts, t: usize, txn: &Txn, out: &mut Vec<Anomaly>) {
    let mut seen = HashSet::new();
    for (key, list) in txn.reads() {
        for &value in list.iter().filter(|v| seen.insert((key, **v))) {
            match facts.writer(key, value) {
                None => out.push(Anomaly::GarbageRead { txn: t, key, value }),
                Some(w) if history[w.txn].outcome == Outcome::Fail => out.push(Anomaly::G1a {
                    reader: t,
                    writer: w.txn,
                    key,
                    value,
                }),
                Some(_) => {}
            }
        }
    }
}

/// A list read from another transaction must end in that transaction's last append to
/// the key.
fn intermediate_reads(facts: &Facts, t: usize, txn: &Txn, out: &mut Vec<Anomaly>) {
    for (key, list) in external_reads(txn) {
        let Some(&value) = list.last() else { continue };
        let Some(w) = facts.writer(key, value) else {
            continue;
        };
        if w.txn != t && !w.is_last(value) {
            out.push(Anomaly::G1b {
                reader: t,
                writer: w.txn,
                key,
                value,
                last: w.last,
            });
        }
    }
}

/// Each read must show what the transaction read and appended before it: the same list
/// and its appends since, or (where it had not read the key) any list ending in them.
fn internal(t: usize, txn: &Txn, out: &mut Vec<Anomaly>) {
    // Per key: the elements the next read must end with, and whether it must be exactly
    // those (the key was read before).
    let mut expect: HashMap<u32, (Vec<i64>, bool)> = HashMap::new();
    for op in &txn.ops {
        match op {
            MicroOp::Append { key, value } => expect.entry(*key).or_default().0.push(*value),
            MicroOp::Read {
                key,
                value: Some(read),
            } => {
                if let Some((expected, exact)) = expect.get(key) {
                    let fits = if *exact {
                        read == expected
                    } else {
                        read.ends_with(expected)
                    };
                    if !fits {
                        out.push(Anomaly::Internal {
                            txn: t,
                            key: *key,
                            read: read.clone(),
                            expected: expected.clone(),
                            prefix_unknown: !exact,
                        });
                    }
                }
                expect.insert(*key, (read.clone(), true));
            }
            MicroOp::Read { value: None, .. } => {}
        }
    }
}

/// No transaction reads an element it appends only later.
fn future_reads(t: usize, txn: &Txn, out: &mut Vec<Anomaly>) {
    let mut read = HashSet::new();
    for op in &txn.ops {
        match op {
            MicroOp::Read {
                key,
                value: Some(list),
            } => read.extend(list.iter().map(|v| (*key, *v))),
            MicroOp::Append { key, value } if read.contains(&(*key, *value)) => {
                out.push(Anomaly::FutureRead {
                    txn: t,
                    key: *key,
                    value: *value,
                });
            }
            _ => {}
        }
    }
}

/// No two committed transactions read the same version of a key and both append to it.
fn lost_updates(history: &[Txn], out: &mut Vec<Anomaly>) {
    let mut by_read: BTreeMap<(u32, &[i64]), Vec<usize>> = BTreeMap::new();
    for (t, txn) in committed(history) {
        let appended: HashSet<u32> = appends(txn).map(|(key, _)| key).collect();
        for (key, list) in external_reads(txn) {
            if appended.contains(&key) {
                by_read.entry((key, list)).or_default().push(t);
            }
        }
    }
    for ((key, read), txns) in by_read {
        if txns.len() > 1 {
            let read = read.to_vec();
            out.push(Anomaly::LostUpdate { key, read, txns });
        }
    }
}
