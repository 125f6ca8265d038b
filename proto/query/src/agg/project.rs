//! `$project` and `$addFields`/`$set`, which compile to one kind of projection tree, plus
//! the nested-path helpers the other stages share.

use bson::{Bson, Document};

use crate::expr::{Expr, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

/// A projection tree: each level lists its fields in specification order.
#[derive(Debug, Clone, Default)]
struct Tree {
    fields: Vec<(String, Item)>,
}

#[derive(Debug, Clone)]
enum Item {
    Include,
    Exclude,
    Expr(Expr),
    Sub(Tree),
}

impl Tree {
    fn get(&self, k: &str) -> Option<&Item> {
        self.fields.iter().find(|(n, _)| n == k).map(|(_, i)| i)
    }

    /// Inserts `item` at `path`, creating sub-trees; a path that runs into or over an
    /// existing leaf is a collision, as in MongoDB.
    fn insert(&mut self, path: &[&str], item: Item, full: &str) -> MongoResult<()> {
        let collision = || {
            MongoError::new(
                ErrorCode::ProjectionPathPrefixCollision,
                format!("Invalid $project :: caused by :: Path collision at {full}"),
            )
        };
        let (head, rest) = path.split_first().expect("non-empty path");
        let pos = self.fields.iter().position(|(n, _)| n == head);
        if rest.is_empty() {
            if pos.is_some() {
                return Err(collision());
            }
            self.fields.push((head.to_string(), item));
            return Ok(());
        }
        let idx = match pos {
            Some(i) => i,
            None => {
                self.fields
                    .push((head.to_string(), Item::Sub(Tree::default())));
                self.fields.len() - 1
            }
        };
        match &mut self.fields[idx].1 {
            Item::Sub(t) => t.insert(rest, item, full),
            _ => Err(collision()),
        }
    }

    fn visit(&self, f: &mut impl FnMut(&str, &Item)) {
        for (k, i) in &self.fields {
            f(k, i);
            if let Item::Sub(t) = i {
                t.visit(f);
            }
        }
    }

    fn has_computed(&self) -> bool {
        self.fields.iter().any(|(_, i)| match i {
            Item::Expr(_) => true,
            Item::Sub(t) => t.has_computed(),
            _ => false,
        })
    }
}

fn check_field_name(k: &str, full: &str) -> MongoResult<()> {
    crate::depth::check_path(full)?;
    if k.is_empty() {
        return Err(MongoError::new(
            ErrorCode::FieldPathEmpty,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if k.starts_with('$') {
        return Err(MongoError::new(
            ErrorCode::FieldPathDollarPrefix,
            format!("FieldPath field names may not start with '$'. Given FieldPath: {k}"),
        ));
    }
    if k.split('.').any(str::is_empty) {
        return Err(MongoError::new(
            ErrorCode::FieldPathEmptyComponent,
            format!("FieldPath field names may not be empty strings. Given: {k}"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// $project

/// A compiled `$project` stage.
#[derive(Debug, Clone)]
pub(crate) struct Projection {
    tree: Tree,
    inclusion: bool,
}

impl Projection {
    pub(crate) fn parse(arg: &Bson) -> MongoResult<Projection> {
        let Bson::Document(spec) = arg else {
            return Err(MongoError::new(
                ErrorCode::ProjectSpecNotObject,
                "$project specification must be an object",
            ));
        };
        if spec.is_empty() {
            return Err(MongoError::new(ErrorCode::ProjectionEmpty, "Invalid $project :: caused by :: projection specification must have at least one field"));
        }
        let mut tree = Tree::default();
        parse_project_level(spec, "", &mut tree)?;
        // The first non-_id field decides the mode, as in MongoDB's parser.
        let mut mode: Option<bool> = None;
        let mut conflict: Option<MongoError> = None;
        tree.visit(&mut |k, i| {
            if conflict.is_some() {
                return;
            }
            let this = match i {
                Item::Include | Item::Expr(_) => true,
                Item::Exclude if k != "_id" => false,
                _ => return,
            };
            match mode {
                None => mode = Some(this),
                Some(true) if !this => {
                    conflict = Some(MongoError::new(
                        ErrorCode::ProjectionExclusionInInclusion,
                        format!("Invalid $project :: caused by :: Cannot do exclusion on field {k} in inclusion projection"),
                    ))
                }
                Some(false) if matches!(i, Item::Expr(_)) => {
                    conflict = Some(MongoError::new(
                        ErrorCode::ProjectionExpressionInExclusion,
                        format!("Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection (field {k})"),
                    ))
                }
                Some(false) if this => {
                    conflict = Some(MongoError::new(
                        ErrorCode::ProjectionInclusionInExclusion,
                        format!("Invalid $project :: caused by :: Cannot do inclusion on field {k} in exclusion projection"),
                    ))
                }
                _ => {}
            }
        });
        if let Some(e) = conflict {
            return Err(e);
        }
        let mut top_id_excluded = false;
        for (k, i) in &tree.fields {
            if k == "_id" && matches!(i, Item::Exclude) {
                top_id_excluded = true;
            }
        }
        // `_id: 0` nested (e.g. "a._id") counts as a regular exclusion.
        let mut nested_id_excl = false;
        for (_, i) in &tree.fields {
            if let Item::Sub(t) = i {
                t.visit(&mut |k, i| {
                    if k == "_id" && matches!(i, Item::Exclude) {
                        nested_id_excl = true;
                    }
                });
            }
        }
        let inclusion = mode.unwrap_or(false);
        if inclusion {
            if nested_id_excl {
                return Err(MongoError::new(
                    ErrorCode::ProjectionExclusionInInclusion,
                    "Invalid $project :: caused by :: Cannot do exclusion on field _id in inclusion projection",
                ));
            }
            if !top_id_excluded && tree.get("_id").is_none() {
                tree.fields.insert(0, ("_id".to_string(), Item::Include));
            }
        }
        Ok(Projection { tree, inclusion })
    }

    pub(crate) fn run(&self, docs: &[Document], vars: &Variables) -> MongoResult<Vec<Document>> {
        docs.iter().map(|d| self.apply(d, vars)).collect()
    }

    fn apply(&self, doc: &Document, vars: &Variables) -> MongoResult<Document> {
        if self.inclusion {
            let mut out = include(&self.tree, doc);
            add_computed(&self.tree, &mut out, doc, vars)?;
            Ok(out)
        } else {
            Ok(exclude(&self.tree, doc))
        }
    }
}

fn parse_project_level(spec: &Document, prefix: &str, tree: &mut Tree) -> MongoResult<()> {
    for (k, v) in spec {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        check_field_name(k, &full)?;
        let parts: Vec<&str> = k.split('.').collect();
        let item = match v {
            Bson::Boolean(b) => {
                if *b {
                    Item::Include
                } else {
                    Item::Exclude
                }
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                if crate::expr::truthy(v) {
                    Item::Include
                } else {
                    Item::Exclude
                }
            }
            Bson::Document(d) if d.is_empty() => {
                return Err(MongoError::new(
                    ErrorCode::ProjectionEmptySubProjection,
                    format!("Invalid $project :: caused by :: An empty sub-projection is not a valid value. Found empty object at path {full}"),
                ))
            }
            Bson::Document(d) if d.keys().next().is_some_and(|f| f.starts_with('$')) => Item::Expr(Expr::parse(v)?),
            Bson::Document(d) => {
                let mut sub = Tree::default();
                parse_project_level(d, &full, &mut sub)?;
                insert_subtree(tree, &parts, sub, &full)?;
                continue;
            }
            other => Item::Expr(Expr::parse(other)?),
        };
        tree.insert(&parts, item, &full)?;
    }
    Ok(())
}

/// Merges a parsed sub-tree at `path` (`{a: {b: 1}}` and `{"a.c": 1}` share `a`).
fn insert_subtree(tree: &mut Tree, path: &[&str], sub: Tree, full: &str) -> MongoResult<()> {
    let (head, rest) = path.split_first().unwrap();
    if rest.is_empty() {
        match tree.fields.iter_mut().find(|(n, _)| n == head) {
            None => tree.fields.push((head.to_string(), Item::Sub(sub))),
            Some((_, Item::Sub(t))) => {
                for (k, i) in sub.fields {
                    t.insert(&[k.as_str()], i, full)?;
                }
            }
            Some(_) => {
                return Err(MongoError::new(
                    ErrorCode::ProjectionPathPrefixCollision,
                    format!("Invalid $project :: caused by :: Path collision at {full}"),
                ))
            }
        }
        return Ok(());
    }
    if tree.get(head).is_none() {
        tree.fields
            .push((head.to_string(), Item::Sub(Tree::default())));
    }
    match tree.fields.iter_mut().find(|(n, _)| n == head) {
        Some((_, Item::Sub(t))) => insert_subtree(t, rest, sub, full),
        _ => Err(MongoError::new(
            ErrorCode::ProjectionPathPrefixCollision,
            format!("Invalid $project :: caused by :: Path collision at {full}"),
        )),
    }
}

/// Inclusion pass: copies included fields in input order, recursing into sub-trees.
fn include(tree: &Tree, doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match tree.get(k) {
            Some(Item::Include) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Item::Sub(t)) => match v {
                Bson::Document(d) => {
                    out.insert(k.clone(), include(t, d));
                }
                Bson::Array(a) => {
                    out.insert(k.clone(), include_array(t, a));
                }
                _ => {}
            },
            _ => {}
        }
    }
    out
}

fn include_array(t: &Tree, a: &[Bson]) -> Vec<Bson> {
    // Scalars are dropped, unless computed fields will turn them into documents.
    let keep_slots = t.has_computed();
    a.iter()
        .filter_map(|e| match e {
            Bson::Document(d) => Some(Bson::Document(include(t, d))),
            Bson::Array(inner) => Some(Bson::Array(include_array(t, inner))),
            _ if keep_slots => Some(Bson::Undefined),
            _ => None,
        })
        .collect()
}

/// Computed-field pass: evaluates expressions against the root document.
fn add_computed(
    tree: &Tree,
    out: &mut Document,
    root: &Document,
    vars: &Variables,
) -> MongoResult<()> {
    for (k, item) in &tree.fields {
        match item {
            Item::Expr(e) => match e.eval(root, vars)? {
                Bson::Undefined => {
                    out.remove(k);
                }
                v => {
                    out.insert(k.clone(), v);
                }
            },
            Item::Sub(t) if t.has_computed() => {
                let existing = out.remove_entry_keep(k);
                let v = match existing {
                    Some(Bson::Document(mut d)) => {
                        add_computed(t, &mut d, root, vars)?;
                        Bson::Document(d)
                    }
                    Some(Bson::Array(a)) => Bson::Array(computed_array(t, a, root, vars)?),
                    _ => {
                        let mut d = Document::new();
                        add_computed(t, &mut d, root, vars)?;
                        Bson::Document(d)
                    }
                };
                out.insert(k.clone(), v);
            }
            _ => {}
        }
    }
    Ok(())
}

fn computed_array(
    t: &Tree,
    a: Vec<Bson>,
    root: &Document,
    vars: &Variables,
) -> MongoResult<Vec<Bson>> {
    a.into_iter()
        .map(|e| match e {
            Bson::Document(mut d) => {
                add_computed(t, &mut d, root, vars)?;
                Ok(Bson::Document(d))
            }
            Bson::Array(inner) => Ok(Bson::Array(computed_array(t, inner, root, vars)?)),
            _ => {
                let mut d = Document::new();
                add_computed(t, &mut d, root, vars)?;
                Ok(Bson::Document(d))
            }
        })
        .collect()
}

/// Takes a field's value out of a document without moving the field (it is re-inserted
/// in place by the caller through `insert`, which keeps the original position).
trait TakeKeep {
    fn remove_entry_keep(&mut self, k: &str) -> Option<Bson>;
}

impl TakeKeep for Document {
    fn remove_entry_keep(&mut self, k: &str) -> Option<Bson> {
        self.get_mut(k).map(|v| std::mem::replace(v, Bson::Null))
    }
}

fn exclude(tree: &Tree, doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match tree.get(k) {
            Some(Item::Exclude) => {}
            Some(Item::Sub(t)) => match v {
                Bson::Document(d) => {
                    out.insert(k.clone(), exclude(t, d));
                }
                Bson::Array(a) => {
                    out.insert(k.clone(), exclude_array(t, a));
                }
                other => {
                    out.insert(k.clone(), other.clone());
                }
            },
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn exclude_array(t: &Tree, a: &[Bson]) -> Vec<Bson> {
    a.iter()
        .map(|e| match e {
            Bson::Document(d) => Bson::Document(exclude(t, d)),
            Bson::Array(inner) => Bson::Array(exclude_array(t, inner)),
            other => other.clone(),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// $addFields / $set

/// A compiled `$addFields`/`$set` stage: every leaf is an expression.
#[derive(Debug, Clone)]
pub(crate) struct SetFields {
    tree: Tree,
}

impl SetFields {
    /// `name` is `$addFields` or `$set`, for the error about a spec that is no object.
    pub(crate) fn parse(name: &str, arg: &Bson) -> MongoResult<SetFields> {
        let Bson::Document(spec) = arg else {
            return Err(MongoError::new(
                ErrorCode::StageSpecNotObject,
                format!(
                    "{name} specification stage must be an object, got {}",
                    crate::expr::type_name(arg)
                ),
            ));
        };
        let mut tree = Tree::default();
        parse_set_level(spec, "", &mut tree)?;
        Ok(SetFields { tree })
    }

    pub(crate) fn run(&self, docs: &[Document], vars: &Variables) -> MongoResult<Vec<Document>> {
        docs.iter().map(|d| self.apply(d, vars)).collect()
    }

    fn apply(&self, doc: &Document, vars: &Variables) -> MongoResult<Document> {
        let mut out = doc.clone();
        add_computed(&self.tree, &mut out, doc, vars)?;
        Ok(out)
    }
}

fn parse_set_level(spec: &Document, prefix: &str, tree: &mut Tree) -> MongoResult<()> {
    for (k, v) in spec {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        check_field_name(k, &full)?;
        let parts: Vec<&str> = k.split('.').collect();
        match v {
            Bson::Document(d)
                if !d.is_empty() && !d.keys().next().is_some_and(|f| f.starts_with('$')) =>
            {
                let mut sub = Tree::default();
                parse_set_level(d, &full, &mut sub)?;
                insert_subtree(tree, &parts, sub, &full)?;
            }
            Bson::Document(d) if d.is_empty() => tree.insert(
                &parts,
                Item::Expr(Expr::constant(Bson::Document(Document::new()))),
                &full,
            )?,
            other => tree.insert(&parts, Item::Expr(Expr::parse(other)?), &full)?,
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Nested paths (documents only; arrays are not traversed)

pub(crate) fn get_nested<'a>(d: &'a Document, path: &[String]) -> Option<&'a Bson> {
    let (head, rest) = path.split_first()?;
    let v = d.get(head)?;
    if rest.is_empty() {
        return Some(v);
    }
    match v {
        Bson::Document(sub) => get_nested(sub, rest),
        _ => None,
    }
}

/// Sets a nested field, replacing any non-document in the way with a new document.
pub(crate) fn set_nested(d: &mut Document, path: &[String], value: Bson) {
    let (head, rest) = path.split_first().expect("non-empty path");
    if rest.is_empty() {
        d.insert(head.clone(), value);
        return;
    }
    if !matches!(d.get(head), Some(Bson::Document(_))) {
        d.insert(head.clone(), Document::new());
    }
    if let Some(Bson::Document(sub)) = d.get_mut(head) {
        set_nested(sub, rest, value);
    }
}

/// Removes a field by path, descending through documents and arrays of documents
/// (`$unset` semantics).
pub(crate) fn remove_nested(d: &mut Document, path: &[String]) {
    let (head, rest) = path.split_first().expect("non-empty path");
    if rest.is_empty() {
        d.remove(head);
        return;
    }
    match d.get_mut(head) {
        Some(Bson::Document(sub)) => remove_nested(sub, rest),
        Some(Bson::Array(items)) => remove_in_array(items, rest),
        _ => {}
    }
}

fn remove_in_array(items: &mut [Bson], path: &[String]) {
    for it in items {
        match it {
            Bson::Document(sub) => remove_nested(sub, path),
            Bson::Array(inner) => remove_in_array(inner, path),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$project": {}}]), 51272),
            (bson!([{"$project": {"a": 1, "b": 0}}]), 31254),
            (bson!([{"$project": {"a": 0, "b": "$x"}}]), 31252),
            (bson!([{"$project": {"a": 0, "b": 1}}]), 31253),
            (bson!([{"$project": {"a": {}}}]), 51270),
            (bson!([{"$project": {"a": 1, "a.b": 1}}]), 31250),
            (bson!([{"$project": 1}]), 15969),
            (bson!([{"$addFields": {"a": {"$foo": 1}}}]), 168),
        ]);
    }

    #[test]
    fn project_shapes() {
        let d = vec![
            doc! {"_id": 1, "a": {"b": 1, "c": 2}, "arr": [{"b": 1, "c": 2}, 5, {"c": 3}], "x": 10},
        ];
        // inclusion keeps input order, computed fields go last
        check(
            bson!([{"$project": {"x": 1, "a.c": 1}}]),
            d.clone(),
            vec![doc! {"_id": 1, "a": {"c": 2}, "x": 10}],
        );
        check(
            bson!([{"$project": {"arr.c": 1, "_id": 0}}]),
            d.clone(),
            vec![doc! {"arr": [{"c": 2}, {"c": 3}]}],
        );
        check(
            bson!([{"$project": {"a": {"b": 1}, "_id": 0}}]),
            d.clone(),
            vec![doc! {"a": {"b": 1}}],
        );
        check(
            bson!([{"$project": {"y": {"$add": ["$x", 1]}, "z": "$a.b", "lit": {"$literal": 1}}}]),
            d.clone(),
            vec![doc! {"_id": 1, "y": 11, "z": 1, "lit": 1}],
        );
        check(
            bson!([{"$project": {"gone": "$$REMOVE", "x": 1}}]),
            d.clone(),
            vec![doc! {"_id": 1, "x": 10}],
        );
        check(
            bson!([{"$project": {"a.d": "$x", "_id": 0}}]),
            d.clone(),
            vec![doc! {"a": {"d": 10}}],
        );
        check(
            bson!([{"$project": {"arr.d": "$x", "_id": 0}}]),
            d.clone(),
            vec![doc! {"arr": [{"d": 10}, {"d": 10}, {"d": 10}]}],
        );
        // exclusion
        check(
            bson!([{"$project": {"a.b": 0, "arr": 0, "_id": 0}}]),
            d.clone(),
            vec![doc! {"a": {"c": 2}, "x": 10}],
        );
        check(
            bson!([{"$project": {"arr.c": 0}}]),
            d.clone(),
            vec![doc! {"_id": 1, "a": {"b": 1, "c": 2}, "arr": [{"b": 1}, 5, {}], "x": 10}],
        );
        check(
            bson!([{"$project": {"_id": 0}}]),
            vec![doc! {"_id": 1, "q": 2}],
            vec![doc! {"q": 2}],
        );
        check(
            bson!([{"$project": {"_id": 1}}]),
            vec![doc! {"_id": 1, "q": 2}],
            vec![doc! {"_id": 1}],
        );
    }

    #[test]
    fn add_fields_and_set() {
        let d = vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{"b": 1}, 2], "x": 10}];
        check(
            bson!([{"$addFields": {"y": {"$add": ["$x", 1]}, "x": 0, "a.c": "$x"}}]),
            d.clone(),
            vec![doc! {"_id": 1, "a": {"b": 1, "c": 10}, "arr": [{"b": 1}, 2], "x": 0, "y": 11}],
        );
        check(
            bson!([{"$set": {"arr.k": 1, "x": "$$REMOVE"}}]),
            d.clone(),
            vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{"b": 1, "k": 1}, {"k": 1}]}],
        );
        check(
            bson!([{"$set": {"a": {"z": 1}}}]),
            d.clone(),
            vec![doc! {"_id": 1, "a": {"b": 1, "z": 1}, "arr": [{"b": 1}, 2], "x": 10}],
        );
        check(
            bson!([{"$set": {"e": {}}}]),
            vec![doc! {"_id": 1}],
            vec![doc! {"_id": 1, "e": {}}],
        );
    }
}
