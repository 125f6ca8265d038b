//! `$group`: its groups built one document at a time (`GroupTable`), so a `$group` over a
//! collection holds its groups, not its input; and, for a `$group` that spilled to disk,
//! the merge of its runs' partial groups (`GroupMerger`).

use std::collections::HashMap;

use bson::{Bson, Document};

use super::accumulator::{AccState, Accumulator};
use crate::expr::{self, Expr, Variables};
use crate::memory::{approx_value_size, BLOCKING_STAGE_BYTES};
use crate::{ErrorCode, MongoError, MongoResult};

/// What a `$group` hands on: its groups' documents, or their partial states for a merge
/// elsewhere (a shard's, which the router merges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    Output,
    Partial,
}

/// A partial group taken apart: its canonical key, its key, its accumulators' values.
fn parts(mut partial: Document) -> MongoResult<(Bson, Bson, Vec<Bson>)> {
    match (
        partial.remove(PARTIAL_KEY),
        partial.remove("_id"),
        partial.remove("s"),
    ) {
        (Some(k @ Bson::Binary(_)), Some(key), Some(Bson::Array(values))) => Ok((k, key, values)),
        _ => Err(MongoError::internal(
            "a partial $group state without its key",
        )),
    }
}

fn canonical(k: &Bson) -> &[u8] {
    match k {
        Bson::Binary(b) => &b.bytes,
        _ => &[],
    }
}

/// What a group costs beyond its key and values (the index entry, the state vector).
const GROUP_OVERHEAD: usize = 64;

/// The internal `aggregate` field with which the router asks a shard for its `$group`'s
/// partial groups (the pipeline then ends with that `$group`), to merge them itself.
pub const PARTIAL_GROUP_FIELD: &str = "bulwarkPartialGroup";

/// The field of a partial group holding the key in canonical form: runs are sorted and
/// merged on it, so equal keys meet.
pub const PARTIAL_KEY: &str = "k";

#[derive(Debug, Clone)]
pub struct Group {
    id: Expr,
    accs: Vec<(String, Accumulator)>,
}

impl Group {
    pub(crate) fn parse(arg: &Bson) -> MongoResult<Group> {
        let Bson::Document(d) = arg else {
            return Err(MongoError::new(
                ErrorCode::GroupSpecNotObject,
                "a group's fields must be specified in an object",
            ));
        };
        let mut id = None;
        let mut accs = Vec::new();
        for (k, v) in d {
            if k == "_id" {
                id = Some(match v {
                    // `_id: {a: ..., b: ...}` is an object expression.
                    Bson::Document(sub)
                        if !sub.keys().next().is_some_and(|f| f.starts_with('$')) =>
                    {
                        Expr::parse_object(sub)?
                    }
                    v => Expr::parse(v)?,
                });
                continue;
            }
            if k.contains('.') {
                return Err(MongoError::new(
                    ErrorCode::GroupFieldDotted,
                    format!("The field name '{k}' cannot contain '.'"),
                ));
            }
            if k.starts_with('$') {
                return Err(MongoError::new(
                    ErrorCode::GroupFieldOperator,
                    format!("The field name '{k}' cannot be an operator name"),
                ));
            }
            accs.push((k.clone(), Accumulator::parse(k, v)?));
        }
        let id = id.ok_or_else(|| {
            MongoError::new(
                ErrorCode::GroupMissingId,
                "a group specification must include an _id",
            )
        })?;
        Ok(Group { id, accs })
    }

    pub(crate) fn run(&self, docs: Vec<Document>, vars: &Variables) -> MongoResult<Vec<Document>> {
        let mut table = GroupTable::new(self, vars);
        for d in &docs {
            table.add(d)?;
        }
        table.finish()
    }

    fn key(&self, d: &Document, vars: &Variables) -> MongoResult<Bson> {
        Ok(match self.id.eval(d, vars)? {
            Bson::Undefined => Bson::Null,
            k => k,
        })
    }

    fn start(&self, key: &Bson, vars: &Variables) -> MongoResult<Vec<AccState>> {
        self.accs.iter().map(|(_, a)| a.start(key, vars)).collect()
    }

    /// A group's state as a partial group, `{k: <canonical key>, _id: <key>, s: [...]}`: what
    /// a spill writes and a shard sends the router to merge (`GroupTable::absorb`).
    fn partial(&self, k: Bson, key: Bson, states: Vec<AccState>) -> Document {
        let partials: Vec<Bson> = states
            .into_iter()
            .zip(&self.accs)
            .map(|(st, (_, acc))| acc.partial(st))
            .collect();
        let mut d = Document::new();
        d.insert(PARTIAL_KEY, k);
        d.insert("_id", key);
        d.insert("s", partials);
        d
    }

    /// A group's final document, or its partial state (`Emit::Partial`).
    fn emit(&self, emit: Emit, k: Bson, key: Bson, states: Vec<AccState>) -> MongoResult<Document> {
        match emit {
            Emit::Output => self.output(key, states),
            Emit::Partial => Ok(self.partial(k, key, states)),
        }
    }

    /// Folds a partial group's values into `states`.
    fn merge(&self, states: &mut [AccState], values: Vec<Bson>) -> MongoResult<()> {
        if values.len() != self.accs.len() {
            return Err(MongoError::internal(
                "a partial group with other accumulators",
            ));
        }
        for ((st, (_, acc)), v) in states.iter_mut().zip(&self.accs).zip(values) {
            acc.merge(st, v)?;
        }
        Ok(())
    }

    fn output(&self, key: Bson, states: Vec<AccState>) -> MongoResult<Document> {
        let mut doc = Document::new();
        doc.insert("_id", key);
        for (st, (name, acc)) in states.into_iter().zip(&self.accs) {
            doc.insert(name.clone(), acc.finish(st)?);
        }
        Ok(doc)
    }
}

/// The groups of a `$group`, built one document at a time, with about the memory they hold.
pub struct GroupTable<'a> {
    group: &'a Group,
    vars: &'a Variables,
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<(Bson, Vec<AccState>)>,
    bytes: usize,
    kbuf: Vec<u8>,
}

impl<'a> GroupTable<'a> {
    pub fn new(group: &'a Group, vars: &'a Variables) -> GroupTable<'a> {
        GroupTable {
            group,
            vars,
            index: HashMap::new(),
            groups: Vec::new(),
            bytes: 0,
            kbuf: Vec::new(),
        }
    }

    pub fn add(&mut self, d: &Document) -> MongoResult<()> {
        let key = self.group.key(d, self.vars)?;
        // One buffer for every document's key: only a new group keeps a copy.
        self.kbuf.clear();
        expr::canonical_key(&key, &mut self.kbuf);
        let gi = match self.index.get(&self.kbuf) {
            Some(i) => *i,
            None => {
                self.bytes += 2 * self.kbuf.len()
                    + approx_value_size(&key)
                    + GROUP_OVERHEAD * (1 + self.group.accs.len());
                let states = self.group.start(&key, self.vars)?;
                self.groups.push((key, states));
                self.index.insert(self.kbuf.clone(), self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        let states = &mut self.groups[gi].1;
        for (st, (_, acc)) in states.iter_mut().zip(&self.group.accs) {
            self.bytes = self.bytes.saturating_add_signed(acc.add(st, d, self.vars)?);
        }
        Ok(())
    }

    /// About the bytes the groups hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Empties the table into partial groups (`Group::partial`), for a spill:
    /// `GroupMerger` folds them back together once sorted on `k`.
    pub fn take_partials(&mut self) -> Vec<Document> {
        let mut keys: Vec<(usize, Vec<u8>)> = self.index.drain().map(|(k, i)| (i, k)).collect();
        keys.sort_unstable_by_key(|(i, _)| *i);
        let groups = std::mem::take(&mut self.groups);
        self.bytes = 0;
        groups
            .into_iter()
            .zip(keys)
            .map(|((key, states), (_, kbytes))| {
                let k = Bson::Binary(bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes: kbytes,
                });
                self.group.partial(k, key, states)
            })
            .collect()
    }

    /// Folds in a partial group (a shard's), in any order of keys.
    pub fn absorb(&mut self, partial: Document) -> MongoResult<()> {
        let size = crate::memory::approx_size(&partial);
        let (k, key, values) = parts(partial)?;
        let kbytes = canonical(&k);
        let gi = match self.index.get(kbytes) {
            Some(i) => *i,
            None => {
                let states = self.group.start(&key, self.vars)?;
                self.groups.push((key, states));
                self.index.insert(kbytes.to_vec(), self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        self.bytes += size + GROUP_OVERHEAD;
        self.group.merge(&mut self.groups[gi].1, values)
    }

    /// The groups' output documents, in the order their keys first came.
    pub fn finish(self) -> MongoResult<Vec<Document>> {
        self.groups
            .into_iter()
            .map(|(key, states)| self.group.output(key, states))
            .collect()
    }
}

/// Folds partial groups, read back sorted on their canonical key (runs in the order they
/// were written, so arrival order holds), into the groups' output documents.
pub struct GroupMerger {
    group: Group,
    vars: Variables,
    emit: Emit,
    current: Option<(Bson, Bson, Vec<AccState>)>,
    bytes: usize,
}

impl GroupMerger {
    pub fn new(group: Group, vars: Variables, emit: Emit) -> GroupMerger {
        GroupMerger {
            group,
            vars,
            emit,
            current: None,
            bytes: 0,
        }
    }

    /// Folds in the next partial; returns the group it finishes, if its key is new. One
    /// group is held at a time, within MongoDB's 100 MB (its `$push`, `$addToSet`, ...).
    pub fn push(&mut self, partial: Document) -> MongoResult<Option<Document>> {
        let size = crate::memory::approx_size(&partial);
        let (k, key, values) = parts(partial)?;
        let done = match &self.current {
            Some((current, _, _)) if *current == k => None,
            _ => self.finish()?,
        };
        if self.current.is_none() {
            let states = self.group.start(&key, &self.vars)?;
            self.current = Some((k, key, states));
        }
        self.bytes += size;
        if self.bytes > BLOCKING_STAGE_BYTES {
            return Err(MongoError::new(
                ErrorCode::ExceededMemoryLimit,
                format!(
                    "a $group's group exceeded the memory limit of {BLOCKING_STAGE_BYTES} bytes"
                ),
            ));
        }
        let (_, _, states) = self.current.as_mut().expect("a current group");
        self.group.merge(states, values)?;
        Ok(done)
    }

    /// The last group, once every partial is in (and None after).
    pub fn finish(&mut self) -> MongoResult<Option<Document>> {
        self.bytes = 0;
        self.current
            .take()
            .map(|(k, key, states)| self.group.emit(self.emit, k, key, states))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$group": {"total": {"$sum": 1}}}]), 15955),
            (bson!([{"$group": {"_id": null, "t": {"$foo": 1}}}]), 15952),
            (
                bson!([{"$group": {"_id": null, "t": {"$sum": 1, "$avg": 1}}}]),
                40238,
            ),
            (
                bson!([{"$group": {"_id": null, "a.b": {"$sum": 1}}}]),
                40235,
            ),
            (
                bson!([{"$group": {"_id": null, "t": {"$sum": [1, 2]}}}]),
                40237,
            ),
            (bson!([{"$group": 1}]), 15947),
        ]);
    }

    #[test]
    fn group_accumulators() {
        check(
            bson!([
                {"$group": {
                    "_id": "$cust",
                    "n": {"$sum": 1},
                    "total": {"$sum": "$price"},
                    "avg": {"$avg": "$quantity"},
                    "min": {"$min": "$item"},
                    "max": {"$max": "$price"},
                    "first": {"$first": "$item"},
                    "last": {"$last": "$item"},
                    "items": {"$push": "$item"},
                    "set": {"$addToSet": "$quantity"},
                    "count": {"$count": {}},
                }},
                {"$sort": {"_id": 1}}
            ]),
            orders(),
            vec![
                doc! {"_id": "x", "n": 2, "total": 22, "avg": 3.5, "min": "almonds", "max": 12, "first": "almonds", "last": "bread",
                "items": ["almonds", "bread"], "set": [2, 5], "count": 2},
                doc! {"_id": "y", "n": 2, "total": 21, "avg": 2.0, "min": "pecans", "max": 20, "first": "pecans", "last": null,
                "items": ["pecans"], "set": [1, 3], "count": 2},
                doc! {"_id": "z", "n": 1, "total": 5.5, "avg": 10.0, "min": null, "max": 5.5, "first": null, "last": null,
                "items": [null], "set": [10], "count": 1},
            ],
        );
        // _id null groups everything; object keys; numeric keys 1 and 1.0 are one group
        check(
            bson!([{"$group": {"_id": null, "s": {"$sum": {"$multiply": ["$price", "$quantity"]}}}}]),
            orders(),
            vec![doc! {"_id": null, "s": 24.0 + 20.0 + 50.0 + 55.0 + 3.0}],
        );
        check(
            bson!([{"$group": {"_id": "$k", "c": {"$sum": 1}}}]),
            vec![
                doc! {"k": 1},
                doc! {"k": 1.0},
                doc! {"k": 1i64},
                doc! {},
                doc! {"k": null},
            ],
            vec![doc! {"_id": 1, "c": 3}, doc! {"_id": null, "c": 2}],
        );
        check(
            bson!([{"$group": {"_id": {"c": "$cust", "big": {"$gt": ["$price", 10]}}, "c": {"$sum": 1}}}, {"$match": {"_id.c": "x"}}]),
            orders(),
            vec![
                doc! {"_id": {"c": "x", "big": true}, "c": 1},
                doc! {"_id": {"c": "x", "big": false}, "c": 1},
            ],
        );
        check(
            bson!([{"$group": {"_id": null, "c": {"$sum": 1}}}]),
            vec![],
            vec![],
        );
        check(
            bson!([{"$group": {"_id": null, "pop": {"$stdDevPop": "$v"}, "samp": {"$stdDevSamp": "$v"}, "m": {"$mergeObjects": "$o"}}}]),
            vec![
                doc! {"v": 1, "o": {"a": 1}},
                doc! {"v": 3, "o": {"b": 2}},
                doc! {"o": null},
            ],
            vec![
                doc! {"_id": null, "pop": 1.0, "samp": std::f64::consts::SQRT_2, "m": {"a": 1, "b": 2}},
            ],
        );
        check(
            bson!([{"$group": {
                "_id": null,
                "top": {"$top": {"sortBy": {"price": -1}, "output": "$item"}},
                "bottom": {"$bottom": {"sortBy": {"price": -1}, "output": ["$item", "$price"]}},
                "top2": {"$topN": {"n": 2, "sortBy": {"price": 1}, "output": "$price"}},
                "bottom2": {"$bottomN": {"n": 2, "sortBy": {"price": 1}, "output": "$price"}},
                "first2": {"$firstN": {"n": 2, "input": "$_id"}},
                "last2": {"$lastN": {"n": 2, "input": "$_id"}},
                "max2": {"$maxN": {"n": 2, "input": "$quantity"}},
                "min2": {"$minN": {"n": 2, "input": "$quantity"}},
            }}]),
            orders(),
            vec![
                doc! {"_id": null, "top": "pecans", "bottom": [null, 1], "top2": [1, 5.5], "bottom2": [12, 20],
                "first2": [1, 2], "last2": [4, 5], "max2": [10, 5], "min2": [1, 2]},
            ],
        );
        // integer overflow widens
        check(
            bson!([{"$group": {"_id": null, "s": {"$sum": "$v"}}}]),
            vec![doc! {"v": i32::MAX}, doc! {"v": 1}],
            vec![doc! {"_id": null, "s": i32::MAX as i64 + 1}],
        );
    }
}
