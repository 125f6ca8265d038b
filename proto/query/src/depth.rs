//! Nesting limits for documents, values and field paths (owner: query-core helper).
//!
//! Client documents arrive validated to at most [`wire::MAX_NESTING_DEPTH`] levels, but
//! updates, pipelines and expressions can build deeper values, and field paths are
//! arbitrary strings. Everything here is iterative (an explicit stack, never recursion),
//! so it is safe on values of any depth, and allocates nothing proportional to a path.

use bson::{Bson, Document};
use wire::MAX_NESTING_DEPTH;

use crate::{ErrorCode, MongoError, MongoResult};

/// Most components a field path may have anywhere (filters, projections, sort keys,
/// updates, expressions, stage arguments). A path longer than twice the nesting limit
/// can never be satisfied by a storable document; refusing it early bounds every walk
/// and tree built from a path.
pub const MAX_PATH_COMPONENTS: usize = 2 * MAX_NESTING_DEPTH;

/// Deepest value an aggregation expression or pipeline stage may produce: MongoDB's
/// `BSONDepth::kDefaultMaxAllowableDepth` (documents it can still convert to BSON).
pub const MAX_VALUE_DEPTH: usize = 2 * MAX_NESTING_DEPTH;

/// MongoDB's storage error (`storage_validation.cpp`): Overflow (15).
pub fn nesting_error() -> MongoError {
    MongoError::new(
        ErrorCode::Overflow,
        format!("Document exceeds maximum nesting depth of {MAX_NESTING_DEPTH}"),
    )
}

/// MongoDB's error for a value too deep to convert to BSON: Overflow (15).
pub fn value_depth_error() -> MongoError {
    MongoError::new(
        ErrorCode::Overflow,
        format!(
            "cannot convert document to BSON because it exceeds the limit of {MAX_VALUE_DEPTH} levels of nesting"
        ),
    )
}

/// Number of components of a dotted path (`"a.b"` has 2), counting no further than
/// `MAX_PATH_COMPONENTS + 1`.
fn components_capped(path: &str) -> usize {
    let mut n = 1;
    for b in path.bytes() {
        if b == b'.' {
            n += 1;
            if n > MAX_PATH_COMPONENTS {
                break;
            }
        }
    }
    n
}

fn shown(path: &str) -> String {
    // The path itself can be megabytes long: show a prefix, cut on a char boundary.
    const SHOW: usize = 100;
    if path.len() <= SHOW {
        return path.to_string();
    }
    let mut end = SHOW;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &path[..end])
}

/// Refuses a field path with more than [`MAX_PATH_COMPONENTS`] components: Overflow (15).
/// Counts separators without allocating, so call it before splitting the path.
pub fn check_path(path: &str) -> MongoResult<()> {
    if components_capped(path) > MAX_PATH_COMPONENTS {
        return Err(MongoError::new(
            ErrorCode::Overflow,
            format!(
                "FieldPath '{}' is too long: more than {MAX_PATH_COMPONENTS} components (documents nest at most {MAX_NESTING_DEPTH} levels)",
                shown(path)
            ),
        ));
    }
    Ok(())
}

/// Refuses an update path whose application would nest a document more than
/// [`MAX_NESTING_DEPTH`] levels deep (`a.b` puts its value one level down, so a path of
/// `n` components creates `n - 1` levels): Overflow (15), MongoDB's storage message.
pub fn check_update_path(path: &str) -> MongoResult<()> {
    if components_capped(path) > MAX_NESTING_DEPTH + 1 {
        return Err(nesting_error());
    }
    Ok(())
}

/// The nesting depth of a value, counting no further than `limit + 1`: scalars are 0,
/// `{}` and `[]` are 1, `{a: {}}` is 2. Iterative.
pub fn value_depth_capped(v: &Bson, limit: usize) -> usize {
    fn children(v: &Bson) -> Option<Box<dyn Iterator<Item = &Bson> + '_>> {
        match v {
            Bson::Document(d) => Some(Box::new(d.values())),
            Bson::Array(a) => Some(Box::new(a.iter())),
            Bson::JavaScriptCodeWithScope(c) => Some(Box::new(c.scope.values())),
            _ => None,
        }
    }
    let Some(first) = children(v) else {
        return 0;
    };
    let mut stack = vec![first];
    let mut deepest = 1;
    while let Some(top) = stack.last_mut() {
        match top.next() {
            Some(child) => {
                if let Some(it) = children(child) {
                    stack.push(it);
                    deepest = deepest.max(stack.len());
                    if deepest > limit {
                        return deepest;
                    }
                }
            }
            None => {
                stack.pop();
            }
        }
    }
    deepest
}

/// The nesting depth of a document below its top level (`{}` is 0, `{a: {}}` is 1, the
/// convention of `wire::bson_check`), counting no further than `limit + 1`.
pub fn document_depth_capped(doc: &Document, limit: usize) -> usize {
    let mut deepest = 0;
    for v in doc.values() {
        deepest = deepest.max(value_depth_capped(v, limit));
        if deepest > limit {
            break;
        }
    }
    deepest
}

/// Refuses a document nested deeper than [`MAX_NESTING_DEPTH`] (embedded documents and
/// arrays each count a level; `{}` is depth 0, `{a: {}}` depth 1): Overflow (15),
/// "Document exceeds maximum nesting depth of 100". Uses an explicit stack, so it is safe
/// on a document of any depth.
pub fn check_document_depth(doc: &Document) -> MongoResult<()> {
    if document_depth_capped(doc, MAX_NESTING_DEPTH) > MAX_NESTING_DEPTH {
        return Err(nesting_error());
    }
    Ok(())
}

/// Refuses a computed value nested deeper than [`MAX_VALUE_DEPTH`]: Overflow (15).
pub fn check_value_depth(v: &Bson) -> MongoResult<()> {
    if matches!(v, Bson::Document(_) | Bson::Array(_))
        && value_depth_capped(v, MAX_VALUE_DEPTH) > MAX_VALUE_DEPTH
    {
        return Err(value_depth_error());
    }
    Ok(())
}

/// Refuses a computed document nested deeper than [`MAX_VALUE_DEPTH`]: Overflow (15).
pub fn check_computed_document(doc: &Document) -> MongoResult<()> {
    if document_depth_capped(doc, MAX_VALUE_DEPTH) > MAX_VALUE_DEPTH {
        return Err(value_depth_error());
    }
    Ok(())
}

/// Drops a value of any depth without recursing (the derived drop of `Bson` recurses
/// once per level). Used where a value may be deeper than the stack allows.
pub fn drop_deep(v: Bson) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Bson::Document(d) => stack.extend(d.into_iter().map(|(_, x)| x)),
            Bson::Array(a) => stack.extend(a),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    /// `{a: {a: ... {} }}` with `levels` nested documents below the top.
    fn nested_doc(levels: usize) -> Document {
        let mut d = Document::new();
        for _ in 0..levels {
            let mut outer = Document::new();
            outer.insert("a", d);
            d = outer;
        }
        d
    }

    #[test]
    fn document_depth_convention() {
        assert_eq!(document_depth_capped(&doc! {}, 100), 0);
        assert_eq!(document_depth_capped(&doc! {"a": 1}, 100), 0);
        assert_eq!(document_depth_capped(&doc! {"a": {}}, 100), 1);
        assert_eq!(document_depth_capped(&doc! {"a": []}, 100), 1);
        assert_eq!(document_depth_capped(&doc! {"a": [[1], {"b": {}}]}, 100), 3);
        assert_eq!(value_depth_capped(&bson!(1), 100), 0);
        assert_eq!(value_depth_capped(&bson!({}), 100), 1);
        assert_eq!(value_depth_capped(&bson!([{"a": [1]}]), 100), 3);
        assert_eq!(document_depth_capped(&nested_doc(5), 100), 5);
    }

    #[test]
    fn check_document_depth_limit() {
        assert!(check_document_depth(&nested_doc(MAX_NESTING_DEPTH)).is_ok());
        let e = check_document_depth(&nested_doc(MAX_NESTING_DEPTH + 1)).unwrap_err();
        assert_eq!(e.code, 15);
        assert_eq!(e.message, "Document exceeds maximum nesting depth of 100");
        let mut arrays = Bson::Int32(1);
        for _ in 0..MAX_NESTING_DEPTH {
            arrays = Bson::Array(vec![arrays]);
        }
        assert!(check_document_depth(&doc! {"a": arrays.clone()}).is_ok());
        arrays = Bson::Array(vec![arrays]);
        assert_eq!(
            check_document_depth(&doc! {"a": arrays}).unwrap_err().code,
            15
        );
    }

    #[test]
    fn check_document_depth_is_iterative() {
        // 100000 levels: a recursive walk (or the derived drop) would overflow the stack.
        let run = || {
            let mut v = Bson::Document(Document::new());
            for _ in 0..100_000 {
                v = Bson::Array(vec![v]);
            }
            let mut d = Document::new();
            d.insert("a", v);
            let e = check_document_depth(&d).unwrap_err();
            assert_eq!(e.code, 15);
            let v = d.remove("a").unwrap();
            drop_deep(v);
        };
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(run)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn path_limits() {
        let ok = vec!["a"; MAX_PATH_COMPONENTS].join(".");
        assert!(check_path(&ok).is_ok());
        let long = vec!["a"; MAX_PATH_COMPONENTS + 1].join(".");
        assert_eq!(check_path(&long).unwrap_err().code, 15);
        let huge = "a.".repeat(1_000_000);
        assert_eq!(check_path(&huge).unwrap_err().code, 15);
        assert!(check_update_path(&vec!["a"; 101].join(".")).is_ok());
        let e = check_update_path(&vec!["a"; 102].join(".")).unwrap_err();
        assert_eq!(e.code, 15);
        // A long multi-byte path is shown cut on a char boundary.
        let wide = "é.".repeat(300);
        assert!(check_path(&wide).unwrap_err().message.contains("..."));
    }
}
