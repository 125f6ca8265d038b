//! What the checker reports, named as Elle names it.

use std::fmt;

use serde::Serialize;

/// A dependency between two transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dep {
    /// Write-write: `to` appended the element right after `from`'s.
    Ww,
    /// Write-read: `to` read a list ending in `from`'s element.
    Wr,
    /// Read-write (anti-dependency): `from` read a list whose next element `to` appended.
    Rw,
}

impl Dep {
    pub const ALL: [Dep; 3] = [Dep::Ww, Dep::Wr, Dep::Rw];

    /// This dependency's bit in a set of dependencies.
    pub(super) fn bit(self) -> u8 {
        1 << self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            Dep::Ww => "ww",
            Dep::Wr => "wr",
            Dep::Rw => "rw",
        }
    }
}

/// One edge of a cycle, with the key and elements it was inferred from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub from: usize,
    pub dep: Dep,
    pub to: usize,
    pub key: u32,
    /// The last element `from` wrote (ww), `to` read (wr), or `from` read (rw; `None`:
    /// it read the list empty).
    pub seen: Option<i64>,
    /// The element `to` appended next (ww, rw).
    pub next: Option<i64>,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, k) = (self.from, self.to, self.key);
        write!(f, "T{a} -{}-> T{b}: key {k}: ", self.dep.name())?;
        let seen = self
            .seen
            .map_or("empty".to_string(), |v| format!("up to {v}"));
        let value = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        let (seen_value, next) = (value(self.seen), value(self.next));
        match self.dep {
            Dep::Ww => write!(f, "T{b} appended {next} right after T{a}'s {seen_value}"),
            Dep::Wr => write!(f, "T{b} read it up to T{a}'s {seen_value}"),
            Dep::Rw => write!(
                f,
                "T{a} read it {seen}, T{b} appended the next element, {next}"
            ),
        }
    }
}

/// Cycle classes, from the edges a cycle takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum CycleClass {
    /// ww edges only (dirty write).
    G0,
    /// ww and wr edges, at least one wr (circular information flow).
    G1c,
    /// Exactly one rw edge, the rest ww or wr (read skew).
    #[serde(rename = "G-single")]
    GSingle,
    /// Two or more rw edges, no two of them adjacent.
    #[serde(rename = "G-nonadjacent")]
    GNonadjacent,
    /// Two or more rw edges (write skew): allowed under snapshot isolation.
    #[serde(rename = "G2-item")]
    G2Item,
}

impl CycleClass {
    pub const ALL: [CycleClass; 5] = [
        CycleClass::G0,
        CycleClass::G1c,
        CycleClass::GSingle,
        CycleClass::GNonadjacent,
        CycleClass::G2Item,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CycleClass::G0 => "G0",
            CycleClass::G1c => "G1c",
            CycleClass::GSingle => "G-single",
            CycleClass::GNonadjacent => "G-nonadjacent",
            CycleClass::G2Item => "G2-item",
        }
    }
}

/// Something the history shows that a serial execution would not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Anomaly {
    /// A cycle of dependencies, one of the shortest of its class in its strongly
    /// connected component; `steps[i].to == steps[i + 1].from`, and the last step ends
    /// where the first begins.
    Cycle { class: CycleClass, steps: Vec<Step> },
    /// The cycle search of a component ran out of steps: a cycle of this class may
    /// exist there.
    CycleSearchUndecided { class: CycleClass, txns: Vec<usize> },
    /// Aborted read: committed `reader` read `value`, which failed `writer` appended.
    G1a {
        reader: usize,
        writer: usize,
        key: u32,
        value: i64,
    },
    /// Intermediate read: `reader` read a list ending in `value`, after which `writer`
    /// appended `last` (its final element) in the same transaction.
    G1b {
        reader: usize,
        writer: usize,
        key: u32,
        value: i64,
        last: i64,
    },
    /// Committed transactions `txns` all read `read` and all appended to `key`.
    LostUpdate {
        key: u32,
        read: Vec<i64>,
        txns: Vec<usize>,
    },
    /// `txn` read `read`, which does not end with what it had read or appended before:
    /// `expected` (preceded by anything when `prefix_unknown`).
    Internal {
        txn: usize,
        key: u32,
        read: Vec<i64>,
        expected: Vec<i64>,
        prefix_unknown: bool,
    },
    /// `txn` read `value`, which it appends itself later.
    FutureRead { txn: usize, key: u32, value: i64 },
    /// `txn` read a list holding some element more than once.
    DuplicateElements {
        txn: usize,
        key: u32,
        read: Vec<i64>,
    },
    /// `txn` read `value`, which nobody appended.
    GarbageRead { txn: usize, key: u32, value: i64 },
    /// Two reads of `key` of which neither is a prefix of the other.
    IncompatibleOrder {
        key: u32,
        txns: [usize; 2],
        reads: [Vec<i64>; 2],
    },
    /// `txns` appended the same `value` to `key` (the workload broke its own rule; the
    /// element's writer is ambiguous).
    DuplicateAppends {
        key: u32,
        value: i64,
        txns: Vec<usize>,
    },
}

impl Anomaly {
    /// Elle's name for it.
    pub fn name(&self) -> &'static str {
        match self {
            Anomaly::Cycle { class, .. } => class.name(),
            Anomaly::CycleSearchUndecided { .. } => "cycle-search-timeout",
            Anomaly::G1a { .. } => "G1a",
            Anomaly::G1b { .. } => "G1b",
            Anomaly::LostUpdate { .. } => "lost-update",
            Anomaly::Internal { .. } => "internal",
            Anomaly::FutureRead { .. } => "future-read",
            Anomaly::DuplicateElements { .. } => "duplicate-elements",
            Anomaly::GarbageRead { .. } => "garbage-read",
            Anomaly::IncompatibleOrder { .. } => "incompatible-order",
            Anomaly::DuplicateAppends { .. } => "duplicate-appends",
        }
    }

    /// Whether it makes the history invalid under snapshot isolation: all but G2-item do
    /// (an undecided search and duplicate appends too: the history cannot be cleared).
    pub fn violates_si(&self) -> bool {
        !matches!(
            self,
            Anomaly::Cycle {
                class: CycleClass::G2Item,
                ..
            }
        )
    }
}

fn txn_list(txns: &[usize]) -> String {
    let names: Vec<String> = txns.iter().map(|t| format!("T{t}")).collect();
    names.join(", ")
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name())?;
        match self {
            Anomaly::Cycle { steps, .. } => {
                let path: Vec<String> = steps.iter().map(|s| format!("T{}", s.from)).collect();
                write!(f, "{} -> T{}", path.join(" -> "), steps[0].from)?;
                steps.iter().try_for_each(|s| write!(f, "\n    {s}"))
            }
            Anomaly::CycleSearchUndecided { txns, .. } => {
                write!(f, "search ran out among {}", txn_list(txns))
            }
            Anomaly::G1a {
                reader,
                writer,
                key,
                value,
            } => write!(
                f,
                "T{reader} read {value} of key {key}, appended by failed T{writer}"
            ),
            Anomaly::G1b {
                reader,
                writer,
                key,
                value,
                last,
            } => write!(
                f,
                "T{reader} read key {key} up to {value}, which T{writer} followed with {last}"
            ),
            Anomaly::LostUpdate { key, read, txns } => write!(
                f,
                "{} all read key {key} as {read:?} and all appended to it",
                txn_list(txns)
            ),
            _ => fmt_single(self, f),
        }
    }
}

/// The anomalies of one transaction or one key.
fn fmt_single(a: &Anomaly, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match a {
        Anomaly::Internal {
            txn,
            key,
            read,
            expected,
            prefix_unknown,
        } => {
            let dots = if *prefix_unknown { "..., " } else { "" };
            write!(f, "T{txn} read key {key} as {read:?}, expected [{dots}")?;
            let items: Vec<String> = expected.iter().map(|v| v.to_string()).collect();
            write!(f, "{}]", items.join(", "))
        }
        Anomaly::FutureRead { txn, key, value } => {
            write!(f, "T{txn} read {value} of key {key} before appending it")
        }
        Anomaly::DuplicateElements { txn, key, read } => {
            write!(f, "T{txn} read key {key} as {read:?}")
        }
        Anomaly::GarbageRead { txn, key, value } => {
            write!(f, "T{txn} read {value} of key {key}, which nobody appended")
        }
        Anomaly::IncompatibleOrder { key, txns, reads } => write!(
            f,
            "key {key}: T{} read {:?}, T{} read {:?}",
            txns[0], reads[0], txns[1], reads[1]
        ),
        Anomaly::DuplicateAppends { key, value, txns } => {
            write!(f, "{} all appended {value} to key {key}", txn_list(txns))
        }
        _ => unreachable!("formatted by Anomaly's Display"),
    }
}
