//! Linearizability of single-key read/write/CAS registers.
//!
//! The search is Wing & Gong's, with Lowe's memoization (as in Knossos' "WGL" and
//! Porcupine): walk the history's invocations and completions in time order, try to
//! linearize any operation whose invocation comes before the first pending completion,
//! backtrack when a completion is reached whose operation has not been linearized, and
//! never explore the same (set of linearized operations, register value) twice.
//! Each key is an independent register and is checked on its own.
//!
//! Semantics (the register starts with no value, `None`):
//! - `Outcome::Ok`: took effect at one instant in `[invoked, completed]` with the
//!   recorded result. A read returns the current value; a write sets it; a CAS with
//!   `swapped` requires the value to be `Some(from)` and sets `Some(to)`; a CAS without
//!   `swapped` requires the value not to be `Some(from)` and changes nothing.
//! - `Outcome::Fail`: never took effect; ignored.
//! - `Outcome::Unknown`: may have taken effect at any instant after `invoked` (there is
//!   no upper bound), or not at all. Unknown reads say nothing and are ignored; an
//!   unknown write may set its value; an unknown CAS may set `to` if the value was
//!   `Some(from)` (its recorded `swapped` is ignored).
//! - `Op::Append` is not a register operation; ignored.
//!
//! Two operations are concurrent if one's invocation is not strictly after the other's
//! completion (equal timestamps count as concurrent, so clock granularity never makes
//! a correct history look wrong).
//!
//! The search is bounded by a number of steps; a key whose search runs out is
//! [`Verdict::Undecided`], never reported as linearizable.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::history::{Event, History, Op, Outcome};

/// Search steps allowed per key by [`check_key`] and [`check`].
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// How many operations a [`Violation`] lists at most in each of its lists.
const LIST_LIMIT: usize = 10;

/// What the checker concluded about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Some order of the operations, each at an instant within its interval, explains
    /// every recorded result.
    Linearizable,
    /// No such order exists (the search was exhaustive).
    NotLinearizable(Violation),
    /// The search budget ran out before an answer was found.
    Undecided(Violation),
}

impl Verdict {
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }

    /// The details, unless the key is linearizable.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            Verdict::Linearizable => None,
            Verdict::NotLinearizable(v) | Verdict::Undecided(v) => Some(v),
        }
    }
}

/// Why a key is not (or could not be shown to be) linearizable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// One line for a human.
    pub message: String,
    /// Register operations considered (acknowledged ones plus unknown writes and CASes).
    pub ops: usize,
    /// Search steps taken.
    pub steps: u64,
    /// Length of the longest order of operations the search could linearize.
    pub linearized: usize,
    /// The last operations of that order (at most 10), oldest first.
    pub prefix_tail: Vec<String>,
    /// The register's value after that order.
    pub value_after_prefix: Option<i64>,
    /// Operations not in that order that were due next: every one invoked before the
    /// earliest completion among the acknowledged operations left (at most 10, that
    /// acknowledged operation first). None of them fitted there.
    pub unplaced: Vec<String>,
}

/// Checks every key of `history` with [`DEFAULT_BUDGET`] steps each. Returns the keys
/// that are not linearizable or undecided, in key order; empty means all is well.
pub fn check(history: &History) -> Vec<(u32, Verdict)> {
    check_with_budget(history, DEFAULT_BUDGET)
}

/// [`check`] with a per-key step budget.
pub fn check_with_budget(history: &History, budget: u64) -> Vec<(u32, Verdict)> {
    let mut keys: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
    for e in &history.events {
        keys.entry(e.key).or_default().push(e);
    }
    keys.into_iter()
        .map(|(key, events)| (key, check_key_with_budget(&events, budget)))
        .filter(|(_, v)| !v.is_linearizable())
        .collect()
}

/// Checks the operations on one key (the caller picks them; their `key` is not
/// looked at) with [`DEFAULT_BUDGET`] steps.
pub fn check_key(events: &[&Event]) -> Verdict {
    check_key_with_budget(events, DEFAULT_BUDGET)
}

/// [`check_key`] with a step budget.
pub fn check_key_with_budget(events: &[&Event], budget: u64) -> Verdict {
    let ops: Vec<RegOp> = events.iter().filter_map(|e| RegOp::new(e)).collect();
    Search::new(&ops).run(budget)
}

/// What an operation does to the register, as far as the checker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read(Option<i64>),
    Write(i64),
    /// `swapped: None`: outcome unknown, so it may happen only if it would swap.
    Cas {
        from: i64,
        to: i64,
        swapped: Option<bool>,
    },
}

impl Kind {
    /// The register's value after this operation, if it can take effect on `value`.
    fn step(self, value: Option<i64>) -> Option<Option<i64>> {
        match self {
            Kind::Read(v) => (v == value).then_some(value),
            Kind::Write(v) => Some(Some(v)),
            Kind::Cas {
                from,
                to,
                swapped: Some(true) | None,
            } => (value == Some(from)).then_some(Some(to)),
            Kind::Cas {
                from,
                swapped: Some(false),
                ..
            } => (value != Some(from)).then_some(value),
        }
    }
}

struct RegOp<'a> {
    event: &'a Event,
    kind: Kind,
    /// Acknowledged: must be linearized. Otherwise optional and never completes.
    required: bool,
}

impl<'a> RegOp<'a> {
    fn new(event: &'a Event) -> Option<Self> {
        let required = match event.outcome {
            Outcome::Ok => true,
            Outcome::Unknown => false,
            Outcome::Fail => return None,
        };
        let kind = match event.op {
            Op::Read { value } if required => Kind::Read(value),
            Op::Read { .. }
            | Op::Append { .. }
            | Op::Inc { .. }
            | Op::Insert { .. }
            | Op::DupInsert { .. }
            | Op::Modify { .. }
            | Op::Delete { .. }
            | Op::Query { .. }
            | Op::Ddl { .. } => return None,
            Op::Write { value } => Kind::Write(value),
            Op::Cas { from, to, swapped } => Kind::Cas {
                from,
                to,
                swapped: required.then_some(swapped),
            },
        };
        Some(RegOp {
            event,
            kind,
            required,
        })
    }

    fn describe(&self) -> String {
        describe(self.event)
    }
}

/// One operation as a short string, e.g. `c3 cas 1->2 swapped ok [100..250]`.
pub fn describe(e: &Event) -> String {
    let op = match &e.op {
        Op::Read { value: Some(v) } => format!("read {v}"),
        Op::Read { value: None } => "read nil".to_string(),
        Op::Write { value } => format!("write {value}"),
        Op::Cas { from, to, swapped } => match e.outcome {
            Outcome::Ok if *swapped => format!("cas {from}->{to} swapped"),
            Outcome::Ok => format!("cas {from}->{to} not swapped"),
            _ => format!("cas {from}->{to}"),
        },
        Op::Append { value } => format!("append {value}"),
        other => format!("{other:?}"),
    };
    let (outcome, end) = match e.outcome {
        Outcome::Ok => ("ok", e.completed.to_string()),
        Outcome::Fail => ("fail", e.completed.to_string()),
        Outcome::Unknown => ("unknown", "?".to_string()),
    };
    format!("c{} {op} {outcome} [{}..{end}]", e.client, e.invoked)
}

const NIL: usize = usize::MAX;
const HEAD: usize = 0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum EntryKind {
    Call,
    Return,
}

/// Where the search is among the candidates for the next operation of a state.
#[derive(Clone, Copy)]
enum Cursor {
    /// At this node of the list of acknowledged operations.
    Required(usize),
    /// At this index of the unknown operations, which may be linearized if invoked no
    /// later than `deadline` (the earliest completion left).
    Optional { j: usize, deadline: u64 },
}

/// One choice made: the operation, where its cursor was, the register value before.
struct Frame {
    op: usize,
    cursor: Cursor,
    before: Option<i64>,
}

/// The search over one key.
///
/// Acknowledged operations form a doubly linked list of invocations and completions
/// in time order (node 0 is the head), from which linearized ones are unlinked: the
/// candidates are the invocations before the first completion. Unknown operations
/// never complete, so they block nothing; they are candidates once invoked (before
/// that first completion), tried after the acknowledged ones.
///
/// Memoization keeps the states that were fully explored without success: (the set
/// of acknowledged operations linearized, the register value) with every set of
/// unknown operations used. A state is pruned if a failed one has the same
/// acknowledged set and value and used a subset of its unknown operations (it could
/// do everything this one can). For the same reason an unknown operation is never
/// linearized where it would not change the value, nor an unknown write right after
/// another unknown operation, and of two unknown operations that
/// do the same (say, both write 3) the later invoked is used only after the other.
struct Search<'o, 'e> {
    ops: &'o [RegOp<'e>],
    /// Per node (node 0 unused): kind and operation index.
    nodes: Vec<(EntryKind, usize)>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Per operation: its return node, if acknowledged.
    ret: Vec<usize>,
    /// The unknown operations by invocation time.
    optional: Vec<usize>,
    /// Per operation: its index in `optional`, if unknown.
    optional_rank: Vec<usize>,
    /// Per index in `optional`: the previous one of the same kind, if any. Both do
    /// the same from when both are invoked, so the later is used only after it.
    twin_before: Vec<usize>,
}

fn cursor_node(cursor: Cursor) -> usize {
    match cursor {
        Cursor::Required(node) => node,
        Cursor::Optional { .. } => unreachable!("unknown operations are not in the list"),
    }
}

fn set(bits: &mut [u64], i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}
fn clear(bits: &mut [u64], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}
fn get(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}
fn subset(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x & !y == 0)
}

impl<'o, 'e> Search<'o, 'e> {
    fn new(ops: &'o [RegOp<'e>]) -> Self {
        // (time, completion after invocation at the same time, op)
        let mut times: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * ops.len());
        let mut optional = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if op.required {
                times.push((op.event.invoked, 0, i));
                times.push((op.event.completed.max(op.event.invoked), 1, i));
            } else {
                optional.push(i);
            }
        }
        times.sort_unstable();
        optional.sort_by_key(|&i| (ops[i].event.invoked, i));
        let mut optional_rank = vec![NIL; ops.len()];
        for (j, &i) in optional.iter().enumerate() {
            optional_rank[i] = j;
        }
        let twin_before = (0..optional.len())
            .map(|j| {
                (0..j)
                    .rev()
                    .find(|&k| ops[optional[k]].kind == ops[optional[j]].kind)
                    .unwrap_or(NIL)
            })
            .collect();
        let n = times.len() + 1;
        let mut nodes = Vec::with_capacity(n);
        nodes.push((EntryKind::Call, NIL));
        let mut ret = vec![NIL; ops.len()];
        for &(_, is_return, i) in &times {
            if is_return == 1 {
                ret[i] = nodes.len();
                nodes.push((EntryKind::Return, i));
            } else {
                nodes.push((EntryKind::Call, i));
            }
        }
        let next = (0..n)
            .map(|i| if i + 1 < n { i + 1 } else { NIL })
            .collect();
        let prev = (0..n).map(|i| if i == 0 { NIL } else { i - 1 }).collect();
        Search {
            ops,
            nodes,
            next,
            prev,
            ret,
            optional,
            optional_rank,
            twin_before,
        }
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    /// Undoes the latest `unlink(x)` (links must be restored in reverse order).
    fn relink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = x;
        if n != NIL {
            self.prev[n] = x;
        }
    }

    fn run(mut self, budget: u64) -> Verdict {
        // Acknowledged operations linearized (by operation index), unknown ones used
        // (by rank in `optional`).
        let mut required_done = vec![0u64; self.ops.len().div_ceil(64)];
        let mut optional_used = vec![0u64; self.optional.len().div_ceil(64)];
        type Failed = HashMap<(Box<[u64]>, Option<i64>), Vec<Box<[u64]>>>;
        let mut failed: Failed = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut best: Vec<usize> = Vec::new();
        let mut value: Option<i64> = None;
        let mut remaining = self.ops.iter().filter(|o| o.required).count();
        let mut steps: u64 = 0;
        let mut cursor = Cursor::Required(self.next[HEAD]);

        while remaining > 0 {
            if steps >= budget {
                return Verdict::Undecided(self.violation(
                    format!("undecided: search budget exceeded ({budget} steps)"),
                    steps,
                    &best,
                ));
            }
            steps += 1;
            // The candidate at the cursor and where to go if it does not fit.
            let (op, skip) = match cursor {
                Cursor::Required(node) if node != NIL => match self.nodes[node] {
                    (EntryKind::Call, i) => (Some(i), Cursor::Required(self.next[node])),
                    (EntryKind::Return, i) => {
                        let deadline = self.ops[i].event.completed.max(self.ops[i].event.invoked);
                        cursor = Cursor::Optional { j: 0, deadline };
                        continue;
                    }
                },
                // The end of the list: cannot happen while acknowledged operations
                // are left (their completions are in it), so backtrack.
                Cursor::Required(_) => (None, cursor),
                Cursor::Optional { j, deadline } => match self.optional.get(j) {
                    Some(&i) if self.ops[i].event.invoked <= deadline => {
                        let next = Cursor::Optional { j: j + 1, deadline };
                        let twin = self.twin_before[j];
                        if get(&optional_used, j) || (twin != NIL && !get(&optional_used, twin)) {
                            cursor = next;
                            continue;
                        }
                        (Some(i), next)
                    }
                    _ => (None, cursor),
                },
            };
            if let Some(i) = op {
                let after = self.ops[i].kind.step(value);
                // An unknown operation is useless if it changes nothing, and so is an
                // unknown write right after another unknown operation (it hides that
                // one's effect: writing without it, tried too, does as much).
                let useful = self.ops[i].required
                    || after.is_some_and(|a| a != value)
                        && !(matches!(self.ops[i].kind, Kind::Write(_))
                            && stack.last().is_some_and(|f| !self.ops[f.op].required));
                if let (true, Some(after)) = (useful, after) {
                    let required = self.ops[i].required;
                    if required {
                        set(&mut required_done, i);
                    } else {
                        set(&mut optional_used, self.optional_rank[i]);
                    }
                    let pruned = failed
                        .get(&(required_done.clone().into_boxed_slice(), after))
                        .is_some_and(|sets| sets.iter().any(|u| subset(u, &optional_used)));
                    if !pruned {
                        stack.push(Frame {
                            op: i,
                            cursor,
                            before: value,
                        });
                        value = after;
                        if required {
                            self.unlink(cursor_node(cursor));
                            self.unlink(self.ret[i]);
                            remaining -= 1;
                        }
                        if stack.len() > best.len() {
                            best = stack.iter().map(|f| f.op).collect();
                        }
                        cursor = Cursor::Required(self.next[HEAD]);
                        continue;
                    }
                    if required {
                        clear(&mut required_done, i);
                    } else {
                        clear(&mut optional_used, self.optional_rank[i]);
                    }
                }
                cursor = skip;
                continue;
            }
            // No candidate left in this state: it fails. Remember it, undo the latest
            // choice and try the next candidate after it.
            let Some(frame) = stack.pop() else {
                let message = self.not_linearizable_message(&best);
                return Verdict::NotLinearizable(self.violation(message, steps, &best));
            };
            let sets = failed
                .entry((required_done.clone().into_boxed_slice(), value))
                .or_default();
            sets.retain(|u| !subset(&optional_used, u));
            sets.push(optional_used.clone().into_boxed_slice());
            let i = frame.op;
            value = frame.before;
            if self.ops[i].required {
                clear(&mut required_done, i);
                self.relink(self.ret[i]);
                self.relink(cursor_node(frame.cursor));
                remaining += 1;
            } else {
                clear(&mut optional_used, self.optional_rank[i]);
            }
            cursor = match frame.cursor {
                Cursor::Required(node) => Cursor::Required(self.next[node]),
                Cursor::Optional { j, deadline } => Cursor::Optional { j: j + 1, deadline },
            };
        }
        Verdict::Linearizable
    }

    fn value_after(&self, prefix: &[usize]) -> Option<i64> {
        prefix.iter().fold(None, |v, &i| {
            self.ops[i].kind.step(v).expect("prefix was linearized")
        })
    }

    /// The operations due after `prefix`: the acknowledged one left with the earliest
    /// completion first, then every other one left invoked no later than that.
    fn unplaced(&self, prefix: &[usize]) -> Vec<usize> {
        let mut done = vec![false; self.ops.len()];
        for &i in prefix {
            done[i] = true;
        }
        let left = || (0..self.ops.len()).filter(|&i| !done[i]);
        let Some(first) = left()
            .filter(|&i| self.ops[i].required)
            .min_by_key(|&i| (self.ops[i].event.completed, i))
        else {
            return Vec::new();
        };
        let deadline = self.ops[first].event.completed;
        let mut due: Vec<usize> = left()
            .filter(|&i| i != first && self.ops[i].event.invoked <= deadline)
            .collect();
        due.sort_by_key(|&i| (self.ops[i].event.invoked, i));
        std::iter::once(first).chain(due).collect()
    }

    fn not_linearizable_message(&self, best: &[usize]) -> String {
        let value = match self.value_after(best) {
            Some(v) => v.to_string(),
            None => "nil".to_string(),
        };
        let blocked = match self.unplaced(best).first() {
            Some(&i) => format!("; then {} cannot be placed", self.ops[i].describe()),
            None => String::new(),
        };
        format!(
            "not linearizable: at most {} of {} ops can be linearized (the register then holds {value}){blocked}",
            best.len(),
            self.ops.len(),
        )
    }

    fn violation(&self, message: String, steps: u64, best: &[usize]) -> Violation {
        let tail = &best[best.len().saturating_sub(LIST_LIMIT)..];
        Violation {
            message,
            ops: self.ops.len(),
            steps,
            linearized: best.len(),
            prefix_tail: tail.iter().map(|&i| self.ops[i].describe()).collect(),
            value_after_prefix: self.value_after(best),
            unplaced: self
                .unplaced(best)
                .into_iter()
                .take(LIST_LIMIT)
                .map(|i| self.ops[i].describe())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn ev(client: u32, op: Op, outcome: Outcome, invoked: u64, completed: u64) -> Event {
        Event {
            client,
            key: 1,
            op,
            outcome,
            invoked,
            completed,
            code: 0,
        }
    }
    fn r(c: u32, v: Option<i64>, a: u64, b: u64) -> Event {
        ev(c, Op::Read { value: v }, Outcome::Ok, a, b)
    }
    fn w(c: u32, v: i64, a: u64, b: u64) -> Event {
        ev(c, Op::Write { value: v }, Outcome::Ok, a, b)
    }
    fn cas(c: u32, from: i64, to: i64, swapped: bool, a: u64, b: u64) -> Event {
        ev(c, Op::Cas { from, to, swapped }, Outcome::Ok, a, b)
    }
    fn with(mut e: Event, outcome: Outcome) -> Event {
        e.outcome = outcome;
        e
    }

    fn verdict(events: &[Event]) -> Verdict {
        check_key(&events.iter().collect::<Vec<_>>())
    }
    #[track_caller]
    fn assert_linearizable(events: &[Event]) {
        let v = verdict(events);
        assert!(v.is_linearizable(), "{v:?}");
    }
    #[track_caller]
    fn assert_not_linearizable(events: &[Event]) -> Violation {
        match verdict(events) {
            Verdict::NotLinearizable(v) => v,
            other => panic!("expected not linearizable, got {other:?}"),
        }
    }

    #[test]
    fn empty_and_initial_value() {
        assert_linearizable(&[]);
        assert_linearizable(&[r(1, None, 0, 1)]);
        assert_not_linearizable(&[r(1, Some(0), 0, 1)]);
    }

    #[test]
    fn sequential_history() {
        assert_linearizable(&[
            r(1, None, 0, 1),
            w(1, 1, 2, 3),
            r(2, Some(1), 4, 5),
            cas(1, 1, 2, true, 6, 7),
            r(2, Some(2), 8, 9),
            cas(3, 1, 3, false, 10, 11),
            r(1, Some(2), 12, 13),
            w(2, 5, 14, 15),
            r(3, Some(5), 16, 17),
        ]);
        // The same with the failed CAS claiming it swapped.
        assert_not_linearizable(&[
            w(1, 1, 2, 3),
            cas(1, 1, 2, true, 6, 7),
            cas(3, 2, 3, false, 10, 11),
        ]);
    }

    #[test]
    fn concurrent_writes_linearizable_in_one_order_only() {
        // Two overlapping writes, then reads: 1 must come before 2.
        let base = [w(1, 1, 0, 10), w(2, 2, 0, 10), r(3, Some(2), 20, 30)];
        assert_linearizable(&base);
        // A read concurrent with both may see either, or none.
        for seen in [None, Some(1), Some(2)] {
            let mut h = base.to_vec();
            h.push(r(4, seen, 5, 8));
            assert_linearizable(&h);
        }
        // Reads that see 2 then 1 (after both writes completed) cannot both be right.
        let mut h = base.to_vec();
        h.push(r(4, Some(1), 31, 40));
        let v = assert_not_linearizable(&h);
        assert!(v.message.contains("not linearizable"), "{}", v.message);
        // ... but if the second read overlaps the first, 1 then 2 is fine.
        let h = [
            w(1, 1, 0, 10),
            w(2, 2, 0, 10),
            r(3, Some(1), 5, 30),
            r(4, Some(2), 20, 30),
        ];
        assert_linearizable(&h);
    }

    #[test]
    fn overlapping_cas_chain() {
        // CASes concurrent with each other only work in the order 0->1, 1->2, 2->3.
        assert_linearizable(&[
            w(0, 0, 0, 1),
            cas(3, 2, 3, true, 2, 20),
            cas(1, 0, 1, true, 2, 20),
            cas(2, 1, 2, true, 2, 20),
            r(4, Some(3), 21, 22),
        ]);
        // A non-swapped CAS needs a moment where the value isn't `from`: every
        // moment in [2, 20] holds 0 here, so "not swapped from 0" is a lie.
        assert_not_linearizable(&[w(0, 0, 0, 1), cas(1, 0, 9, false, 2, 20)]);
    }

    #[test]
    fn stale_read_after_completed_write() {
        let v = assert_not_linearizable(&[w(1, 1, 0, 10), w(2, 2, 20, 30), r(3, Some(1), 40, 50)]);
        assert_eq!(v.linearized, 2);
        assert_eq!(v.value_after_prefix, Some(2));
        assert_eq!(v.unplaced, vec!["c3 read 1 ok [40..50]".to_string()]);
        assert!(v.message.contains("c3 read 1 ok [40..50]"), "{}", v.message);
        // With the reads overlapping the second write, it is fine.
        assert_linearizable(&[w(1, 1, 0, 10), w(2, 2, 20, 30), r(3, Some(1), 25, 50)]);
    }

    #[test]
    fn cas_from_a_value_never_held() {
        assert_not_linearizable(&[w(1, 1, 0, 10), cas(2, 7, 8, true, 20, 30)]);
        assert_not_linearizable(&[cas(2, 7, 8, true, 20, 30)]);
        assert_linearizable(&[w(1, 1, 0, 10), cas(2, 7, 8, false, 20, 30)]);
    }

    #[test]
    fn unknown_write_explains_a_later_read() {
        let h = [
            w(1, 1, 0, 10),
            with(w(2, 2, 20, 25), Outcome::Unknown),
            r(3, Some(2), 100, 110),
            r(3, Some(2), 120, 130),
        ];
        assert_linearizable(&h);
        // ... or it never happened.
        assert_linearizable(&[
            w(1, 1, 0, 10),
            with(w(2, 2, 20, 25), Outcome::Unknown),
            r(3, Some(1), 100, 110),
        ]);
        // ... but it cannot happen twice.
        assert_not_linearizable(&[
            w(1, 1, 0, 10),
            with(w(2, 2, 20, 25), Outcome::Unknown),
            r(3, Some(2), 100, 110),
            w(1, 3, 120, 130),
            r(3, Some(2), 140, 150),
        ]);
        // It may take effect long after its recorded completion.
        assert_linearizable(&[
            with(w(2, 2, 20, 25), Outcome::Unknown),
            w(1, 1, 30, 40),
            r(3, Some(1), 50, 60),
            r(3, Some(2), 70, 80),
        ]);
    }

    #[test]
    fn unknown_write_read_before_invoked() {
        let v = assert_not_linearizable(&[
            r(3, Some(2), 0, 10),
            with(w(2, 2, 50, 60), Outcome::Unknown),
        ]);
        assert_eq!(v.linearized, 0);
        assert_eq!(v.unplaced[0], "c3 read 2 ok [0..10]");
    }

    #[test]
    fn unknown_cas_happens_only_if_it_would_swap() {
        let unknown_cas = |from, to, a, b| {
            with(
                cas(2, from, to, false, a, b), // the recorded `swapped` is ignored
                Outcome::Unknown,
            )
        };
        assert_linearizable(&[
            w(1, 1, 0, 10),
            unknown_cas(1, 2, 20, 30),
            r(3, Some(2), 40, 50),
        ]);
        assert_linearizable(&[
            w(1, 1, 0, 10),
            unknown_cas(1, 2, 20, 30),
            r(3, Some(1), 40, 50),
        ]);
        assert_not_linearizable(&[
            w(1, 1, 0, 10),
            unknown_cas(3, 4, 20, 30),
            r(3, Some(4), 40, 50),
        ]);
    }

    #[test]
    fn failed_ops_unknown_reads_and_appends_are_ignored() {
        let h = [
            with(w(1, 5, 0, 10), Outcome::Fail),
            with(cas(1, 5, 6, true, 0, 10), Outcome::Fail),
            with(r(2, Some(42), 0, 10), Outcome::Unknown),
            with(r(2, Some(43), 0, 10), Outcome::Fail),
            ev(3, Op::Append { value: 9 }, Outcome::Ok, 0, 10),
            r(4, None, 20, 30),
        ];
        assert_linearizable(&h);
        let mut h = h.to_vec();
        h.push(r(4, Some(5), 40, 50));
        let v = assert_not_linearizable(&h);
        assert_eq!(v.ops, 2);
    }

    #[test]
    fn equal_timestamps_count_as_concurrent() {
        assert_linearizable(&[w(1, 1, 0, 10), r(2, None, 10, 20)]);
        assert_not_linearizable(&[w(1, 1, 0, 10), r(2, None, 11, 20)]);
    }

    #[test]
    fn budget_exhaustion_is_undecided() {
        let h = [w(1, 1, 0, 10), w(2, 2, 20, 30), r(3, Some(1), 40, 50)];
        let refs: Vec<&Event> = h.iter().collect();
        match check_key_with_budget(&refs, 2) {
            Verdict::Undecided(v) => {
                assert!(v.message.starts_with("undecided: search budget exceeded"));
                assert_eq!(v.steps, 2);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn check_reports_only_bad_keys_and_serializes() {
        let mut history = History::default();
        for key in 1..=3 {
            let mut events = vec![w(1, 1, 0, 10), r(2, Some(1), 20, 30)];
            if key == 2 {
                events.push(r(3, Some(7), 40, 50));
            }
            for mut e in events {
                e.key = key;
                history.events.push(e);
            }
        }
        let bad = check(&history);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].0, 2);
        let json = serde_json::to_value(&bad[0].1).unwrap();
        assert_eq!(json["verdict"], "not_linearizable");
        assert!(json["message"]
            .as_str()
            .unwrap()
            .starts_with("not linearizable"));
        assert_eq!(json["unplaced"][0], "c3 read 7 ok [40..50]");
        assert_eq!(
            serde_json::to_value(Verdict::Linearizable).unwrap()["verdict"],
            "linearizable"
        );
    }

    /// SplitMix64: enough randomness for a simulation, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// `clients` clients each running `per_client` operations one after another
    /// against one atomic register: each takes effect at a random instant inside its
    /// interval. A few time out (recorded as unknown, whether or not they took effect)
    /// and a few fail (and do not take effect).
    fn simulate(seed: u64, clients: u32, per_client: usize) -> Vec<Event> {
        let mut rng = Rng(seed);
        // (instant it takes effect, if it does; event without results yet)
        let mut planned: Vec<(Option<u64>, Event)> = Vec::new();
        for client in 0..clients {
            let mut t = rng.below(20);
            for _ in 0..per_client {
                let invoked = t + rng.below(20);
                let at = invoked + 1 + rng.below(60);
                let completed = at + 1 + rng.below(60);
                t = completed;
                let op = match rng.below(10) {
                    0..=3 => Op::Read { value: None },
                    4..=6 => Op::Write {
                        value: rng.below(5) as i64,
                    },
                    _ => Op::Cas {
                        from: rng.below(5) as i64,
                        to: rng.below(5) as i64,
                        swapped: false,
                    },
                };
                let (outcome, at) = match rng.below(20) {
                    0 => (Outcome::Unknown, Some(at)),
                    1 => (Outcome::Unknown, None),
                    2 => (Outcome::Fail, None),
                    _ => (Outcome::Ok, Some(at)),
                };
                let e = ev(client, op, outcome, invoked, completed);
                planned.push((at, e));
            }
        }
        planned.sort_by_key(|(at, _)| *at);
        let mut register = None;
        for (at, e) in &mut planned {
            if at.is_none() {
                continue;
            }
            match &mut e.op {
                Op::Read { value } => *value = register,
                Op::Write { value } => register = Some(*value),
                Op::Cas { from, to, swapped } => {
                    *swapped = register == Some(*from);
                    if *swapped {
                        register = Some(*to);
                    }
                }
                _ => unreachable!(),
            }
        }
        let mut events: Vec<Event> = planned.into_iter().map(|(_, e)| e).collect();
        events.sort_by_key(|e| (e.client, e.invoked));
        events
    }

    fn max_concurrency(events: &[Event]) -> usize {
        events
            .iter()
            .map(|a| {
                events
                    .iter()
                    .filter(|b| b.invoked <= a.invoked && a.invoked <= b.completed)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn simulated_atomic_register_is_linearizable_and_fast() {
        for seed in 1..=5 {
            let h = simulate(seed, 5, 40);
            assert_eq!(h.len(), 200);
            assert!(max_concurrency(&h) >= 4, "the clients hardly overlap");
            let start = Instant::now();
            let v = check_key_with_budget(&h.iter().collect::<Vec<_>>(), 200_000);
            assert!(v.is_linearizable(), "seed {seed}: {v:?}");
            assert!(start.elapsed() < Duration::from_secs(5));
        }
    }

    #[test]
    fn simulated_history_with_a_corrupted_read_is_not() {
        let refuted = |events: &[Event], seed| match check_key_with_budget(
            &events.iter().collect::<Vec<_>>(),
            DEFAULT_BUDGET,
        ) {
            Verdict::NotLinearizable(v) => {
                eprintln!("seed {seed}: refuted in {} steps", v.steps);
            }
            other => panic!("seed {seed}: {other:?}"),
        };
        for seed in 1..=5 {
            let h = simulate(seed, 5, 40);
            let is_ok_read =
                |e: &Event| e.outcome == Outcome::Ok && matches!(e.op, Op::Read { value: Some(_) });
            // The last read sees a value nobody wrote (writes and CASes use 0..5): the
            // whole history before it must be searched.
            let mut bad = h.clone();
            let i = bad.iter().rposition(is_ok_read).unwrap();
            bad[i].op = Op::Read { value: Some(99) };
            refuted(&bad, seed);

            // Subtler: "no value" after an acknowledged write completed (nothing deletes).
            let first_write_done = h
                .iter()
                .filter(|e| e.outcome == Outcome::Ok && matches!(e.op, Op::Write { .. }))
                .map(|e| e.completed)
                .min()
                .unwrap();
            let mut bad = h.clone();
            let i = bad
                .iter()
                .position(|e| is_ok_read(e) && e.invoked > first_write_done)
                .unwrap();
            bad[i].op = Op::Read { value: None };
            refuted(&bad, seed);
        }
    }

    /// The definition, by brute force: some subset of the unknown operations plus all
    /// acknowledged ones, in some order that respects real time, explains every result.
    fn brute_force(events: &[Event]) -> bool {
        let ops: Vec<RegOp> = events.iter().filter_map(RegOp::new).collect();
        let end = |o: &RegOp| {
            if o.required {
                o.event.completed
            } else {
                u64::MAX
            }
        };
        fn extend(
            ops: &[RegOp],
            end: &dyn Fn(&RegOp) -> u64,
            used: &mut Vec<bool>,
            value: Option<i64>,
        ) -> bool {
            if ops.iter().zip(used.iter()).all(|(o, &u)| u || !o.required) {
                return true;
            }
            for i in 0..ops.len() {
                if used[i] {
                    continue;
                }
                // i may go next only if no other op left had to complete before i began.
                let blocked = (0..ops.len()).any(|k| {
                    k != i && !used[k] && ops[k].required && end(&ops[k]) < ops[i].event.invoked
                });
                if blocked {
                    continue;
                }
                if let Some(after) = ops[i].kind.step(value) {
                    used[i] = true;
                    if extend(ops, end, used, after) {
                        return true;
                    }
                    used[i] = false;
                }
            }
            false
        }
        extend(&ops, &end, &mut vec![false; ops.len()], None)
    }

    #[test]
    fn agrees_with_brute_force_on_small_random_histories() {
        let mut rng = Rng(42);
        let (mut yes, mut no) = (0, 0);
        for _ in 0..3000 {
            let n = 1 + rng.below(7) as usize;
            let h: Vec<Event> = (0..n)
                .map(|c| {
                    let invoked = rng.below(30);
                    let completed = invoked + rng.below(15);
                    let op = match rng.below(3) {
                        0 => Op::Read {
                            value: [None, Some(0), Some(1), Some(2)][rng.below(4) as usize],
                        },
                        1 => Op::Write {
                            value: rng.below(3) as i64,
                        },
                        _ => Op::Cas {
                            from: rng.below(3) as i64,
                            to: rng.below(3) as i64,
                            swapped: rng.below(2) == 0,
                        },
                    };
                    let outcome = match rng.below(6) {
                        0 => Outcome::Unknown,
                        1 => Outcome::Fail,
                        _ => Outcome::Ok,
                    };
                    ev(c as u32, op, outcome, invoked, completed)
                })
                .collect();
            let expected = brute_force(&h);
            let got = verdict(&h);
            assert_eq!(got.is_linearizable(), expected, "{h:#?}\n{got:?}");
            assert!(!matches!(got, Verdict::Undecided(_)));
            if expected {
                yes += 1;
            } else {
                no += 1;
            }
        }
        assert!(yes > 300 && no > 300, "{yes} linearizable, {no} not");
    }
}
