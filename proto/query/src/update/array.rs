//! Array operators: `$push` (with `$each`, `$slice`, `$sort`, `$position`), `$addToSet`,
//! `$pull` and `$pullAll` (`$pop` is applied in `apply.rs`).

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::expr::{num_f64, num_of, type_name};
use crate::matcher::Matcher;
use crate::{MongoError, MongoResult};

use super::apply::lookup;
use super::values::fmt_doc;

#[derive(Debug)]
pub(super) struct PushSpec {
    pub(super) each: Vec<Bson>,
    pub(super) position: Option<i64>,
    pub(super) slice: Option<i64>,
    pub(super) sort: Option<SortSpec>,
}

#[derive(Debug)]
pub(super) enum SortSpec {
    Whole(bool),
    Fields(Vec<(Vec<String>, bool)>),
}

#[derive(Debug)]
pub(super) enum PullCond {
    Equal(Bson),
    /// Elements that are documents matching a query (`{$pull: {a: {x: 1}}}`).
    Doc(Matcher),
    /// Elements matching an operator expression (`{$pull: {a: {$gt: 1}}}` or a regex),
    /// evaluated as mongod does against `{x: element}`.
    Value(Matcher),
}

pub(super) fn parse_push(value: &Bson) -> MongoResult<PushSpec> {
    let mut spec = PushSpec {
        each: Vec::new(),
        position: None,
        slice: None,
        sort: None,
    };
    let clauses = match value {
        Bson::Document(d) if d.contains_key("$each") => d,
        _ => {
            spec.each.push(value.clone());
            return Ok(spec);
        }
    };
    for (k, v) in clauses {
        match k.as_str() {
            "$each" => match v {
                Bson::Array(a) => spec.each = a.clone(),
                other => {
                    return Err(MongoError::bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        type_name(other)
                    )))
                }
            },
            "$slice" => {
                spec.slice = Some(integral(v).ok_or_else(|| {
                    MongoError::bad_value(format!(
                        "The value for $slice must be an integer value but was given type: {}",
                        type_name(v)
                    ))
                })?)
            }
            "$position" => {
                spec.position = Some(integral(v).ok_or_else(|| {
                    MongoError::bad_value(format!(
                        "The value for $position must be an integer value, not of type: {}",
                        type_name(v)
                    ))
                })?)
            }
            "$sort" => spec.sort = Some(parse_push_sort(v)?),
            other => {
                return Err(MongoError::bad_value(format!(
                    "Unrecognized clause in $push: {other}"
                )))
            }
        }
    }
    Ok(spec)
}

pub(super) fn integral(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.is_finite() => Some(*d as i64),
        Bson::Decimal128(_) => num_of(v)
            .map(num_f64)
            .filter(|d| d.fract() == 0.0)
            .map(|d| d as i64),
        _ => None,
    }
}

fn sort_direction(v: &Bson) -> Option<bool> {
    let d = num_f64(num_of(v)?);
    if d == 1.0 {
        Some(true)
    } else if d == -1.0 {
        Some(false)
    } else {
        None
    }
}

fn parse_push_sort(v: &Bson) -> MongoResult<SortSpec> {
    let bad_dir = || MongoError::bad_value("The $sort element value must be either 1 or -1");
    match v {
        Bson::Document(d) => {
            if d.is_empty() {
                return Err(MongoError::bad_value("The $sort pattern is empty when it should be a set of fields."));
            }
            let mut fields = Vec::new();
            for (k, dir) in d {
                let asc = sort_direction(dir).ok_or_else(bad_dir)?;
                if k.is_empty() {
                    return Err(MongoError::bad_value("The $sort field cannot be empty"));
                }
                crate::depth::check_path(k)?;
                let parts: Vec<String> = k.split('.').map(str::to_owned).collect();
                if parts.iter().any(String::is_empty) {
                    return Err(MongoError::bad_value(format!(
                        "The $sort field is a dotted field but has an empty part: {k}"
                    )));
                }
                fields.push((parts, asc));
            }
            Ok(SortSpec::Fields(fields))
        }
        v if num_of(v).is_some() => Ok(SortSpec::Whole(sort_direction(v).ok_or_else(bad_dir)?)),
        _ => Err(MongoError::bad_value(
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
        )),
    }
}

pub(super) fn parse_add_to_set(value: &Bson) -> MongoResult<Vec<Bson>> {
    match value {
        Bson::Document(d) if d.keys().next().is_some_and(|k| k == "$each") => {
            if d.len() > 1 {
                let mut rest = d.clone();
                rest.remove("$each");
                return Err(MongoError::bad_value(format!(
                    "Found unexpected fields after $each in $addToSet: {}",
                    fmt_doc(d)
                )));
            }
            match d.get("$each") {
                Some(Bson::Array(a)) => Ok(a.clone()),
                Some(other) => Err(MongoError::type_mismatch(format!(
                    "The argument to $each in $addToSet must be an array but it was of type {}",
                    type_name(other)
                ))),
                None => unreachable!(),
            }
        }
        _ => Ok(vec![value.clone()]),
    }
}

/// Query operators that take a path (mongod's `parsePathAcceptingKeyword`): a `$pull`
/// argument starting with one of them is a condition on the element itself.
const VALUE_OPERATORS: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$size",
    "$all",
    "$elemMatch",
    "$regex",
    "$options",
    "$mod",
    "$not",
    "$bitsAllSet",
    "$bitsAllClear",
    "$bitsAnySet",
    "$bitsAnyClear",
    "$geoWithin",
    "$geoIntersects",
    "$within",
    "$near",
    "$nearSphere",
];

pub(super) fn parse_pull(value: &Bson) -> MongoResult<PullCond> {
    match value {
        Bson::Document(d) => {
            let is_value_cond = d
                .keys()
                .next()
                .is_some_and(|k| VALUE_OPERATORS.contains(&k.as_str()));
            if is_value_cond {
                let mut wrapped = Document::new();
                wrapped.insert(PULL_FIELD, value.clone());
                Ok(PullCond::Value(Matcher::new(&wrapped)?))
            } else {
                Ok(PullCond::Doc(Matcher::new(d)?))
            }
        }
        Bson::RegularExpression(_) => {
            let mut wrapped = Document::new();
            wrapped.insert(PULL_FIELD, value.clone());
            Ok(PullCond::Value(Matcher::new(&wrapped)?))
        }
        _ => Ok(PullCond::Equal(value.clone())),
    }
}

const PULL_FIELD: &str = "x";

pub(super) fn pull_matches(cond: &PullCond, e: &Bson) -> bool {
    match cond {
        PullCond::Equal(x) => crate::order::values_equal(e, x),
        PullCond::Doc(m) => match e {
            Bson::Document(d) => m.matches(d),
            _ => false,
        },
        PullCond::Value(m) => {
            let mut wrapped = Document::new();
            wrapped.insert(PULL_FIELD, e.clone());
            m.matches(&wrapped)
        }
    }
}

/// What a `$push` did to an existing array, as mongod's PushNode reports it.
pub(super) enum Pushed {
    Unchanged,
    /// Elements only appended to a non-empty array, at no `$position` within it: mongod
    /// logs the new elements alone.
    Appended(usize),
    /// Anything else, logged as the whole array (any `$sort` counts, even a no-op one).
    Rewritten,
}

/// mongod's PushNode: insert at `$position`, then `$sort`, then `$slice`.
pub(super) fn perform_push(spec: &PushSpec, arr: &mut Vec<Bson>) -> Pushed {
    let mut result = Pushed::Unchanged;
    if !spec.each.is_empty() {
        let len = arr.len() as i64;
        let at = match spec.position {
            None => len,
            Some(p) if p > len => len,
            Some(p) if p >= 0 => p,
            Some(p) if p.unsigned_abs() < len as u64 => len + p,
            Some(_) => 0,
        } as usize;
        // mongod appends only past the end: an explicit `$position` equal to the length
        // inserts after the last element, which it logs as a rewrite.
        let appends = len > 0 && spec.position.is_none_or(|p| p > len);
        arr.splice(at..at, spec.each.iter().cloned());
        result = if appends {
            Pushed::Appended(spec.each.len())
        } else {
            Pushed::Rewritten
        };
    }
    if let Some(sort) = &spec.sort {
        sort_array(arr, sort);
        result = Pushed::Rewritten;
    }
    if let Some(slice) = spec.slice {
        let keep = slice.unsigned_abs().min(usize::MAX as u64) as usize;
        if arr.len() > keep {
            if slice >= 0 {
                arr.truncate(keep);
            } else {
                arr.drain(..arr.len() - keep);
            }
            result = Pushed::Rewritten;
        }
    }
    result
}

fn sort_array(arr: &mut [Bson], sort: &SortSpec) {
    match sort {
        SortSpec::Whole(asc) => arr.sort_by(|a, b| {
            let o = crate::order::compare(a, b);
            if *asc {
                o
            } else {
                o.reverse()
            }
        }),
        SortSpec::Fields(fields) => arr.sort_by(|a, b| {
            for (path, asc) in fields {
                let (x, y) = (value_at(a, path), value_at(b, path));
                let o = match (x, y) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => crate::order::compare(x, y),
                };
                let o = if *asc { o } else { o.reverse() };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        }),
    }
}

fn value_at<'a>(v: &'a Bson, path: &[String]) -> Option<&'a Bson> {
    let mut cur = v;
    for p in path {
        cur = lookup(cur, p)?;
    }
    Some(cur)
}
