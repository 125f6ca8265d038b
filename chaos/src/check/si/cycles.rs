//! Cycle search. Every cycle lies within one strongly connected component; in each, for
//! each class, the search takes every edge that may begin a cycle of the class and looks,
//! breadth first, for the shortest way back from its head to its tail along edges the
//! class allows, counting rw edges (and remembering whether the last edge was one, for
//! G-nonadjacent). It reports the shortest cycle found. Every class but G2-item is a
//! violation: snapshot isolation allows exactly the histories in which every cycle has
//! two adjacent rw edges (Cerone & Gotsman), so a component violates it exactly when it
//! holds a cycle of G0, G1c, G-single or G-nonadjacent.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use super::graph::Graph;
use super::{Anomaly, CycleClass, Dep, Step};

pub(super) fn check(graph: &Graph, budget: u64, out: &mut Vec<Anomaly>) {
    for txns in graph.components() {
        let mut found: Vec<CycleClass> = Vec::new();
        for class in CycleClass::ALL {
            if implied_or_unneeded(class, &found) {
                continue;
            }
            let mut budget = budget;
            match shortest(graph, &txns, Spec::of(class), &mut budget) {
                Ok(Some(steps)) => {
                    found.push(class);
                    out.push(Anomaly::Cycle { class, steps });
                }
                Ok(None) => {}
                Err(OutOfBudget) => {
                    out.push(Anomaly::CycleSearchUndecided { class, txns });
                    break;
                }
            }
        }
    }
}

/// Whether to skip searching a component for `class`, given the classes found there
/// already. G0 is a G1c as well (as Elle has it). G-nonadjacent is looked for only where
/// no cycle has fewer rw edges, and G2-item (which snapshot isolation allows) only where
/// no violation was found: there a shortest walk of either class may merely go round a
/// cycle of a lower class twice, or take a detour through one.
fn implied_or_unneeded(class: CycleClass, found: &[CycleClass]) -> bool {
    match class {
        CycleClass::G1c => found.contains(&CycleClass::G0),
        CycleClass::GNonadjacent | CycleClass::G2Item => !found.is_empty(),
        CycleClass::G0 | CycleClass::GSingle => false,
    }
}

/// The edges a class of cycle takes.
#[derive(Clone, Copy)]
struct Spec {
    /// The dependency of the edge the search starts with.
    first: Dep,
    /// The dependencies the rest of the cycle may take ([`Dep::bit`]s).
    rest: u8,
    /// How many rw edges the cycle has, at least and at most (2 counts as "2 or more").
    rw: (u8, u8),
    /// No two rw edges may follow each other.
    nonadjacent: bool,
}

impl Spec {
    fn of(class: CycleClass) -> Spec {
        let (ww, wr, rw) = (Dep::Ww.bit(), Dep::Wr.bit(), Dep::Rw.bit());
        let spec = |first, rest, rw, nonadjacent| Spec {
            first,
            rest,
            rw,
            nonadjacent,
        };
        match class {
            CycleClass::G0 => spec(Dep::Ww, ww, (0, 0), false),
            CycleClass::G1c => spec(Dep::Wr, ww | wr, (0, 0), false),
            CycleClass::GSingle => spec(Dep::Rw, ww | wr, (1, 1), false),
            CycleClass::GNonadjacent => spec(Dep::Rw, ww | wr | rw, (2, 2), true),
            CycleClass::G2Item => spec(Dep::Rw, ww | wr | rw, (2, 2), false),
        }
    }
}

struct OutOfBudget;

/// A shortest cycle of the class `spec` among `txns` (a component), if there is one.
fn shortest(
    graph: &Graph,
    txns: &[usize],
    spec: Spec,
    budget: &mut u64,
) -> Result<Option<Vec<Step>>, OutOfBudget> {
    let member: HashSet<usize> = txns.iter().copied().collect();
    // The edges that may begin a cycle, by head: head -> tails.
    let mut starts: BTreeMap<usize, HashSet<usize>> = BTreeMap::new();
    for &a in txns {
        for &(b, deps) in &graph.out[a] {
            if member.contains(&b) && deps & spec.first.bit() != 0 {
                starts.entry(b).or_default().insert(a);
            }
        }
    }
    let mut best: Option<Vec<Step>> = None;
    for (&head, tails) in &starts {
        let limit = best.as_ref().map_or(usize::MAX, Vec::len);
        if limit == 2 {
            break;
        }
        let search = Search {
            graph,
            member: &member,
            spec,
            tails,
        };
        if let Some(path) = search.run(head, limit - 1, budget)? {
            let tail = path.last().map_or(head, |s| s.to);
            let mut cycle = vec![graph.step(tail, head, spec.first)];
            cycle.extend(path);
            best = Some(cycle);
        }
    }
    Ok(best)
}

/// Where a search stands: a transaction, whether the last edge was rw, how many rw
/// edges so far (2: two or more).
type State = (usize, bool, u8);

/// A breadth-first search from one head back to any of its tails.
struct Search<'a> {
    graph: &'a Graph,
    member: &'a HashSet<usize>,
    spec: Spec,
    tails: &'a HashSet<usize>,
}

impl Search<'_> {
    /// A shortest path from `head` to a tail that closes a cycle of the class, if one is
    /// shorter than `limit` edges.
    fn run(
        &self,
        head: usize,
        limit: usize,
        budget: &mut u64,
    ) -> Result<Option<Vec<Step>>, OutOfBudget> {
        let first_rw = self.spec.first == Dep::Rw;
        let start: State = (head, first_rw, u8::from(first_rw));
        // State -> (the state before it, the edge's dependency).
        let mut parent: HashMap<State, (State, Dep)> = HashMap::new();
        let mut queue = VecDeque::from([(start, 0)]);
        while let Some((state, len)) = queue.pop_front() {
            if len + 1 >= limit {
                break;
            }
            for (next, dep) in self.moves(state) {
                *budget = budget.checked_sub(1).ok_or(OutOfBudget)?;
                if next == start || parent.contains_key(&next) {
                    continue;
                }
                parent.insert(next, (state, dep));
                if self.closes(next) {
                    return Ok(Some(self.path(&parent, start, next)));
                }
                queue.push_back((next, len + 1));
            }
        }
        Ok(None)
    }

    /// The states one edge away.
    fn moves(&self, (v, last_rw, rw): State) -> Vec<(State, Dep)> {
        let mut moves = Vec::new();
        for &(w, deps) in &self.graph.out[v] {
            if !self.member.contains(&w) {
                continue;
            }
            for dep in Dep::ALL
                .into_iter()
                .filter(|d| deps & self.spec.rest & d.bit() != 0)
            {
                let is_rw = dep == Dep::Rw;
                let rw = (rw + u8::from(is_rw)).min(2);
                if (self.spec.nonadjacent && last_rw && is_rw) || rw > self.spec.rw.1 {
                    continue;
                }
                moves.push(((w, is_rw, rw), dep));
            }
        }
        moves
    }

    /// Whether the edge from `state`'s transaction back to the head closes a cycle of
    /// the class.
    fn closes(&self, (v, last_rw, rw): State) -> bool {
        let adjacent = self.spec.nonadjacent && last_rw && self.spec.first == Dep::Rw;
        self.tails.contains(&v) && rw >= self.spec.rw.0 && !adjacent
    }

    fn path(&self, parent: &HashMap<State, (State, Dep)>, start: State, end: State) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut at = end;
        while at != start {
            let (before, dep) = parent[&at];
            steps.push(self.graph.step(before.0, at.0, dep));
            at = before;
        }
        steps.reverse();
        steps
    }
}
