//! What the reads say: who wrote each element, and each key's version order.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{committed, Anomaly, MicroOp, Txn};

/// An append, as the writer of its element.
#[derive(Debug, Clone, Copy)]
pub(super) struct Write {
    pub txn: usize,
    /// The element the same transaction appended last to the same key.
    pub last: i64,
}

impl Write {
    /// Whether this append of `value` was its transaction's last to the key.
    pub fn is_last(&self, value: i64) -> bool {
        self.last == value
    }
}

pub(super) struct Facts<'h> {
    /// `(key, element)` to the append that wrote it (the first, if several did).
    pub writes: HashMap<(u32, i64), Write>,
    /// Each key whose reads agree and hold no element twice: the longest read.
    pub orders: BTreeMap<u32, &'h [i64]>,
}

impl<'h> Facts<'h> {
    /// Indexes the appends and infers the version orders, reporting what contradicts
    /// them: duplicate appends, duplicate elements and incompatible orders.
    pub fn new(history: &'h [Txn], anomalies: &mut Vec<Anomaly>) -> Self {
        Facts {
            writes: index_writes(history, anomalies),
            orders: version_orders(history, anomalies),
        }
    }

    pub fn writer(&self, key: u32, value: i64) -> Option<Write> {
        self.writes.get(&(key, value)).copied()
    }
}

/// The appends of `txn`: `(key, value)` in order.
pub(super) fn appends(txn: &Txn) -> impl Iterator<Item = (u32, i64)> + '_ {
    txn.ops.iter().filter_map(|op| match op {
        MicroOp::Append { key, value } => Some((*key, *value)),
        MicroOp::Read { .. } => None,
    })
}

/// The reads of `txn` that saw the database rather than its own appends: each key's
/// first read, unless the transaction appended to that key before it.
pub(super) fn external_reads(txn: &Txn) -> Vec<(u32, &[i64])> {
    let mut touched = HashSet::new();
    let mut reads = Vec::new();
    for op in &txn.ops {
        let (MicroOp::Append { key, .. } | MicroOp::Read { key, .. }) = op;
        if touched.insert(*key) {
            if let MicroOp::Read {
                value: Some(list), ..
            } = op
            {
                reads.push((*key, list.as_slice()));
            }
        }
    }
    reads
}

fn index_writes(history: &[Txn], anomalies: &mut Vec<Anomaly>) -> HashMap<(u32, i64), Write> {
    let mut writes = HashMap::new();
    let mut all: BTreeMap<(u32, i64), Vec<usize>> = BTreeMap::new();
    for (t, txn) in history.iter().enumerate() {
        let mut last: HashMap<u32, i64> = HashMap::new();
        for (key, value) in appends(txn) {
            last.insert(key, value);
        }
        for (key, value) in appends(txn) {
            all.entry((key, value)).or_default().push(t);
            let write = Write {
                txn: t,
                last: last[&key],
            };
            writes.entry((key, value)).or_insert(write);
        }
    }
    for ((key, value), txns) in all {
        if txns.len() > 1 {
            anomalies.push(Anomaly::DuplicateAppends { key, value, txns });
        }
    }
    writes
}

/// The longest committed read of each key, if every other is its prefix and none holds
/// an element twice.
fn version_orders<'h>(
    history: &'h [Txn],
    anomalies: &mut Vec<Anomaly>,
) -> BTreeMap<u32, &'h [i64]> {
    let mut by_key: BTreeMap<u32, Vec<(usize, &[i64])>> = BTreeMap::new();
    for (t, txn) in committed(history) {
        for (key, list) in txn.reads() {
            by_key.entry(key).or_default().push((t, list));
        }
    }
    let mut orders = BTreeMap::new();
    for (key, reads) in by_key {
        let before = anomalies.len();
        for &(txn, list) in &reads {
            if has_duplicates(list) {
                let read = list.to_vec();
                anomalies.push(Anomaly::DuplicateElements { txn, key, read });
            }
        }
        // The first of the longest.
        let longest = reads
            .iter()
            .fold(reads[0], |a, &b| if b.1.len() > a.1.len() { b } else { a });
        if let Some(&other) = reads.iter().find(|(_, l)| !longest.1.starts_with(l)) {
            anomalies.push(Anomaly::IncompatibleOrder {
                key,
                txns: [other.0, longest.0],
                reads: [other.1.to_vec(), longest.1.to_vec()],
            });
        }
        if anomalies.len() == before {
            orders.insert(key, longest.1);
        }
    }
    orders
}

fn has_duplicates(list: &[i64]) -> bool {
    let mut seen = HashSet::new();
    !list.iter().all(|v| seen.insert(*v))
}
