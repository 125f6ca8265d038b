//! Sort specifications and document comparison (owner: query-core helper).
//!
//! Sort keys follow MongoDB: a missing field sorts as null; an array contributes its
//! smallest element when ascending and its largest when descending (arrays reached
//! through a dotted path are traversed the same way); an empty array sorts as
//! `undefined`, i.e. before null.
// MongoError is the shared, deliberately rich error type; boxing it is a crate-wide decision.
use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::order::compare;
use crate::path::traverse;
use crate::{ErrorCode, MongoError, MongoResult};

/// A parsed sort specification such as `{a: 1, "b.c": -1}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortSpec {
    fields: Vec<(String, bool)>,
    natural: Option<bool>,
}

fn direction(field: &str, v: &Bson) -> MongoResult<bool> {
    let n = match v {
        Bson::Int32(i) => Some(*i as f64),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        Bson::Decimal128(_) => crate::order::as_f64(v),
        Bson::Document(d) if d.contains_key("$meta") => {
            return Err(MongoError::bad_value(format!(
                "$meta sort by {} is not supported",
                d.get("$meta").map(|m| m.to_string()).unwrap_or_default()
            )))
        }
        _ => None,
    };
    match n {
        Some(1.0) => Ok(true),
        Some(-1.0) => Ok(false),
        Some(_) => Err(MongoError::new(
            ErrorCode::SortOrderInvalid,
            "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
        )),
        None => Err(MongoError::new(
            ErrorCode::SortKeyIllegal,
            format!("Illegal key in $sort specification: {field}: {v}"),
        )),
    }
}

impl SortSpec {
    /// Parses `{field: 1 | -1, ...}`. Other numbers are error 15975, other values 15974,
    /// `{$meta: ...}` is BadValue (text/search scores are not supported), empty field
    /// names are 15998 and `$`-prefixed components 16410. `$natural` is accepted and
    /// reported by [`SortSpec::natural`] but does not take part in comparisons.
    pub fn new(spec: &Document) -> MongoResult<SortSpec> {
        let mut fields = Vec::new();
        let mut natural = None;
        for (k, v) in spec {
            let asc = direction(k, v)?;
            if k == "$natural" {
                natural = Some(asc);
                continue;
            }
            crate::depth::check_path(k)?;
            for comp in k.split('.') {
                if comp.is_empty() {
                    return Err(MongoError::new(
                        ErrorCode::FieldPathEmptyComponent,
                        "FieldPath field names may not be empty strings.",
                    ));
                }
                if comp.starts_with('$') {
                    return Err(MongoError::new(
                        ErrorCode::FieldPathDollarPrefix,
                        format!("FieldPath field names may not start with '$'. Consider using $getField or $setField. ({k})"),
                    ));
                }
            }
            fields.push((k.clone(), asc));
        }
        Ok(SortSpec { fields, natural })
    }

    /// The sort fields in order, with `true` for ascending (1) and `false` for
    /// descending (-1).
    pub fn fields(&self) -> &[(String, bool)] {
        &self.fields
    }

    /// Per-field "descending" flags, as [`crate::keystring::encode_key`] takes them.
    pub fn descending_flags(&self) -> Vec<bool> {
        self.fields.iter().map(|(_, asc)| !asc).collect()
    }

    /// `Some(true)` for `{$natural: 1}`, `Some(false)` for `{$natural: -1}`.
    pub fn natural(&self) -> Option<bool> {
        self.natural
    }

    /// True when no field takes part in comparisons.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The sort key of a document: one value per field (see the module docs). Computing
    /// keys once and comparing them with [`SortSpec::compare_keys`] is cheaper than
    /// calling [`SortSpec::compare`] repeatedly.
    pub fn sort_key(&self, doc: &Document) -> Vec<Bson> {
        self.fields
            .iter()
            .map(|(p, asc)| field_key(doc, p, *asc))
            .collect()
    }

    /// Compares two keys produced by [`SortSpec::sort_key`].
    pub fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for (i, (_, asc)) in self.fields.iter().enumerate() {
            let (Some(x), Some(y)) = (a.get(i), b.get(i)) else {
                break;
            };
            let o = compare(x, y);
            let o = if *asc { o } else { o.reverse() };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// `docs` stably sorted by this order, each document's key computed once rather than
    /// at every comparison.
    pub fn sort_stable(&self, docs: Vec<Document>) -> Vec<Document> {
        let mut keyed: Vec<(Vec<Bson>, Document)> =
            docs.into_iter().map(|d| (self.sort_key(&d), d)).collect();
        keyed.sort_by(|a, b| self.compare_keys(&a.0, &b.0));
        keyed.into_iter().map(|(_, d)| d).collect()
    }

    /// Compares two documents under this sort order.
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        for (p, asc) in &self.fields {
            let o = compare(&field_key(a, p, *asc), &field_key(b, p, *asc));
            let o = if *asc { o } else { o.reverse() };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

/// The value a document sorts by for one field: min (ascending) / max (descending) over
/// the values reached through the path, arrays contributing their elements.
pub fn field_key(doc: &Document, path: &str, ascending: bool) -> Bson {
    let null = Bson::Null;
    let undefined = Bson::Undefined;
    let mut best: Option<&Bson> = None;
    for pv in traverse(doc, path, true) {
        let candidate = match pv.value {
            None => &null,
            Some(Bson::Array(a)) if !pv.expanded => {
                if a.is_empty() {
                    &undefined
                } else {
                    continue;
                }
            }
            Some(v) => v,
        };
        best = match best {
            None => Some(candidate),
            Some(b) => {
                let o = compare(candidate, b);
                let better = if ascending {
                    o == Ordering::Less
                } else {
                    o == Ordering::Greater
                };
                Some(if better { candidate } else { b })
            }
        };
    }
    best.cloned().unwrap_or(Bson::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn sorted(spec: Document, docs: Vec<Document>) -> Vec<i32> {
        let s = SortSpec::new(&spec).unwrap();
        let mut docs = docs;
        docs.sort_by(|a, b| s.compare(a, b));
        let by_compare: Vec<i32> = docs.iter().map(|d| d.get_i32("i").unwrap()).collect();
        // Precomputed keys must agree with direct comparison.
        let mut keyed: Vec<(Vec<Bson>, i32)> = docs
            .iter()
            .map(|d| (s.sort_key(d), d.get_i32("i").unwrap()))
            .collect();
        keyed.sort_by(|a, b| s.compare_keys(&a.0, &b.0));
        assert_eq!(keyed.iter().map(|k| k.1).collect::<Vec<_>>(), by_compare);
        by_compare
    }

    #[test]
    fn parses_directions() {
        let s = SortSpec::new(&doc! {"a": 1, "b.c": -1, "d": 1.0, "e": Bson::Int64(-1)}).unwrap();
        assert_eq!(
            s.fields(),
            &[
                ("a".to_string(), true),
                ("b.c".to_string(), false),
                ("d".to_string(), true),
                ("e".to_string(), false)
            ]
        );
        assert_eq!(s.descending_flags(), vec![false, true, false, true]);
        let n = SortSpec::new(&doc! {"$natural": -1}).unwrap();
        assert_eq!(n.natural(), Some(false));
        assert!(n.is_empty());
    }

    #[test]
    fn rejects_bad_specs() {
        let cases: Vec<(Document, i32)> = vec![
            (doc! {"a": 2}, 15975),
            (doc! {"a": 0}, 15975),
            (doc! {"a": "asc"}, 15974),
            (doc! {"a": true}, 15974),
            (doc! {"a": {"$meta": "textScore"}}, 2),
            (doc! {"a..b": 1}, 15998),
            (doc! {"a.$b": 1}, 16410),
        ];
        for (spec, code) in cases {
            assert_eq!(SortSpec::new(&spec).unwrap_err().code, code, "{spec}");
        }
    }

    #[test]
    fn sorts_documents() {
        let docs = vec![
            doc! {"i": 1, "a": 3},
            doc! {"i": 2, "a": "x"},
            doc! {"i": 3},
            doc! {"i": 4, "a": null},
            doc! {"i": 5, "a": [0, 10]},
            doc! {"i": 6, "a": []},
            doc! {"i": 7, "a": 2.5},
            doc! {"i": 8, "a": {"z": 1}},
        ];
        // missing and null tie; stable sort keeps input order between them.
        assert_eq!(
            sorted(doc! {"a": 1}, docs.clone()),
            vec![6, 3, 4, 5, 7, 1, 2, 8]
        );
        assert_eq!(sorted(doc! {"a": -1}, docs), vec![8, 2, 5, 1, 7, 3, 4, 6]);
    }

    #[test]
    fn compound_and_nested() {
        let docs = vec![
            doc! {"i": 1, "a": 1, "b": {"c": 2}},
            doc! {"i": 2, "a": 1, "b": {"c": 1}},
            doc! {"i": 3, "a": 0, "b": {"c": 9}},
            doc! {"i": 4, "a": 1, "b": [{"c": 5}, {"c": 0}]},
        ];
        assert_eq!(
            sorted(doc! {"a": 1, "b.c": 1}, docs.clone()),
            vec![3, 4, 2, 1]
        );
        assert_eq!(sorted(doc! {"a": -1, "b.c": -1}, docs), vec![4, 1, 2, 3]);
    }

    #[test]
    fn field_keys() {
        let cases: Vec<(Document, &str, bool, Bson)> = vec![
            (doc! {"a": [3, 1, 2]}, "a", true, bson!(1)),
            (doc! {"a": [3, 1, 2]}, "a", false, bson!(3)),
            (doc! {"a": [1, "s"]}, "a", false, bson!("s")),
            (doc! {"a": [{"b": 4}, {"c": 1}]}, "a.b", true, Bson::Null),
            (
                doc! {"a": [{"b": 4}, {"b": [7, 2]}]},
                "a.b",
                false,
                bson!(7),
            ),
            (doc! {"a": [[5], 1]}, "a", false, bson!([5])),
            (doc! {"a": []}, "a", true, Bson::Undefined),
            (doc! {"a": [1, 2]}, "a.b", true, Bson::Null),
            (doc! {}, "a", false, Bson::Null),
        ];
        for (d, p, asc, want) in cases {
            assert_eq!(field_key(&d, p, asc), want, "{d} {p} {asc}");
        }
    }
}
