//! The checker for the transactional workload: snapshot isolation of multi-key
//! list-append transactions, inferred from the history alone, as Elle does it (Kingsbury
//! & Alvaro, "Elle: Inferring Isolation Anomalies from Experimental Observations"). Every
//! chaos run feeds it the transactions of `txn_workload` (through `check::txn_lists`), and
//! the transactions integration test (`tests/tests/transactions.rs`) one across a failover.
//!
//! Every appended value is unique per key, so a list read names the transaction behind
//! each of its elements, and every read is a prefix of the key's version order. From the
//! reads of committed transactions the checker infers (`infer.rs`):
//! - each key's version order (the longest read; every other read must be its prefix),
//! - which transaction wrote each value,
//! - the dependencies between transactions (`graph.rs`): *ww* (T2 appended the element
//!   right after T1's), *wr* (T2 read a list ending in T1's element), *rw* (T1 read a list
//!   whose next element T2 appended). A transaction's reads of a key after its own
//!   appends to it are not dependencies; they are checked against those appends.
//!
//! It reports ([`Anomaly`]) dependency cycles by the edges they take (`cycles.rs`: G0,
//! G1c, G-single, G-nonadjacent, and G2-item, which snapshot isolation allows), and what
//! reads show without a cycle (`reads.rs`): G1a (aborted read), G1b (intermediate read),
//! lost update, internal inconsistency, future read, duplicate elements, garbage reads,
//! incompatible orders and duplicate appends.
//!
//! Transactions are named by their index in the history: `T3` is `history[3]`. A failed
//! transaction did not commit; one whose outcome is unknown may have, so its appends
//! count where they are read, while its reads (not recorded) say nothing. Real-time and
//! per-client order are not used: the check is for snapshot isolation, not its strong
//! variants.

mod anomaly;
mod cycles;
mod graph;
mod infer;
mod reads;
mod report;

pub use anomaly::{Anomaly, CycleClass, Dep, Step};
pub use report::Report;

use serde::Serialize;

use crate::history::{Nanos, Outcome};

/// Dependency-search steps allowed per strongly connected component and cycle class;
/// a search that runs out is reported as [`Anomaly::CycleSearchUndecided`].
pub const DEFAULT_BUDGET: u64 = 20_000_000;

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum MicroOp {
    /// Append `value`, unique among the values appended to `key`.
    Append { key: u32, value: i64 },
    /// Read the whole list `key` (`None`: not known, as in a transaction that failed or
    /// whose outcome is unknown; `Some(vec![])`: the list was empty).
    Read { key: u32, value: Option<Vec<i64>> },
}

/// One transaction of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Txn {
    pub client: u32,
    pub ops: Vec<MicroOp>,
    /// `Ok`: committed; `Fail`: certainly aborted; `Unknown`: either.
    pub outcome: Outcome,
    pub invoked: Nanos,
    pub completed: Nanos,
}

impl Txn {
    pub fn committed(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// The reads whose result is known: `(key, list)`.
    fn reads(&self) -> impl Iterator<Item = (u32, &[i64])> {
        self.ops.iter().filter_map(|op| match op {
            MicroOp::Read {
                key,
                value: Some(list),
            } => Some((*key, list.as_slice())),
            _ => None,
        })
    }
}

/// The committed transactions, with their names (indices).
fn committed(history: &[Txn]) -> impl Iterator<Item = (usize, &Txn)> {
    history.iter().enumerate().filter(|(_, t)| t.committed())
}

/// Checks `history` with [`DEFAULT_BUDGET`].
pub fn check(history: &[Txn]) -> Report {
    check_with_budget(history, DEFAULT_BUDGET)
}

/// [`check`] with a step budget for each cycle search.
pub fn check_with_budget(history: &[Txn], budget: u64) -> Report {
    let mut anomalies = Vec::new();
    let facts = infer::Facts::new(history, &mut anomalies);
    reads::check(history, &facts, &mut anomalies);
    let graph = graph::Graph::new(history, &facts);
    cycles::check(&graph, budget, &mut anomalies);
    Report::new(history, anomalies)
}

#[cfg(test)]
mod random_tests;
#[cfg(test)]
mod tests;
