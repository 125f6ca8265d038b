//! The dependency graph: ww, wr and rw edges between the transactions that may have
//! committed, and its strongly connected components (Tarjan's algorithm).

use std::collections::{BTreeMap, HashMap};

use super::infer::{external_reads, Facts};
use super::{committed, Dep, Step, Txn};
use crate::history::Outcome;

pub(super) struct Graph {
    /// Per transaction: the transactions it has edges to, each with its set of
    /// dependencies ([`Dep::bit`]s), in order.
    pub out: Vec<Vec<(usize, u8)>>,
    /// The first evidence found for each `(from, to, dep)`.
    evidence: HashMap<(usize, usize, Dep), Step>,
}

impl Graph {
    pub fn new(history: &[Txn], facts: &Facts) -> Self {
        let mut b = Builder {
            history,
            facts,
            out: vec![BTreeMap::new(); history.len()],
            evidence: HashMap::new(),
        };
        b.write_write();
        b.read_deps();
        Graph {
            out: b.out.into_iter().map(|m| m.into_iter().collect()).collect(),
            evidence: b.evidence,
        }
    }

    /// The evidence for an edge of the graph.
    pub fn step(&self, from: usize, to: usize, dep: Dep) -> Step {
        self.evidence[&(from, to, dep)].clone()
    }

    /// The strongly connected components of more than one transaction (each sorted),
    /// where every cycle lies.
    pub fn components(&self) -> Vec<Vec<usize>> {
        let n = self.out.len();
        let mut t = Tarjan {
            out: &self.out,
            index: vec![UNSEEN; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            components: Vec::new(),
        };
        for v in 0..n {
            if t.index[v] == UNSEEN {
                t.visit(v);
            }
        }
        t.components
    }
}

struct Builder<'a> {
    history: &'a [Txn],
    facts: &'a Facts<'a>,
    out: Vec<BTreeMap<usize, u8>>,
    evidence: HashMap<(usize, usize, Dep), Step>,
}

impl Builder<'_> {
    /// Adds the edge `from -dep-> to`, inferred from `key`'s elements `seen` and `next`
    /// (see [`Step`]).
    fn add(
        &mut self,
        (from, dep, to): (usize, Dep, usize),
        key: u32,
        seen: Option<i64>,
        next: Option<i64>,
    ) {
        if from != to {
            *self.out[from].entry(to).or_default() |= dep.bit();
            let step = Step {
                from,
                dep,
                to,
                key,
                seen,
                next,
            };
            self.evidence.entry((from, to, dep)).or_insert(step);
        }
    }

    /// The transaction that appended `value`, unless it failed (reading its element is
    /// G1a; it has no dependencies).
    fn writer(&self, key: u32, value: i64) -> Option<usize> {
        let w = self.facts.writer(key, value)?;
        (self.history[w.txn].outcome != Outcome::Fail).then_some(w.txn)
    }

    /// ww: each element's writer to the next element's.
    fn write_write(&mut self) {
        for (&key, order) in &self.facts.orders {
            for pair in order.windows(2) {
                let (seen, next) = (pair[0], pair[1]);
                if let (Some(a), Some(b)) = (self.writer(key, seen), self.writer(key, next)) {
                    self.add((a, Dep::Ww, b), key, Some(seen), Some(next));
                }
            }
        }
    }

    /// wr: the writer of a read's last element to the reader; rw: the reader to the
    /// writer of the element after it, if the key's order is known.
    fn read_deps(&mut self) {
        for (t, txn) in committed(self.history) {
            for (key, list) in external_reads(txn) {
                let seen = list.last().copied();
                if let Some(w) = seen.and_then(|v| self.writer(key, v)) {
                    self.add((w, Dep::Wr, t), key, seen, None);
                }
                let order = self.facts.orders.get(&key);
                let next = order.and_then(|o| o.get(list.len())).copied();
                if let Some(w) = next.and_then(|v| self.writer(key, v)) {
                    self.add((t, Dep::Rw, w), key, seen, next);
                }
            }
        }
    }
}

const UNSEEN: usize = usize::MAX;

struct Tarjan<'g> {
    out: &'g [Vec<(usize, u8)>],
    index: Vec<usize>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    /// Tarjan's depth-first search from `root`, with a stack of (vertex, next edge)
    /// frames instead of recursion.
    fn visit(&mut self, root: usize) {
        self.open(root);
        let mut frames = vec![(root, 0)];
        while let Some((v, pos)) = frames.last_mut() {
            let v = *v;
            if let Some(&(w, _)) = self.out[v].get(*pos) {
                *pos += 1;
                if self.index[w] == UNSEEN {
                    self.open(w);
                    frames.push((w, 0));
                } else if self.on_stack[w] {
                    self.low[v] = self.low[v].min(self.index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(u, _)) = frames.last() {
                self.low[u] = self.low[u].min(self.low[v]);
            }
            if self.low[v] == self.index[v] {
                self.close(v);
            }
        }
    }

    fn open(&mut self, v: usize) {
        (self.index[v], self.low[v]) = (self.next, self.next);
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
    }

    /// `v` is the root of a component: everything above it on the stack.
    fn close(&mut self, v: usize) {
        let at = self
            .stack
            .iter()
            .rposition(|&x| x == v)
            .expect("on the stack");
        let mut component = self.stack.split_off(at);
        for &x in &component {
            self.on_stack[x] = false;
        }
        if component.len() > 1 {
            component.sort_unstable();
            self.components.push(component);
        }
    }
}
