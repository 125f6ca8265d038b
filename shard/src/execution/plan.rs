//! Query planning: choose how to reach the documents a filter can match.
//!
//! Bounds only ever narrow the scan to a superset of the matching documents: the full
//! filter is applied to every fetched document, so loose bounds cost time, not results.

use std::ops::Bound;

use bson::{doc, Bson, Document};
use storage::KeyRange;
use wire::{MongoError, MongoResult};

use crate::catalog::keys::{hashed_value, id_key};
use crate::catalog::{CollectionMeta, KeyKind};

#[derive(Debug, Clone)]
pub enum Access {
    /// Point lookups of record keys (`_id` equality or `$in`).
    IdPoints(Vec<Vec<u8>>),
    /// A range of the collection table (which is ordered by `_id`).
    IdRange { range: KeyRange, reverse: bool },
    /// Ranges of one secondary index; documents are fetched by record key.
    Index { index: usize, ranges: Vec<KeyRange> },
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub access: Access,
    /// True when the access path already returns documents in the requested sort order.
    pub sort_provided: bool,
}

impl Plan {
    pub fn describe(&self, meta: &CollectionMeta) -> Document {
        match &self.access {
            Access::IdPoints(_) => doc! {"stage": "IDHACK"},
            Access::IdRange { range, reverse } => {
                if matches!(
                    (&range.start, &range.end),
                    (Bound::Unbounded, Bound::Unbounded)
                ) {
                    doc! {"stage": "COLLSCAN", "direction": if *reverse { "backward" } else { "forward" }}
                } else {
                    doc! {"stage": "CLUSTERED_IXSCAN", "direction": if *reverse { "backward" } else { "forward" }}
                }
            }
            Access::Index { index, .. } => {
                let i = &meta.indexes[*index];
                doc! {"stage": "FETCH", "inputStage": {
                    "stage": "IXSCAN", "keyPattern": i.key.clone(), "indexName": i.name.clone(),
                    "isMultiKey": i.multikey, "isUnique": i.unique, "isSparse": i.sparse,
                    "isPartial": i.partial.is_some(), "direction": "forward",
                }}
            }
        }
    }
}

/// One field's predicates gathered from the filter's top level (and top-level `$and`).
#[derive(Debug, Default)]
struct FieldBounds {
    points: Option<Vec<Bson>>,
    lower: Option<(Bson, bool)>,
    upper: Option<(Bson, bool)>,
}

pub fn plan(
    meta: &CollectionMeta,
    filter: &Document,
    sort: Option<&Document>,
    hint: Option<&Bson>,
) -> MongoResult<Plan> {
    let id_sort = sort.and_then(id_sort_direction);
    let forced = match hint {
        None => None,
        Some(h) => Some(resolve_hint(meta, h)?),
    };
    let reverse = id_sort == Some(true)
        || matches!(hint, Some(Bson::Document(d)) if d.get("$natural").and_then(num) == Some(-1.0));
    let collscan = || Plan {
        access: Access::IdRange {
            range: KeyRange::all(),
            reverse,
        },
        sort_provided: id_sort.is_some(),
    };
    if let Some(Hinted::Natural) = forced {
        return Ok(collscan());
    }
    let bounds = |field: &str| field_bounds(filter, field);

    if forced.is_none() {
        let b = bounds("_id");
        if let Some(points) = &b.points {
            let mut keys: Vec<Vec<u8>> = points.iter().map(id_key).collect();
            keys.sort();
            keys.dedup();
            if reverse {
                keys.reverse();
            }
            return Ok(Plan {
                access: Access::IdPoints(keys),
                sort_provided: id_sort.is_some(),
            });
        }
        if b.lower.is_some() || b.upper.is_some() {
            return Ok(Plan {
                access: Access::IdRange {
                    range: value_range(&b, false, id_key),
                    reverse,
                },
                sort_provided: id_sort.is_some(),
            });
        }
    }

    let candidates: Vec<usize> = match forced {
        Some(Hinted::Index(i)) => vec![i],
        _ => (0..meta.indexes.len())
            .filter(|&i| meta.indexes[i].partial.is_none() && !meta.indexes[i].sparse)
            .collect(),
    };
    let mut best: Option<(u8, usize, Vec<KeyRange>)> = None;
    for i in candidates {
        let index = &meta.indexes[i];
        let (field, kind) = &index.fields[0];
        let b = bounds(field);
        let encode = |v: &Bson| -> Vec<u8> {
            let v = if *kind == KeyKind::Hashed {
                hashed_value(v)
            } else {
                v.clone()
            };
            let mut out = Vec::new();
            query::keystring::encode_value(&mut out, &v);
            if *kind == KeyKind::Descending {
                out.iter_mut().for_each(|b| *b = !*b);
            }
            out
        };
        let (score, ranges) = if let Some(points) = &b.points {
            let mut r: Vec<Vec<u8>> = points.iter().map(encode).collect();
            r.sort();
            r.dedup();
            (
                if index.unique { 3 } else { 2 },
                r.iter().map(|p| KeyRange::prefix(p)).collect(),
            )
        } else if (b.lower.is_some() || b.upper.is_some()) && *kind != KeyKind::Hashed {
            let r = value_range(&b, index.multikey, |v| {
                let mut out = Vec::new();
                query::keystring::encode_value(&mut out, v);
                out
            });
            let r = if *kind == KeyKind::Descending {
                invert(r)
            } else {
                r
            };
            (1, vec![r])
        } else if forced.is_some() {
            (0, vec![KeyRange::all()])
        } else {
            continue;
        };
        if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
            best = Some((score, i, ranges));
        }
    }
    match best {
        Some((_, index, ranges)) => Ok(Plan {
            access: Access::Index { index, ranges },
            sort_provided: false,
        }),
        None => Ok(collscan()),
    }
}

enum Hinted {
    Natural,
    Index(usize),
}

fn resolve_hint(meta: &CollectionMeta, hint: &Bson) -> MongoResult<Hinted> {
    let found = match hint {
        Bson::String(name) if name == "_id_" => return Ok(Hinted::Natural),
        Bson::String(name) => meta.indexes.iter().position(|i| &i.name == name),
        Bson::Document(d) if d.contains_key("$natural") => return Ok(Hinted::Natural),
        Bson::Document(d) if d.len() == 1 && d.get("_id").is_some() => return Ok(Hinted::Natural),
        Bson::Document(d) => meta.indexes.iter().position(|i| &i.key == d),
        _ => {
            return Err(MongoError::failed_to_parse(
                "hint must be a string or an object",
            ))
        }
    };
    found.map(Hinted::Index).ok_or_else(|| MongoError::bad_value("error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index"))
}

fn num(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(*i as f64),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

/// `Some(reverse)` when the sort is exactly on `_id`.
fn id_sort_direction(sort: &Document) -> Option<bool> {
    if sort.len() != 1 {
        return None;
    }
    let v = sort.get("_id")?;
    num(v).map(|d| d < 0.0)
}

/// Whether a value can bound an index scan (arrays and regexes match in other ways).
fn boundable(v: &Bson) -> bool {
    !matches!(
        v,
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Null | Bson::Undefined
    )
}

fn field_bounds(filter: &Document, field: &str) -> FieldBounds {
    let mut b = FieldBounds::default();
    collect_bounds(filter, field, &mut b);
    b
}

fn collect_bounds(filter: &Document, field: &str, b: &mut FieldBounds) {
    for (k, v) in filter {
        if k == "$and" {
            if let Bson::Array(items) = v {
                for item in items {
                    if let Bson::Document(d) = item {
                        collect_bounds(d, field, b);
                    }
                }
            }
            continue;
        }
        if k != field {
            continue;
        }
        match v {
            Bson::Document(ops) if ops.keys().next().is_some_and(|k| k.starts_with('$')) => {
                for (op, arg) in ops {
                    match op.as_str() {
                        "$eq" if boundable(arg) => b.points = Some(vec![arg.clone()]),
                        "$in" => {
                            if let Bson::Array(vals) = arg {
                                if vals.iter().all(boundable) && b.points.is_none() {
                                    b.points = Some(vals.clone());
                                }
                            }
                        }
                        "$gt" | "$gte" if boundable(arg) && b.lower.is_none() => {
                            b.lower = Some((arg.clone(), op == "$gte"))
                        }
                        "$lt" | "$lte" if boundable(arg) && b.upper.is_none() => {
                            b.upper = Some((arg.clone(), op == "$lte"))
                        }
                        _ => {}
                    }
                }
            }
            v if boundable(v) => b.points = Some(vec![v.clone()]),
            _ => {}
        }
    }
}

/// The smallest byte string greater than every string starting with `prefix`.
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// A key range covering the bounds. For a multikey index only one side is used, since
/// different array elements may satisfy the lower and the upper bound.
fn value_range(b: &FieldBounds, multikey: bool, encode: impl Fn(&Bson) -> Vec<u8>) -> KeyRange {
    let start = match &b.lower {
        Some((v, true)) => Bound::Included(encode(v)),
        Some((v, false)) => match prefix_successor(&encode(v)) {
            Some(s) => Bound::Included(s),
            None => Bound::Unbounded,
        },
        None => Bound::Unbounded,
    };
    let end = match &b.upper {
        _ if multikey && b.lower.is_some() => Bound::Unbounded,
        Some((v, true)) => match prefix_successor(&encode(v)) {
            Some(s) => Bound::Excluded(s),
            None => Bound::Unbounded,
        },
        Some((v, false)) => Bound::Excluded(encode(v)),
        None => Bound::Unbounded,
    };
    KeyRange { start, end }
}

/// Bounds on a descending index component. Inverted bytes do not preserve order between
/// a key and its extensions, so rather than risk missing entries we scan the whole index
/// (the filter still decides); equality bounds on descending components stay exact.
fn invert(_r: KeyRange) -> KeyRange {
    KeyRange::all()
}
