//! find() projections (owner: query-core helper).
//!
//! Supported: inclusion and exclusion (`1`/`true`/non-zero numbers include, `0`/`false`
//! exclude; mixing is error 31254/31253), `_id` included by default, dotted paths and
//! nested specs (`{a: {b: 1}}`), arrays of documents on the way, `$slice` (n or
//! [skip, limit]), `$elemMatch`, the positional `a.$`, and computed fields (any other
//! value is an aggregation expression evaluated with [`crate::expr`]).
//!
//! Output order: fields kept from the document stay in document order; `$elemMatch`
//! fields and computed fields that are new are appended in specification order.
//! Not supported: `{$meta: ...}` (BadValue).
// MongoError is the shared, deliberately rich error type; boxing it is a crate-wide decision.
use bson::{Bson, Document};

use crate::expr::{Expr, Variables};
use crate::matcher::Matcher;
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
enum PNode {
    Include,
    Exclude,
    Expr(Box<Expr>),
    Slice {
        skip: Option<i64>,
        limit: i64,
    },
    /// `$elemMatch`: a matcher over `{x: <array>}` whose position picks the element.
    ElemMatch(Box<Matcher>),
    Positional,
    Children(Vec<(String, PNode)>),
}

/// A parsed find() projection.
#[derive(Debug, Clone)]
pub struct Projection {
    inclusion: bool,
    nodes: Vec<(String, PNode)>,
    positional: bool,
    identity: bool,
}

fn positional_error() -> MongoError {
    MongoError::new(
        ErrorCode::PositionalProjectionNoMatch,
        "Executor error during find command :: caused by :: positional operator '.$' couldn't find a matching element in the array",
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Include,
    Exclude,
    Neutral,
}

struct Parser {
    mode: Option<bool>,
    positional: bool,
}

impl Parser {
    fn set_mode(&mut self, path: &str, kind: Kind, is_expr: bool) -> MongoResult<()> {
        if path == "_id" && !is_expr && kind != Kind::Neutral {
            return Ok(());
        }
        match (kind, self.mode) {
            (Kind::Neutral, _) => Ok(()),
            (Kind::Include, None) => {
                self.mode = Some(true);
                Ok(())
            }
            (Kind::Exclude, None) => {
                self.mode = Some(false);
                Ok(())
            }
            (Kind::Include, Some(true)) | (Kind::Exclude, Some(false)) => Ok(()),
            (Kind::Exclude, Some(true)) => Err(MongoError::new(
                ErrorCode::ProjectionExclusionInInclusion,
                format!("Cannot do exclusion on field {path} in inclusion projection"),
            )),
            (Kind::Include, Some(false)) => {
                if is_expr {
                    Err(MongoError::new(ErrorCode::ProjectionExpressionInExclusion, format!("Cannot use expression other than $meta in exclusion projection (field {path})")))
                } else {
                    Err(MongoError::new(
                        ErrorCode::ProjectionInclusionInExclusion,
                        format!("Cannot do inclusion on field {path} in exclusion projection"),
                    ))
                }
            }
        }
    }

    fn parse_spec(
        &mut self,
        prefix: &str,
        spec: &Document,
        out: &mut Vec<(String, PNode)>,
    ) -> MongoResult<()> {
        for (k, v) in spec {
            let full = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            self.parse_field(&full, v, out)?;
        }
        Ok(())
    }

    fn parse_field(
        &mut self,
        full: &str,
        v: &Bson,
        out: &mut Vec<(String, PNode)>,
    ) -> MongoResult<()> {
        crate::depth::check_path(full)?;
        let (path, positional) = match full.strip_suffix(".$") {
            Some(p) => (p, true),
            None => (full, false),
        };
        for comp in path.split('.') {
            if comp.is_empty() {
                return Err(MongoError::new(
                    ErrorCode::FieldPathEmptyComponent,
                    "FieldPath field names may not be empty strings.",
                ));
            }
            if comp == "$" {
                return Err(MongoError::new(ErrorCode::ProjectionPositionalMidPath, format!("As of 4.4, it's illegal to specify positional operator in the middle of a path.Positional projection may only be used at the end, for example: a.b.$. If the query previously used a form like a.b.$.d, remove the parts following the '$' and the results will be equivalent. (field {full})")));
            }
            if comp.starts_with('$') {
                return Err(MongoError::new(
                    ErrorCode::FieldPathDollarPrefix,
                    format!("FieldPath field names may not start with '$'. Consider using $getField or $setField. ({full})"),
                ));
            }
        }
        if positional {
            if self.positional {
                return Err(MongoError::new(
                    ErrorCode::ProjectionPositionalTwice,
                    "Cannot specify more than one positional projection per query.",
                ));
            }
            let include = match v {
                Bson::Boolean(b) => *b,
                n if crate::order::is_number(n) => {
                    crate::order::as_f64(n).is_some_and(|x| x != 0.0)
                }
                _ => false,
            };
            if !include {
                return Err(MongoError::new(ErrorCode::ProjectionPositionalNotInclusion, format!("positional projection cannot be used with exclusion or a literal (field {full})")));
            }
            self.positional = true;
            self.set_mode(path, Kind::Include, false)?;
            return insert(out, path, PNode::Positional);
        }
        let node = match v {
            Bson::Boolean(b) => {
                if *b {
                    PNode::Include
                } else {
                    PNode::Exclude
                }
            }
            n if crate::order::is_number(n) => {
                if crate::order::as_f64(n).is_some_and(|x| x != 0.0) {
                    PNode::Include
                } else {
                    PNode::Exclude
                }
            }
            Bson::Document(d) if d.is_empty() => {
                return Err(MongoError::new(
                    ErrorCode::ProjectionEmptySubProjection,
                    format!("An empty sub-projection is not a valid value. Found empty object at path {path}"),
                ))
            }
            Bson::Document(d) => match d.keys().next().map(String::as_str) {
                Some("$slice") if d.len() == 1 => match parse_slice(d.get("$slice").expect("present"))? {
                    Some(node) => node,
                    None => PNode::Expr(Box::new(Expr::parse(v)?)),
                },
                Some("$elemMatch") => {
                    if d.len() != 1 {
                        return Err(MongoError::bad_value("$elemMatch projection takes exactly one argument"));
                    }
                    if path.contains('.') {
                        return Err(MongoError::new(ErrorCode::ProjectionElemMatchNested, format!("Cannot use $elemMatch projection on a nested field ({path}).")));
                    }
                    let Some(Bson::Document(cond)) = d.get("$elemMatch") else {
                        return Err(MongoError::bad_value("elemMatch: Invalid argument, object required."));
                    };
                    let mut wrapper = Document::new();
                    wrapper.insert("x", Bson::Document(bson::doc! {"$elemMatch": cond.clone()}));
                    PNode::ElemMatch(Box::new(Matcher::new(&wrapper)?))
                }
                Some("$meta") => return Err(MongoError::bad_value(format!("$meta projection is not supported (field {path})"))),
                Some(first) if !first.starts_with('$') => {
                    // A nested projection: {a: {b: 1}} is {"a.b": 1}.
                    return self.parse_spec(path, d, out);
                }
                _ => PNode::Expr(Box::new(Expr::parse(v)?)),
            },
            other => PNode::Expr(Box::new(Expr::parse(other)?)),
        };
        let kind = match node {
            PNode::Include | PNode::Expr(_) | PNode::ElemMatch(_) | PNode::Positional => {
                Kind::Include
            }
            PNode::Exclude => Kind::Exclude,
            PNode::Slice { .. } | PNode::Children(_) => Kind::Neutral,
        };
        self.set_mode(path, kind, matches!(node, PNode::Expr(_)))?;
        insert(out, path, node)
    }
}

/// `Some(node)` for the find form of `$slice` (n or [skip, limit]); `None` when the
/// argument is some other shape (then it is the aggregation `$slice` expression).
fn parse_slice(arg: &Bson) -> MongoResult<Option<PNode>> {
    let int = |v: &Bson| -> Option<i64> {
        match v {
            Bson::Int32(i) => Some(*i as i64),
            Bson::Int64(i) => Some(*i),
            Bson::Double(d) if d.is_finite() => Some(d.trunc() as i64),
            Bson::Decimal128(_) => crate::order::as_f64(v)
                .filter(|d| d.is_finite())
                .map(|d| d.trunc() as i64),
            _ => None,
        }
    };
    match arg {
        n if crate::order::is_number(n) => Ok(Some(PNode::Slice {
            skip: None,
            limit: int(n).unwrap_or(0),
        })),
        Bson::Array(a) if a.len() == 2 && a.iter().all(crate::order::is_number) => {
            let skip = int(&a[0]).unwrap_or(0);
            let limit = int(&a[1]).unwrap_or(0);
            if limit <= 0 {
                return Err(MongoError::new(ErrorCode::SliceFirstNotArray, "First argument to $slice must be an array, and the second must be a positive number"));
            }
            Ok(Some(PNode::Slice {
                skip: Some(skip),
                limit,
            }))
        }
        _ => Ok(None),
    }
}

fn insert(nodes: &mut Vec<(String, PNode)>, path: &str, node: PNode) -> MongoResult<()> {
    let collision = || {
        MongoError::new(
            ErrorCode::ProjectionPathCollision,
            format!("Path collision at {path}"),
        )
    };
    match path.split_once('.') {
        None => {
            if nodes.iter().any(|(k, _)| k == path) {
                return Err(collision());
            }
            nodes.push((path.to_string(), node));
            Ok(())
        }
        Some((head, rest)) => {
            if let Some((_, existing)) = nodes.iter_mut().find(|(k, _)| k == head) {
                match existing {
                    PNode::Children(c) => insert(c, rest, node),
                    _ => Err(collision()),
                }
            } else {
                let mut c = Vec::new();
                insert(&mut c, rest, node)?;
                nodes.push((head.to_string(), PNode::Children(c)));
                Ok(())
            }
        }
    }
}

fn find<'a>(nodes: &'a [(String, PNode)], k: &str) -> Option<&'a PNode> {
    nodes.iter().find(|(n, _)| n == k).map(|(_, v)| v)
}

fn contains_positional(node: &PNode) -> bool {
    match node {
        PNode::Positional => true,
        PNode::Children(c) => c.iter().any(|(_, n)| contains_positional(n)),
        _ => false,
    }
}

fn slice(v: &Bson, skip: Option<i64>, limit: i64) -> Bson {
    let Bson::Array(a) = v else { return v.clone() };
    let len = a.len() as i64;
    let (start, end) = match skip {
        None if limit >= 0 => (0, limit.min(len)),
        None => ((len + limit).max(0), len),
        Some(s) => {
            let start = if s >= 0 { s.min(len) } else { (len + s).max(0) };
            (start, start.saturating_add(limit).min(len))
        }
    };
    Bson::Array(a[start as usize..end as usize].to_vec())
}

struct Apply<'a> {
    root: &'a Document,
    vars: Variables,
    pos: Option<usize>,
    pos_used: bool,
}

impl Apply<'_> {
    fn eval(&self, e: &Expr) -> MongoResult<Option<Bson>> {
        let v = e.eval(self.root, &self.vars)?;
        // The expression module reports "missing" as undefined.
        Ok(if matches!(v, Bson::Undefined) {
            None
        } else {
            Some(v)
        })
    }

    fn include_doc(&mut self, src: &Document, nodes: &[(String, PNode)]) -> MongoResult<Document> {
        let mut out = Document::new();
        for (k, v) in src {
            let Some(node) = find(nodes, k) else { continue };
            match node {
                PNode::Include => {
                    out.insert(k.clone(), v.clone());
                }
                PNode::Exclude | PNode::Expr(_) | PNode::ElemMatch(_) => {}
                PNode::Slice { skip, limit } => {
                    out.insert(k.clone(), slice(v, *skip, *limit));
                }
                PNode::Positional | PNode::Children(_) => {
                    if let Some(projected) = self.include_value(v, node)? {
                        out.insert(k.clone(), projected);
                    }
                }
            }
        }
        for (k, node) in nodes {
            match node {
                PNode::Expr(e) => {
                    if let Some(v) = self.eval(e)? {
                        out.insert(k.clone(), v);
                    }
                }
                PNode::ElemMatch(m) => {
                    if let Some(Bson::Array(arr)) = src.get(k) {
                        let mut wrapper = Document::new();
                        wrapper.insert("x", Bson::Array(arr.clone()));
                        if let Some(Some(i)) = m.matches_with_position(&wrapper) {
                            if let Some(e) = arr.get(i) {
                                out.insert(k.clone(), Bson::Array(vec![e.clone()]));
                            }
                        }
                    }
                }
                PNode::Children(c) if !src.contains_key(k) => {
                    // Computed fields below a field the document lacks create it.
                    let sub = self.include_doc(&Document::new(), c)?;
                    if !sub.is_empty() {
                        out.insert(k.clone(), Bson::Document(sub));
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Projects one value under a `Positional` or `Children` node (inclusion mode).
    fn include_value(&mut self, v: &Bson, node: &PNode) -> MongoResult<Option<Bson>> {
        if let Bson::Array(arr) = v {
            if !self.pos_used && contains_positional(node) {
                self.pos_used = true;
                let i = self.pos.ok_or_else(positional_error)?;
                let e = arr.get(i).ok_or_else(positional_error)?;
                return Ok(match node {
                    PNode::Positional => Some(Bson::Array(vec![e.clone()])),
                    _ => self.include_value(e, node)?.map(|p| Bson::Array(vec![p])),
                });
            }
            let mut items = Vec::new();
            for e in arr {
                match e {
                    Bson::Document(_) | Bson::Array(_) => {
                        if let Some(p) = self.include_value(e, node)? {
                            items.push(p);
                        }
                    }
                    _ if matches!(node, PNode::Positional) => items.push(e.clone()),
                    _ => {}
                }
            }
            return Ok(Some(Bson::Array(items)));
        }
        match (node, v) {
            (PNode::Positional, _) => Ok(Some(v.clone())),
            (PNode::Children(c), Bson::Document(d)) => {
                Ok(Some(Bson::Document(self.include_doc(d, c)?)))
            }
            _ => Ok(None),
        }
    }

    fn exclude_doc(&self, src: &Document, nodes: &[(String, PNode)]) -> Document {
        let mut out = Document::new();
        for (k, v) in src {
            match find(nodes, k) {
                None | Some(PNode::Include) => {
                    out.insert(k.clone(), v.clone());
                }
                Some(PNode::Exclude) => {}
                Some(PNode::Slice { skip, limit }) => {
                    out.insert(k.clone(), slice(v, *skip, *limit));
                }
                Some(PNode::Children(c)) => {
                    out.insert(k.clone(), self.exclude_value(v, c));
                }
                Some(_) => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        out
    }

    fn exclude_value(&self, v: &Bson, nodes: &[(String, PNode)]) -> Bson {
        match v {
            Bson::Document(d) => Bson::Document(self.exclude_doc(d, nodes)),
            Bson::Array(a) => Bson::Array(a.iter().map(|e| self.exclude_value(e, nodes)).collect()),
            other => other.clone(),
        }
    }
}

impl Projection {
    /// Parses a projection specification.
    pub fn new(spec: &Document) -> MongoResult<Projection> {
        let mut p = Parser {
            mode: None,
            positional: false,
        };
        let mut nodes = Vec::new();
        p.parse_spec("", spec, &mut nodes)?;
        let inclusion = match p.mode {
            Some(m) => m,
            // Only _id and/or $slice: {_id: 1} includes just _id, the rest exclude.
            None => matches!(find(&nodes, "_id"), Some(PNode::Include)),
        };
        if inclusion {
            if find(&nodes, "_id").is_none() {
                nodes.insert(0, ("_id".to_string(), PNode::Include));
            }
        } else {
            nodes.retain(|(k, n)| !(k == "_id" && matches!(n, PNode::Include)));
        }
        Ok(Projection {
            inclusion,
            identity: !inclusion && nodes.is_empty(),
            nodes,
            positional: p.positional,
        })
    }

    /// True for inclusion projections (only listed fields are returned).
    pub fn is_inclusion(&self) -> bool {
        self.inclusion
    }

    /// True when the projection uses the positional `$` operator, so callers must pass
    /// the match position to [`Projection::apply_with_position`].
    pub fn requires_match_position(&self) -> bool {
        self.positional
    }

    /// True for `{}` (and specs that exclude nothing): documents are returned unchanged.
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    pub fn apply(&self, doc: &Document) -> MongoResult<Document> {
        self.apply_with_position(doc, None)
    }

    /// Applies the projection; `pos` is the array index from
    /// [`Matcher::matches_with_position`], needed by the positional `$` operator.
    pub fn apply_with_position(&self, doc: &Document, pos: Option<usize>) -> MongoResult<Document> {
        if self.identity {
            return Ok(doc.clone());
        }
        let mut a = Apply {
            root: doc,
            vars: Variables::default(),
            pos,
            pos_used: false,
        };
        if self.inclusion {
            let out = a.include_doc(doc, &self.nodes)?;
            if self.positional && !a.pos_used {
                // The positional path never met an array: MongoDB reports no match.
                let has_path = self
                    .nodes
                    .iter()
                    .any(|(k, n)| contains_positional(n) && doc.contains_key(k));
                if has_path && pos.is_none() {
                    return Err(positional_error());
                }
            }
            Ok(out)
        } else {
            Ok(a.exclude_doc(doc, &self.nodes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn project(spec: Document, d: Document) -> Document {
        Projection::new(&spec)
            .unwrap_or_else(|e| panic!("{spec}: {e}"))
            .apply(&d)
            .unwrap()
    }

    #[test]
    fn inclusion_and_exclusion() {
        let d = doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}, 7], "h": "x"};
        let cases: Vec<(Document, Document)> = vec![
            (doc! {}, d.clone()),
            (doc! {"a": 1}, doc! {"_id": 1, "a": 1}),
            (doc! {"a": true, "_id": 0}, doc! {"a": 1}),
            (doc! {"a": 5}, doc! {"_id": 1, "a": 1}),
            (doc! {"h": 1, "a": 1}, doc! {"_id": 1, "a": 1, "h": "x"}),
            (doc! {"_id": 1}, doc! {"_id": 1}),
            (
                doc! {"_id": 0},
                doc! {"a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}, 7], "h": "x"},
            ),
            (doc! {"b.c": 1}, doc! {"_id": 1, "b": {"c": 2}}),
            (doc! {"b": {"c": 1}}, doc! {"_id": 1, "b": {"c": 2}}),
            (doc! {"b.z": 1}, doc! {"_id": 1, "b": {}}),
            (doc! {"a.z": 1}, doc! {"_id": 1}),
            (doc! {"e.f": 1}, doc! {"_id": 1, "e": [{"f": 1}, {"f": 3}]}),
            (doc! {"missing": 1}, doc! {"_id": 1}),
            (
                doc! {"a": 0},
                doc! {"_id": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}, 7], "h": "x"},
            ),
            (doc! {"a": 0, "_id": 0, "e": 0, "b": 0}, doc! {"h": "x"}),
            (
                doc! {"b.c": 0, "e.g": 0, "a": false, "h": 0},
                doc! {"_id": 1, "b": {"d": 3}, "e": [{"f": 1}, {"f": 3}, 7]},
            ),
            (
                doc! {"_id": 1, "a": 0, "b": 0, "e": 0},
                doc! {"_id": 1, "h": "x"},
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(project(spec.clone(), d.clone()), want, "{spec}");
        }
    }

    #[test]
    fn slice_and_elem_match() {
        let d = doc! {"_id": 1, "a": [1, 2, 3, 4, 5], "b": "x", "c": [{"k": 1, "v": "p"}, {"k": 2, "v": "q"}, {"k": 2, "v": "r"}]};
        let cases: Vec<(Document, Document)> = vec![
            (
                doc! {"a": {"$slice": 2}},
                doc! {"_id": 1, "a": [1, 2], "b": "x", "c": d.get("c").unwrap().clone()},
            ),
            (
                doc! {"a": {"$slice": -2}, "b": 1},
                doc! {"_id": 1, "a": [4, 5], "b": "x"},
            ),
            (
                doc! {"a": {"$slice": [1, 2]}, "_id": 0, "b": 1},
                doc! {"a": [2, 3], "b": "x"},
            ),
            (
                doc! {"a": {"$slice": [-2, 5]}, "b": 1},
                doc! {"_id": 1, "a": [4, 5], "b": "x"},
            ),
            (
                doc! {"a": {"$slice": [10, 2]}, "b": 1},
                doc! {"_id": 1, "a": [], "b": "x"},
            ),
            (
                doc! {"a": {"$slice": 0}, "b": 1},
                doc! {"_id": 1, "a": [], "b": "x"},
            ),
            (
                doc! {"b": {"$slice": 1}, "a": 1},
                doc! {"_id": 1, "a": [1, 2, 3, 4, 5], "b": "x"},
            ),
            (
                doc! {"a": {"$slice": -10}, "c": 0, "b": 0},
                doc! {"_id": 1, "a": [1, 2, 3, 4, 5]},
            ),
            (
                doc! {"c": {"$elemMatch": {"k": 2}}},
                doc! {"_id": 1, "c": [{"k": 2, "v": "q"}]},
            ),
            (doc! {"c": {"$elemMatch": {"k": 9}}}, doc! {"_id": 1}),
            (
                doc! {"a": {"$elemMatch": {"$gt": 3}}, "b": 1},
                doc! {"_id": 1, "b": "x", "a": [4]},
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(project(spec.clone(), d.clone()), want, "{spec}");
        }
    }

    #[test]
    fn positional() {
        let d =
            doc! {"_id": 1, "a": [10, 20, 30], "b": [{"c": 1, "d": 1}, {"c": 2, "d": 2}], "x": 1};
        let filter = doc! {"a": {"$gte": 20}};
        let pos = Matcher::new(&filter)
            .unwrap()
            .matches_with_position(&d)
            .unwrap();
        let p = Projection::new(&doc! {"a.$": 1}).unwrap();
        assert!(p.requires_match_position());
        assert_eq!(
            p.apply_with_position(&d, pos).unwrap(),
            doc! {"_id": 1, "a": [20]}
        );
        let pos = Matcher::new(&doc! {"b.c": 2})
            .unwrap()
            .matches_with_position(&d)
            .unwrap();
        assert_eq!(pos, Some(1));
        let p = Projection::new(&doc! {"b.$": 1, "x": 1}).unwrap();
        assert_eq!(
            p.apply_with_position(&d, pos).unwrap(),
            doc! {"_id": 1, "b": [{"c": 2, "d": 2}], "x": 1}
        );
        let p = Projection::new(&doc! {"b.c.$": 1}).unwrap();
        assert_eq!(
            p.apply_with_position(&d, pos).unwrap(),
            doc! {"_id": 1, "b": [{"c": 2}]}
        );
        let err = Projection::new(&doc! {"a.$": 1})
            .unwrap()
            .apply_with_position(&d, None)
            .unwrap_err();
        assert_eq!(err.code, 51246);
        let err = Projection::new(&doc! {"a.$": 1})
            .unwrap()
            .apply_with_position(&d, Some(7))
            .unwrap_err();
        assert_eq!(err.code, 51246);
    }

    #[test]
    fn parse_errors() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"a": 1, "b": 0},
                31254,
                "Cannot do exclusion on field b in inclusion projection",
            ),
            (
                doc! {"a": 0, "b": 1},
                31253,
                "Cannot do inclusion on field b in exclusion projection",
            ),
            (doc! {"a": 1, "a.b": 1}, 31249, "Path collision at a.b"),
            (doc! {"a.b": 1, "a": 1}, 31249, "Path collision at a"),
            (doc! {"a": {}}, 51270, "empty sub-projection"),
            (doc! {"a.$": 1, "b.$": 1}, 31276, "more than one positional"),
            (doc! {"a.$": 0}, 31395, "positional"),
            (doc! {"a.$.b": 1}, 31394, "middle of a path"),
            (doc! {"$a": 1}, 16410, "may not start with '$'"),
            (doc! {"a..b": 1}, 15998, "empty strings"),
            (doc! {"a": {"$slice": [1, 0]}}, 28724, "positive"),
            (
                doc! {"a.b": {"$elemMatch": {"c": 1}}},
                31275,
                "nested field",
            ),
            (doc! {"a": {"$elemMatch": 1}}, 2, "object required"),
            (doc! {"a": {"$meta": "textScore"}}, 2, "$meta"),
        ];
        for (spec, code, msg) in cases {
            let err = Projection::new(&spec).expect_err(&format!("{spec} should fail"));
            assert_eq!(err.code, code, "{spec}: {err}");
            assert!(err.message.contains(msg), "{spec}: {}", err.message);
        }
    }

    #[test]
    fn computed_fields() {
        let d = doc! {"_id": 1, "a": 2, "b": {"c": "x"}, "arr": [{"q": 1}, {"q": 2}]};
        let cases: Vec<(Document, Document)> = vec![
            (
                doc! {"a": 1, "s": {"$add": ["$a", 1]}},
                doc! {"_id": 1, "a": 2, "s": 3},
            ),
            (doc! {"_id": 0, "x": "$b.c"}, doc! {"x": "x"}),
            (
                doc! {"_id": 0, "l": {"$literal": 1}, "t": "hello"},
                doc! {"l": 1, "t": "hello"},
            ),
            (doc! {"_id": 0, "z": "$nope"}, doc! {}),
            (
                doc! {"_id": 0, "n.m": {"$literal": 5}},
                doc! {"n": {"m": 5}},
            ),
            (
                doc! {"_id": 0, "b": {"c": 1, "k": "$a"}},
                doc! {"b": {"c": "x", "k": 2}},
            ),
            (
                doc! {"_id": 0, "a": {"$multiply": ["$a", 10]}},
                doc! {"a": 20},
            ),
            (doc! {"_id": 0, "qs": "$arr.q"}, doc! {"qs": [1, 2]}),
            (
                doc! {"_id": 0, "first": {"$slice": ["$arr.q", 1]}},
                doc! {"first": [1]},
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(project(spec.clone(), d.clone()), want, "{spec}");
        }
        let err = Projection::new(&doc! {"a": 0, "s": {"$add": [1, 1]}}).unwrap_err();
        assert_eq!(err.code, 31252);
        let err = Projection::new(&doc! {"s": {"$add": [1, 1]}, "a": 0}).unwrap_err();
        assert_eq!(err.code, 31254);
        let p = Projection::new(&doc! {"s": {"$toInt": "$b.c"}}).unwrap();
        assert!(p.apply(&d).is_err());
    }

    #[test]
    fn modes() {
        assert!(Projection::new(&doc! {"a": 1}).unwrap().is_inclusion());
        assert!(!Projection::new(&doc! {"a": 0}).unwrap().is_inclusion());
        assert!(Projection::new(&doc! {}).unwrap().is_identity());
        assert!(!Projection::new(&doc! {"_id": 0}).unwrap().is_identity());
        assert!(Projection::new(&doc! {"_id": 1}).unwrap().is_inclusion());
        assert!(!Projection::new(&doc! {"a": {"$slice": 1}})
            .unwrap()
            .is_inclusion());
        assert!(Projection::new(&doc! {"a": {"$elemMatch": {"b": 1}}})
            .unwrap()
            .is_inclusion());
    }
}
