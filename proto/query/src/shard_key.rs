//! Shard keys: the key pattern of a sharded collection, the key value of a document, and
//! the key ranges a filter can touch, so that a router sends a command only to the shards
//! owning those ranges.
//!
//! A key value is the list of the pattern's field values in pattern order; a hashed field
//! holds the hash of the value ([`hashed_value`]), so chunks of a hashed key are ranges of
//! hashes. Key values compare in BSON's total order, field by field.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::keystring::hashed_value;
use crate::order::{compare, compare_arrays};
use crate::{ErrorCode, MongoError, MongoResult};

/// A document's position in the key space: one value per key field.
pub type KeyValue = Vec<Bson>;

#[derive(Debug, Clone, PartialEq)]
pub struct ShardKey {
    pattern: Document,
    fields: Vec<String>,
    /// The position of the hashed field, if the key is hashed.
    hashed: Option<usize>,
}

/// Key values from `min` to `max`, both inclusive.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRange {
    pub min: KeyValue,
    pub max: KeyValue,
}

impl KeyRange {
    /// Whether the chunk `[lo, hi)` holds any key of this range.
    pub fn overlaps_chunk(&self, lo: &[Bson], hi: &[Bson]) -> bool {
        compare_arrays(lo, &self.max) != Ordering::Greater
            && compare_arrays(hi, &self.min) == Ordering::Greater
    }
}

/// What a filter says about one field: some exact values, or an interval.
enum Constraint {
    Points(Vec<Bson>),
    Interval(Bson, Bson),
}

impl ShardKey {
    /// Parses a key pattern such as `{region: 1, _id: 1}` or `{_id: "hashed"}`.
    pub fn parse(pattern: &Document) -> MongoResult<ShardKey> {
        if pattern.is_empty() {
            return Err(MongoError::bad_value("shard key pattern must not be empty"));
        }
        let mut fields = Vec::new();
        let mut hashed = None;
        for (i, (name, v)) in pattern.iter().enumerate() {
            crate::depth::check_path(name)?;
            if name.is_empty() || name.starts_with('$') || name.split('.').any(str::is_empty) {
                return Err(MongoError::bad_value(format!(
                    "shard key field '{name}' is not a valid field name"
                )));
            }
            match v {
                Bson::String(s) if s == "hashed" => {
                    if hashed.replace(i).is_some() {
                        return Err(MongoError::bad_value(
                            "a shard key may have only one hashed field",
                        ));
                    }
                }
                v if crate::order::as_f64(v) == Some(1.0) => {}
                other => {
                    return Err(MongoError::bad_value(format!(
                        "Unsupported shard key pattern {pattern}: field '{name}' is {other}; \
                         shard key fields must be 1 or \"hashed\""
                    )))
                }
            }
            fields.push(name.clone());
        }
        Ok(ShardKey {
            pattern: pattern.clone(),
            fields,
            hashed,
        })
    }

    pub fn pattern(&self) -> &Document {
        &self.pattern
    }

    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    pub fn is_hashed(&self) -> bool {
        self.hashed.is_some()
    }

    /// The lowest key value: `MinKey` in every field.
    pub fn global_min(&self) -> KeyValue {
        vec![Bson::MinKey; self.fields.len()]
    }

    /// The bound above every key value: `MaxKey` in every field.
    pub fn global_max(&self) -> KeyValue {
        vec![Bson::MaxKey; self.fields.len()]
    }

    /// A document's key value. A missing field counts as null (as in MongoDB 4.4+); an
    /// array cannot be part of a shard key.
    pub fn value_of(&self, doc: &Document) -> MongoResult<KeyValue> {
        self.fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let v = crate::path::get_path(doc, f).cloned().unwrap_or(Bson::Null);
                if matches!(v, Bson::Array(_)) {
                    return Err(MongoError::new(
                        ErrorCode::ShardKeyNotFound,
                        format!("Shard key cannot contain an array (field '{f}')"),
                    ));
                }
                Ok(self.stored(i, v))
            })
            .collect()
    }

    /// The value a key field holds for `v`: its hash when the field is hashed.
    fn stored(&self, i: usize, v: Bson) -> Bson {
        if self.hashed == Some(i) {
            hashed_value(&v)
        } else {
            v
        }
    }

    /// `{field: value, ...}` for a key value (how `config.chunks` stores bounds).
    pub fn to_document(&self, v: &[Bson]) -> Document {
        self.fields.iter().cloned().zip(v.iter().cloned()).collect()
    }

    /// The inverse of [`ShardKey::to_document`].
    pub fn from_document(&self, d: &Document) -> MongoResult<KeyValue> {
        self.fields
            .iter()
            .map(|f| {
                d.get(f).cloned().ok_or_else(|| {
                    MongoError::bad_value(format!("chunk bound {d} lacks shard key field '{f}'"))
                })
            })
            .collect()
    }

    /// A range bound given as a prefix of the key (`{region: "eu"}` for `{region: 1,
    /// n: 1}`), the missing fields filled with `MinKey`, as zone ranges are given.
    pub fn bound_from_prefix(&self, d: &Document) -> MongoResult<KeyValue> {
        let mut out = Vec::with_capacity(self.fields.len());
        let mut ended = false;
        for f in &self.fields {
            match (d.get(f), ended) {
                (Some(v), false) => out.push(v.clone()),
                (None, _) => {
                    ended = true;
                    out.push(Bson::MinKey);
                }
                (Some(_), true) => {
                    return Err(MongoError::bad_value(format!(
                        "range bound {d} must be a prefix of the shard key {}",
                        self.pattern
                    )))
                }
            }
        }
        if d.keys().any(|k| !self.fields.contains(k)) {
            return Err(MongoError::bad_value(format!(
                "range bound {d} has fields outside the shard key {}",
                self.pattern
            )));
        }
        Ok(out)
    }

    /// The full key value a filter fixes by equality on every key field, if it does (a
    /// single-document write or an upsert can then go to one shard).
    pub fn equality(&self, filter: &Document) -> Option<KeyValue> {
        self.fields
            .iter()
            .enumerate()
            .map(|(i, f)| match constraint(filter, f)? {
                Constraint::Points(p) if p.len() == 1 => {
                    Some(self.stored(i, p.into_iter().next()?))
                }
                _ => None,
            })
            .collect()
    }

    /// The key ranges holding every document `filter` can match: a superset, judged from
    /// the first key field (as MongoDB targets on the key's prefix). A filter that says
    /// nothing usable about it gives the whole key space.
    pub fn ranges(&self, filter: &Document) -> Vec<KeyRange> {
        let whole = || {
            vec![KeyRange {
                min: self.global_min(),
                max: self.global_max(),
            }]
        };
        let rest = self.fields.len() - 1;
        let span = |lo: Bson, hi: Bson| KeyRange {
            min: std::iter::once(lo)
                .chain(std::iter::repeat_n(Bson::MinKey, rest))
                .collect(),
            max: std::iter::once(hi)
                .chain(std::iter::repeat_n(Bson::MaxKey, rest))
                .collect(),
        };
        match constraint(filter, &self.fields[0]) {
            None => whole(),
            Some(Constraint::Points(points)) => points
                .into_iter()
                .map(|p| {
                    let p = self.stored(0, p);
                    span(p.clone(), p)
                })
                .collect(),
            // Hashing scatters an interval over the whole key space.
            Some(Constraint::Interval(..)) if self.hashed == Some(0) => whole(),
            Some(Constraint::Interval(lo, hi)) => vec![span(lo, hi)],
        }
    }
}

/// What `filter` (its top level and `$and`) says about `field`. The first usable
/// predicate wins: each alone bounds the result, so using one is always safe.
fn constraint(filter: &Document, field: &str) -> Option<Constraint> {
    if let Some(v) = filter.get(field) {
        if let Some(c) = value_constraint(v) {
            return Some(c);
        }
    }
    if let Ok(all) = filter.get_array("$and") {
        for clause in all.iter().filter_map(Bson::as_document) {
            if let Some(c) = constraint(clause, field) {
                return Some(c);
            }
        }
    }
    None
}

fn value_constraint(v: &Bson) -> Option<Constraint> {
    match v {
        Bson::RegularExpression(_) => None,
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
            operator_constraint(d)
        }
        // A document or array compared whole: equality.
        other => Some(Constraint::Points(vec![other.clone()])),
    }
}

fn operator_constraint(ops: &Document) -> Option<Constraint> {
    if let Some(v) = ops.get("$eq") {
        return match v {
            Bson::RegularExpression(_) => None,
            v => Some(Constraint::Points(vec![v.clone()])),
        };
    }
    if let Ok(list) = ops.get_array("$in") {
        if list
            .iter()
            .any(|v| matches!(v, Bson::RegularExpression(_) | Bson::Array(_)))
        {
            return None;
        }
        return Some(Constraint::Points(list.clone()));
    }
    let mut lo = None;
    let mut hi = None;
    for (op, v) in ops {
        match op.as_str() {
            "$gt" | "$gte" => lo = Some(v.clone()),
            "$lt" | "$lte" => hi = Some(v.clone()),
            _ => {}
        }
    }
    if lo.is_none() && hi.is_none() {
        return None;
    }
    // Bounds are kept inclusive: a superset of what `$gt`/`$lt` select.
    let lo = lo.unwrap_or(Bson::MinKey);
    let hi = hi.unwrap_or(Bson::MaxKey);
    if compare(&lo, &hi) == Ordering::Greater {
        return Some(Constraint::Points(Vec::new()));
    }
    Some(Constraint::Interval(lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn ranged() -> ShardKey {
        ShardKey::parse(&doc! {"region": 1, "n": 1}).unwrap()
    }

    #[test]
    fn patterns_are_validated() {
        assert!(ShardKey::parse(&doc! {"a": "hashed"}).unwrap().is_hashed());
        assert!(ShardKey::parse(&doc! {}).is_err());
        assert!(ShardKey::parse(&doc! {"a": -1}).is_err());
        assert!(ShardKey::parse(&doc! {"a": "hashed", "b": "hashed"}).is_err());
        assert!(ShardKey::parse(&doc! {"$a": 1}).is_err());
    }

    #[test]
    fn key_values_default_to_null_and_refuse_arrays() {
        let k = ranged();
        assert_eq!(
            k.value_of(&doc! {"region": "eu"}).unwrap(),
            vec![Bson::from("eu"), Bson::Null]
        );
        let e = k.value_of(&doc! {"region": [1, 2]}).unwrap_err();
        assert_eq!(e.code, ErrorCode::ShardKeyNotFound as i32);
    }

    #[test]
    fn bounds_may_be_key_prefixes() {
        let k = ranged();
        assert_eq!(
            k.bound_from_prefix(&doc! {"region": "eu"}).unwrap(),
            vec![Bson::from("eu"), Bson::MinKey]
        );
        assert!(k.bound_from_prefix(&doc! {"n": 1}).is_err());
        assert!(k.bound_from_prefix(&doc! {"region": "eu", "x": 1}).is_err());
    }

    #[test]
    fn equality_needs_every_field() {
        let k = ranged();
        assert_eq!(
            k.equality(&doc! {"region": "eu", "n": {"$eq": 3}}),
            Some(vec![Bson::from("eu"), Bson::Int32(3)])
        );
        assert_eq!(k.equality(&doc! {"region": "eu"}), None);
        assert_eq!(k.equality(&doc! {"region": "eu", "n": {"$gt": 3}}), None);
    }

    #[test]
    fn points_and_intervals_on_the_first_field() {
        let k = ranged();
        let r = k.ranges(&doc! {"region": {"$in": ["eu", "us"]}});
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].min, vec![Bson::from("eu"), Bson::MinKey]);
        assert_eq!(r[0].max, vec![Bson::from("eu"), Bson::MaxKey]);
        let r = k.ranges(&doc! {"$and": [{"x": 1}, {"region": {"$gte": "b", "$lt": "m"}}]});
        assert_eq!(
            r,
            vec![KeyRange {
                min: vec![Bson::from("b"), Bson::MinKey],
                max: vec![Bson::from("m"), Bson::MaxKey],
            }]
        );
        // Nothing about the first field, or a regex: everything.
        assert_eq!(
            k.ranges(&doc! {"n": 1}),
            vec![KeyRange {
                min: k.global_min(),
                max: k.global_max(),
            }]
        );
        assert_eq!(k.ranges(&doc! {"region": {"$regex": "^e"}}).len(), 1);
        assert_eq!(k.ranges(&doc! {"region": {"$gt": 5, "$lt": 1}}), vec![]);
    }

    #[test]
    fn hashed_keys_target_points_only() {
        let k = ShardKey::parse(&doc! {"_id": "hashed"}).unwrap();
        let r = k.ranges(&doc! {"_id": 7});
        assert_eq!(r[0].min, vec![hashed_value(&Bson::Int32(7))]);
        // 7 and 7.0 are the same key.
        assert_eq!(k.ranges(&doc! {"_id": 7.0})[0].min, r[0].min);
        assert_eq!(
            k.ranges(&doc! {"_id": {"$gt": 7}})[0].min,
            vec![Bson::MinKey]
        );
    }

    #[test]
    fn chunk_overlap_is_half_open() {
        let range = KeyRange {
            min: vec![Bson::Int32(10)],
            max: vec![Bson::Int32(10)],
        };
        assert!(range.overlaps_chunk(&[Bson::Int32(10)], &[Bson::Int32(20)]));
        assert!(!range.overlaps_chunk(&[Bson::Int32(0)], &[Bson::Int32(10)]));
        assert!(range.overlaps_chunk(&[Bson::MinKey], &[Bson::MaxKey]));
    }
}
