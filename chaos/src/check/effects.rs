//! Every acknowledged effect of the API workload is there and nothing else is: counters
//! equal their acknowledged increments within the unknown ones, an acknowledged insert
//! not deleted since is present, an acknowledged delete is absent, a refused insert
//! left nothing, and no insert of a duplicate unique key was acknowledged.

use std::collections::{HashMap, HashSet};

use bson::Document;
use serde::Serialize;

use crate::history::{History, Op, Outcome};

#[derive(Debug, Serialize)]
pub struct Counter {
    pub key: u32,
    pub acknowledged: i64,
    pub unknown: i64,
    pub found: i64,
}

impl Counter {
    fn ok(&self) -> bool {
        (self.acknowledged..=self.acknowledged + self.unknown).contains(&self.found)
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub counters: Vec<Counter>,
    pub documents_checked: usize,
    /// Acknowledged inserts, never deleted, missing.
    pub lost: Vec<i64>,
    /// Present after an acknowledged delete.
    pub resurrected: Vec<i64>,
    /// Present although no insert of them can have happened.
    pub unexpected: Vec<i64>,
    /// Inserts of a unique key another document held, acknowledged.
    pub duplicates_admitted: Vec<i64>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.counters.iter().all(Counter::ok)
            && self.lost.is_empty()
            && self.resurrected.is_empty()
            && self.unexpected.is_empty()
            && self.duplicates_admitted.is_empty()
    }

    pub fn summary(&self) -> String {
        let bad: Vec<String> = self
            .counters
            .iter()
            .filter(|c| !c.ok())
            .map(|c| {
                format!(
                    "counter {} = {} (acknowledged {}, unknown {})",
                    c.key, c.found, c.acknowledged, c.unknown
                )
            })
            .collect();
        format!(
            "effects: {} counters ({} wrong{}), {} documents: lost {}, resurrected {}, unexpected {}, duplicate keys admitted {}",
            self.counters.len(),
            bad.len(),
            if bad.is_empty() { String::new() } else { format!(": {}", bad.join("; ")) },
            self.documents_checked,
            self.lost.len(),
            self.resurrected.len(),
            self.unexpected.len(),
            self.duplicates_admitted.len()
        )
    }
}

/// `counters`: each counter's value after the run; `docs`: each document by `_id`.
pub fn check(history: &History, counters: &[(u32, i64)], docs: &[(i64, Document)]) -> Report {
    let mut r = Report::default();
    let mut incs: HashMap<u32, (i64, i64)> = HashMap::new();
    // Per document: how its insert ended, whether it was a duplicate, and its deletes.
    let mut inserted: HashMap<i64, (Outcome, bool)> = HashMap::new();
    let mut deleted: HashMap<i64, Vec<Outcome>> = HashMap::new();
    for e in &history.events {
        match e.op {
            Op::Inc { by } => {
                let c = incs.entry(e.key).or_default();
                match e.outcome {
                    Outcome::Ok => c.0 += by,
                    Outcome::Unknown => c.1 += by,
                    Outcome::Fail => {}
                }
            }
            Op::Insert { id } => {
                inserted.insert(id, (e.outcome, false));
            }
            Op::DupInsert { id } => {
                if e.outcome == Outcome::Ok {
                    r.duplicates_admitted.push(id);
                }
                inserted.insert(id, (e.outcome, true));
            }
            Op::Delete { id } => deleted.entry(id).or_default().push(e.outcome),
            _ => {}
        }
    }
    let found: HashMap<u32, i64> = counters.iter().copied().collect();
    let mut keys: Vec<u32> = incs.keys().chain(found.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let (acknowledged, unknown) = incs.get(&key).copied().unwrap_or_default();
        r.counters.push(Counter {
            key,
            acknowledged,
            unknown,
            found: found.get(&key).copied().unwrap_or(0),
        });
    }
    let present: HashSet<i64> = docs.iter().map(|(id, _)| *id).collect();
    r.documents_checked = inserted.len();
    for (&id, &(outcome, _)) in &inserted {
        let deletes = deleted.get(&id).map(Vec::as_slice).unwrap_or_default();
        let delete_acknowledged = deletes.contains(&Outcome::Ok);
        let maybe_deleted = deletes.iter().any(|o| *o != Outcome::Fail);
        let here = present.contains(&id);
        if outcome == Outcome::Ok && !maybe_deleted && !here {
            r.lost.push(id);
        }
        if delete_acknowledged && here {
            r.resurrected.push(id);
        }
        if outcome == Outcome::Fail && here {
            r.unexpected.push(id);
        }
    }
    for id in &present {
        if !inserted.contains_key(id) {
            r.unexpected.push(*id);
        }
    }
    for list in [&mut r.lost, &mut r.resurrected, &mut r.unexpected] {
        list.sort_unstable();
    }
    r
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::history::Event;

    fn ev(op: Op, outcome: Outcome, key: u32) -> Event {
        Event {
            client: 0,
            key,
            op,
            outcome,
            invoked: 0,
            completed: 1,
            code: 0,
        }
    }

    fn history(events: Vec<Event>) -> History {
        History { events }
    }

    #[test]
    fn counters_hold_their_acknowledged_increments_within_the_unknown() {
        let h = history(vec![
            ev(Op::Inc { by: 1 }, Outcome::Ok, 0),
            ev(Op::Inc { by: 1 }, Outcome::Ok, 0),
            ev(Op::Inc { by: 1 }, Outcome::Unknown, 0),
        ]);
        assert!(check(&h, &[(0, 2)], &[]).ok());
        assert!(check(&h, &[(0, 3)], &[]).ok());
        assert!(!check(&h, &[(0, 1)], &[]).ok(), "a lost increment");
        assert!(
            !check(&h, &[(0, 4)], &[]).ok(),
            "an increment applied twice"
        );
    }

    #[test]
    fn documents_follow_their_acknowledged_inserts_and_deletes() {
        let h = history(vec![
            ev(Op::Insert { id: 1 }, Outcome::Ok, 0),
            ev(Op::Insert { id: 2 }, Outcome::Ok, 0),
            ev(Op::Delete { id: 2 }, Outcome::Ok, 0),
            ev(Op::Insert { id: 3 }, Outcome::Unknown, 0),
            ev(Op::DupInsert { id: 4 }, Outcome::Fail, 0),
        ]);
        let d = |id: i64| (id, doc! {"_id": id});
        assert!(check(&h, &[], &[d(1)]).ok());
        assert!(check(&h, &[], &[d(1), d(3)]).ok());
        let r = check(&h, &[], &[]);
        assert_eq!(r.lost, vec![1]);
        let r = check(&h, &[], &[d(1), d(2), d(4), d(9)]);
        assert_eq!(r.resurrected, vec![2]);
        assert_eq!(r.unexpected, vec![4, 9]);
        let dup = history(vec![ev(Op::DupInsert { id: 5 }, Outcome::Ok, 0)]);
        assert_eq!(check(&dup, &[], &[d(5)]).duplicates_admitted, vec![5]);
    }
}
