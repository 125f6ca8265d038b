//! Dotted-path access into documents (owner: query-core helper).
//!
//! Two flavours of lookup:
//! * [`get_path`]: a single value, numeric components index arrays, no array expansion.
//! * [`traverse`] / [`path_values`]: MongoDB's implicit array traversal used by query
//!   matching and multikey index keys (`a.b` over `{a: [{b: 1}, {b: 2}]}` yields 1 and 2).
// MongoError is the shared, deliberately rich error type; boxing it is a crate-wide decision.
use std::collections::HashSet;

use bson::{Bson, Document};

use crate::{ErrorCode, MongoError, MongoResult};

/// The array index a path component denotes: all ASCII digits, no leading zero (except
/// "0" itself).
pub fn array_index(component: &str) -> Option<usize> {
    if component.is_empty() || !component.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if component.len() > 1 && component.starts_with('0') {
        return None;
    }
    component.parse().ok()
}

/// The value at a dotted path: documents by field name, arrays by numeric component.
/// No implicit traversal of arrays (`a.b` on `{a: [{b: 1}]}` is `None`).
pub fn get_path<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let first = parts.next()?;
    let mut cur = doc.get(first)?;
    for p in parts {
        cur = get_child(cur, p)?;
    }
    Some(cur)
}

/// The value at a dotted path starting from any value (the empty path is the value itself).
pub fn get_path_value<'a>(v: &'a Bson, path: &str) -> Option<&'a Bson> {
    if path.is_empty() {
        return Some(v);
    }
    let mut cur = v;
    for p in path.split('.') {
        cur = get_child(cur, p)?;
    }
    Some(cur)
}

fn get_child<'a>(v: &'a Bson, component: &str) -> Option<&'a Bson> {
    match v {
        Bson::Document(d) => d.get(component),
        Bson::Array(a) => a.get(array_index(component)?),
        _ => None,
    }
}

/// Mutable access to the value at a dotted path (no implicit array traversal).
pub fn get_path_mut<'a>(doc: &'a mut Document, path: &str) -> Option<&'a mut Bson> {
    let mut parts = path.split('.');
    let first = parts.next()?;
    let mut cur = doc.get_mut(first)?;
    for p in parts {
        cur = match cur {
            Bson::Document(d) => d.get_mut(p)?,
            Bson::Array(a) => a.get_mut(array_index(p)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// One value reached while traversing a path with MongoDB's array semantics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathValue<'a> {
    /// `None` when the path is missing on this branch.
    pub value: Option<&'a Bson>,
    /// Index into the first array traversed on the way (the positional `$` index).
    pub array_pos: Option<usize>,
    /// True for elements produced by expanding an array found at the end of the path.
    pub expanded: bool,
}

/// Walks `path` through `doc` the way the query engine does:
/// * an array met before the last component is traversed: every document element is
///   searched for the rest of the path, and a numeric component also indexes the array;
///   non-document elements are skipped (they yield nothing, not "missing");
/// * a scalar met before the last component, or an absent field, yields one missing value;
/// * the value at the end of the path is yielded, and if it is an array and `expand_leaf`
///   is set, each of its elements is yielded too (`expanded == true`).
///
/// A value reached twice in the same state (same remaining path, same array position) is
/// walked once: with numeric components, an array of documents is both indexed and
/// traversed, and without this the walk (and its output) grows exponentially with depth.
pub fn traverse<'a>(doc: &'a Document, path: &str, expand_leaf: bool) -> Vec<PathValue<'a>> {
    let comps: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    let mut w = Walk::new(&comps, expand_leaf);
    w.doc(doc, &comps, None, &mut out);
    out
}

/// Like [`traverse`] but starting at an arbitrary value (used for `$elemMatch` elements).
pub fn traverse_value<'a>(v: &'a Bson, path: &str, expand_leaf: bool) -> Vec<PathValue<'a>> {
    let comps: Vec<&str> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('.').collect()
    };
    let mut out = Vec::new();
    let mut w = Walk::new(&comps, expand_leaf);
    w.value(v, &comps, None, &mut out);
    out
}

/// States already walked: (value address, components left, array position).
type Seen = HashSet<(usize, usize, Option<usize>)>;

struct Walk {
    expand: bool,
    /// Only paths with a numeric component can reach a value twice.
    seen: Option<Seen>,
}

impl Walk {
    fn new(comps: &[&str], expand: bool) -> Walk {
        let numeric = comps.iter().any(|c| array_index(c).is_some());
        Walk {
            expand,
            seen: numeric.then(HashSet::new),
        }
    }

    fn doc<'a>(
        &mut self,
        d: &'a Document,
        comps: &[&str],
        pos: Option<usize>,
        out: &mut Vec<PathValue<'a>>,
    ) {
        match d.get(comps[0]) {
            None => out.push(PathValue {
                value: None,
                array_pos: pos,
                expanded: false,
            }),
            Some(v) => self.value(v, &comps[1..], pos, out),
        }
    }

    fn value<'a>(
        &mut self,
        v: &'a Bson,
        rest: &[&str],
        pos: Option<usize>,
        out: &mut Vec<PathValue<'a>>,
    ) {
        if let Some(seen) = &mut self.seen {
            if !seen.insert((v as *const Bson as usize, rest.len(), pos)) {
                return;
            }
        }
        walk_value(self, v, rest, pos, out)
    }
}

fn walk_value<'a>(
    w: &mut Walk,
    v: &'a Bson,
    rest: &[&str],
    pos: Option<usize>,
    out: &mut Vec<PathValue<'a>>,
) {
    let expand = w.expand;
    if rest.is_empty() {
        out.push(PathValue {
            value: Some(v),
            array_pos: pos,
            expanded: false,
        });
        if expand {
            if let Bson::Array(arr) = v {
                for (i, e) in arr.iter().enumerate() {
                    out.push(PathValue {
                        value: Some(e),
                        array_pos: pos.or(Some(i)),
                        expanded: true,
                    });
                }
            }
        }
        return;
    }
    match v {
        Bson::Document(d) => w.doc(d, rest, pos, out),
        Bson::Array(arr) => {
            if let Some(i) = array_index(rest[0]) {
                if let Some(e) = arr.get(i) {
                    w.value(e, &rest[1..], pos, out);
                }
            }
            for (i, e) in arr.iter().enumerate() {
                if matches!(e, Bson::Document(_)) {
                    // Same as walking the element's document with the whole rest.
                    w.value(e, rest, pos.or(Some(i)), out);
                }
            }
        }
        _ => out.push(PathValue {
            value: None,
            array_pos: pos,
            expanded: false,
        }),
    }
}

/// The values a multikey index (or a query) sees at `path`: arrays on the way are
/// traversed, an array at the end contributes its elements (not itself), missing
/// branches contribute nothing. Duplicates (by BSON equality) are removed; first
/// occurrences keep their order. `a.b` over `{a: [{b: 1}, {b: 2}]}` gives `[1, 2]`.
/// An empty vector means the path is missing or only reaches empty arrays.
pub fn path_values(doc: &Document, path: &str) -> Vec<Bson> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for pv in traverse(doc, path, true) {
        let Some(v) = pv.value else { continue };
        if matches!(v, Bson::Array(_)) && !pv.expanded {
            continue;
        }
        if seen.insert(crate::keystring::encode(v)) {
            out.push(v.clone());
        }
    }
    out
}

fn not_viable(field: &str, container: &Bson) -> MongoError {
    let shown = match container {
        Bson::Document(d) => format!("{d}"),
        other => format!("{other}"),
    };
    MongoError::new(
        ErrorCode::PathNotViable,
        format!("Cannot create field '{field}' in element {shown}"),
    )
}

/// Sets the value at a dotted path, creating intermediate documents. A numeric component
/// under an array sets that element (padding with nulls). A scalar in the way, or a
/// non-numeric component under an array, is a `PathNotViable` (28) error.
///
/// A path of more than [`crate::depth::MAX_PATH_COMPONENTS`] components is Overflow (15),
/// and padding an array with more than 1500000 nulls is CannotBackfillArray (34); the
/// walk is iterative.
pub fn set_path(doc: &mut Document, path: &str, value: Bson) -> MongoResult<()> {
    crate::depth::check_path(path)?;
    let comps: Vec<&str> = path.split('.').collect();
    if comps.iter().any(|c| c.is_empty()) {
        return Err(MongoError::bad_value(format!(
            "empty path component in '{path}'"
        )));
    }
    let (last, parents) = comps.split_last().expect("split yields a component");
    if parents.is_empty() {
        doc.insert(*last, value);
        return Ok(());
    }
    let first = parents[0];
    if !doc.contains_key(first) {
        doc.insert(first, Document::new());
    }
    let mut cur = doc.get_mut(first).expect("just inserted");
    for (i, comp) in comps.iter().enumerate().skip(1) {
        let is_last = i + 1 == comps.len();
        cur = match cur {
            Bson::Document(d) => {
                if is_last {
                    d.insert(*comp, value);
                    return Ok(());
                }
                if !d.contains_key(*comp) {
                    d.insert(*comp, Document::new());
                }
                d.get_mut(*comp).expect("just inserted")
            }
            Bson::Array(arr) => {
                let Some(idx) = array_index(comp) else {
                    return Err(not_viable(comp, &Bson::Array(arr.clone())));
                };
                check_backfill(arr.len(), idx)?;
                while arr.len() <= idx {
                    arr.push(Bson::Null);
                }
                if is_last {
                    arr[idx] = value;
                    return Ok(());
                }
                if matches!(arr[idx], Bson::Null) {
                    arr[idx] = Bson::Document(Document::new());
                }
                &mut arr[idx]
            }
            other => return Err(not_viable(comp, other)),
        };
    }
    Ok(())
}

/// Removes the value at a dotted path and returns it. Documents lose the field; an
/// array element addressed by index is replaced by null (as `$unset` does). No implicit
/// array traversal.
pub fn remove_path(doc: &mut Document, path: &str) -> Option<Bson> {
    match path.rsplit_once('.') {
        None => doc.remove(path),
        Some((parent, last)) => match get_path_mut(doc, parent)? {
            Bson::Document(d) => d.remove(last),
            Bson::Array(a) => {
                let slot = a.get_mut(array_index(last)?)?;
                Some(std::mem::replace(slot, Bson::Null))
            }
            _ => None,
        },
    }
}

/// mongod's `kMaxPaddingAllowed`: an update may pad an array with at most this many nulls.
pub(crate) const MAX_ARRAY_PADDING: usize = 1_500_000;

/// Refuses padding an array of `len` elements up to index `idx` with more than
/// [`MAX_ARRAY_PADDING`] nulls: CannotBackfillArray (34), as mongod's `maybePadTo`.
pub(crate) fn check_backfill(len: usize, idx: usize) -> MongoResult<()> {
    if idx.saturating_sub(len) > MAX_ARRAY_PADDING {
        return Err(MongoError::new(
            ErrorCode::CannotBackfillArray,
            format!("can't backfill more than {MAX_ARRAY_PADDING} elements"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    #[test]
    fn array_index_rules() {
        for (s, want) in [
            ("0", Some(0)),
            ("12", Some(12)),
            ("01", None),
            ("", None),
            ("-1", None),
            ("a", None),
            ("1a", None),
        ] {
            assert_eq!(array_index(s), want, "{s}");
        }
    }

    #[test]
    fn get_path_cases() {
        let d = doc! {"a": {"b": [10, {"c": 3}]}, "x": 1, "arr": [{"b": 1}]};
        let cases: Vec<(&str, Option<Bson>)> = vec![
            ("x", Some(bson!(1))),
            ("a.b.0", Some(bson!(10))),
            ("a.b.1.c", Some(bson!(3))),
            ("a.b.2", None),
            ("a.c", None),
            ("x.y", None),
            ("arr.b", None),
            ("arr.0.b", Some(bson!(1))),
        ];
        for (p, want) in cases {
            assert_eq!(get_path(&d, p).cloned(), want, "{p}");
        }
        assert_eq!(
            get_path_value(&bson!({"q": [1, 2]}), "q.1"),
            Some(&bson!(2))
        );
    }

    #[test]
    fn path_values_cases() {
        let cases: Vec<(Document, &str, Vec<Bson>)> = vec![
            (
                doc! {"a": [{"b": 1}, {"b": 2}]},
                "a.b",
                vec![bson!(1), bson!(2)],
            ),
            (doc! {"a": [1, 2, 1.0]}, "a", vec![bson!(1), bson!(2)]),
            (
                doc! {"a": {"b": [[1], 2]}},
                "a.b",
                vec![bson!([1]), bson!(2)],
            ),
            (
                doc! {"a": [{"b": [1, 2]}, {"b": 3}, {"c": 1}]},
                "a.b",
                vec![bson!(1), bson!(2), bson!(3)],
            ),
            (doc! {"a": [{"b": 1}, {"b": 2}]}, "a.1.b", vec![bson!(2)]),
            (doc! {"a": 5}, "a.b", vec![]),
            (doc! {"a": []}, "a", vec![]),
            (doc! {}, "a", vec![]),
            (
                doc! {"a": [{"0": 7}, 8]},
                "a.0",
                vec![bson!({"0": 7}), bson!(7)],
            ),
        ];
        for (d, p, want) in cases {
            assert_eq!(path_values(&d, p), want, "{d} {p}");
        }
    }

    #[test]
    fn traverse_reports_missing_and_positions() {
        let d = doc! {"a": [{"b": 1}, {"c": 2}, 5, {"b": [7, 8]}]};
        let got: Vec<(Option<Bson>, Option<usize>, bool)> = traverse(&d, "a.b", true)
            .into_iter()
            .map(|p| (p.value.cloned(), p.array_pos, p.expanded))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(bson!(1)), Some(0), false),
                (None, Some(1), false),
                (Some(bson!([7, 8])), Some(3), false),
                (Some(bson!(7)), Some(3), true),
                (Some(bson!(8)), Some(3), true),
            ]
        );
        let leaf: Vec<Option<usize>> = traverse(&doc! {"a": [4, 5]}, "a", true)
            .iter()
            .map(|p| p.array_pos)
            .collect();
        assert_eq!(leaf, vec![None, Some(0), Some(1)]);
        assert_eq!(traverse(&doc! {"a": 1}, "a.b", true).len(), 1);
        assert!(traverse(&doc! {"a": [1, 2]}, "a.b", true).is_empty());
    }

    #[test]
    fn set_path_cases() {
        let cases: Vec<(Document, &str, Bson, Document)> = vec![
            (doc! {}, "a", bson!(1), doc! {"a": 1}),
            (doc! {}, "a.b.c", bson!(1), doc! {"a": {"b": {"c": 1}}}),
            (
                doc! {"a": {"x": 1}},
                "a.b",
                bson!(2),
                doc! {"a": {"x": 1, "b": 2}},
            ),
            (doc! {"a": [1]}, "a.2", bson!(3), doc! {"a": [1, null, 3]}),
            (
                doc! {"a": [1]},
                "a.2.b",
                bson!(3),
                doc! {"a": [1, null, {"b": 3}]},
            ),
            (
                doc! {"a": [{"b": 1}]},
                "a.0.b",
                bson!(9),
                doc! {"a": [{"b": 9}]},
            ),
        ];
        for (mut d, p, v, want) in cases {
            set_path(&mut d, p, v).unwrap();
            assert_eq!(d, want, "{p}");
        }
        let mut d = doc! {"a": 5};
        assert_eq!(set_path(&mut d, "a.b", bson!(1)).unwrap_err().code, 28);
        let mut d = doc! {"a": [1]};
        assert_eq!(set_path(&mut d, "a.b", bson!(1)).unwrap_err().code, 28);
        assert_eq!(set_path(&mut d, "a..b", bson!(1)).unwrap_err().code, 2);
    }

    #[test]
    fn remove_path_cases() {
        let mut d = doc! {"a": {"b": 1, "c": 2}, "x": [1, 2]};
        assert_eq!(remove_path(&mut d, "a.b"), Some(bson!(1)));
        assert_eq!(remove_path(&mut d, "x.0"), Some(bson!(1)));
        assert_eq!(remove_path(&mut d, "nope.z"), None);
        assert_eq!(remove_path(&mut d, "a.c.d"), None);
        assert_eq!(d, doc! {"a": {"c": 2}, "x": [null, 2]});
        assert_eq!(remove_path(&mut d, "x"), Some(bson!([null, 2])));
    }
}
