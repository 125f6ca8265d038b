//! The update tree: every path of every operator merged into one tree of [`Node`]s,
//! which is where conflicting paths are detected, and the paths themselves.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bson::{Bson, Document};

use crate::matcher::Matcher;
use crate::{ErrorCode, MongoError, MongoResult};

use super::apply::ApplyState;
use super::array::{PullCond, PushSpec};
use super::number::BitOp;

#[derive(Debug, Clone)]
pub(super) struct ModifierUpdate {
    pub(super) root: Node,
    pub(super) renames: Vec<Rename>,
    /// Array filters by identifier; the matcher runs against `{<identifier>: element}`.
    pub(super) filters: HashMap<String, Matcher>,
    /// Every written path (for the `_id` immutability message).
    pub(super) paths: Vec<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Rename {
    pub(super) from: String,
    pub(super) to: String,
}

/// A node of the update tree (mongod's UpdateObjectNode / UpdateArrayNode / leaves).
#[derive(Debug, Clone)]
pub(super) enum Node {
    Leaf(Arc<Leaf>),
    /// Children by field name; `positional` is the `$` child.
    Object {
        children: BTreeMap<String, Node>,
        positional: Option<Box<Node>>,
    },
    /// Children by `$[]` / `$[<id>]` path component.
    Array {
        children: BTreeMap<String, Node>,
    },
}

impl Node {
    pub(super) fn object() -> Node {
        Node::Object {
            children: BTreeMap::new(),
            positional: None,
        }
    }
    pub(super) fn array() -> Node {
        Node::Array {
            children: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
pub(super) struct Leaf {
    pub(super) op: Op,
}

#[derive(Debug)]
pub(super) enum Op {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    CurrentDate {
        timestamp: bool,
    },
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    Pop {
        front: bool,
    },
    Pull(PullCond),
    PullAll(Vec<Bson>),
    Bit(Vec<(BitOp, Bson)>),
    /// Destination of `renames[i]`: set to the source value.
    RenameTo(usize),
    /// Source of `renames[i]`: removed (and reserves the path against conflicts).
    RenameFrom(usize),
}

/// Operators that can create the path they name (and so deepen the document).
pub(super) fn creates_path(op: &str) -> bool {
    !matches!(op, "$unset" | "$pop" | "$pull" | "$pullAll" | "$rename")
}

pub(super) fn is_array_part(c: &str) -> bool {
    c.starts_with("$[") && c.ends_with(']')
}

/// Validates an update path and returns its components.
pub(super) fn parse_update_path(
    path: &str,
    filters: &HashMap<String, (Document, Matcher)>,
    used: &mut HashSet<String>,
) -> MongoResult<Vec<String>> {
    if path.is_empty() {
        return Err(MongoError::new(
            ErrorCode::EmptyFieldName,
            "An empty update path is not valid.",
        ));
    }
    // Before splitting: a path of a million components must cost nothing to refuse.
    crate::depth::check_path(path)?;
    let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
    if parts.iter().any(String::is_empty) {
        return Err(MongoError::new(
            ErrorCode::EmptyFieldName,
            format!("The update path '{path}' contains an empty field name, which is not allowed."),
        ));
    }
    let positional = parts.iter().filter(|p| *p == "$").count();
    if positional > 1 {
        return Err(MongoError::bad_value(format!(
            "Too many positional (i.e. '$') elements found in path '{path}'"
        )));
    }
    if parts[0] == "$" {
        return Err(MongoError::bad_value(format!(
            "Cannot have positional (i.e. '$') element in the first position in path '{path}'"
        )));
    }
    if is_array_part(&parts[0]) {
        return Err(MongoError::bad_value(format!(
            "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position in path '{path}'"
        )));
    }
    if parts[0].starts_with('$') {
        return Err(MongoError::new(
            ErrorCode::DollarPrefixedFieldName,
            format!(
                "The dollar ($) prefixed field '{}' in '{path}' is not valid for storage.",
                parts[0]
            ),
        ));
    }
    for p in &parts {
        if is_array_part(p) {
            let id = &p[2..p.len() - 1];
            if !id.is_empty() {
                if !filters.contains_key(id) {
                    return Err(MongoError::bad_value(format!(
                        "No array filter found for identifier '{id}' in path '{path}'"
                    )));
                }
                used.insert(id.to_owned());
            }
        }
    }
    Ok(parts)
}

/// Parses `arrayFilters`: each filter's top-level paths must all start with the same
/// identifier (a lowercase letter then alphanumerics), distinct across filters.
pub(super) fn parse_array_filters(
    filters: &[Document],
) -> MongoResult<HashMap<String, (Document, Matcher)>> {
    let mut out = HashMap::new();
    for f in filters {
        let mut ids = Vec::new();
        filter_identifiers(f, &mut ids);
        let Some(id) = ids.first().cloned() else {
            return Err(MongoError::failed_to_parse(
                "Cannot use an expression without a top-level field name in arrayFilters",
            ));
        };
        if let Some(other) = ids.iter().find(|i| **i != id) {
            return Err(MongoError::failed_to_parse(format!(
                "Error parsing array filter :: caused by :: Expected a single top-level field name, found '{id}' and '{other}'"
            )));
        }
        let valid = id.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && id.chars().all(|c| c.is_ascii_alphanumeric());
        if !valid {
            return Err(MongoError::bad_value(format!(
                "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{id}'"
            )));
        }
        if out.contains_key(&id) {
            return Err(MongoError::failed_to_parse(format!(
                "Found multiple array filters with the same top-level field name {id}"
            )));
        }
        let matcher = Matcher::new(f)?;
        out.insert(id, (f.clone(), matcher));
    }
    Ok(out)
}

fn filter_identifiers(filter: &Document, out: &mut Vec<String>) {
    for (k, v) in filter {
        match k.as_str() {
            "$and" | "$or" | "$nor" => {
                if let Bson::Array(clauses) = v {
                    for c in clauses {
                        if let Bson::Document(c) = c {
                            filter_identifiers(c, out);
                        }
                    }
                }
            }
            k if k.starts_with('$') => {}
            k => out.push(k.split('.').next().unwrap_or_default().to_owned()),
        }
    }
}

/// Merges a leaf into the tree; a path that is a prefix of (or equal to) another is a
/// conflict, reported the way mongod words it.
pub(super) fn insert_node(
    root: &mut Node,
    parts: &[String],
    leaf: Node,
    dotted: &str,
) -> MongoResult<()> {
    let conflict = |at: &str| {
        MongoError::new(
            ErrorCode::ConflictingUpdateOperators,
            format!("Updating the path '{dotted}' would create a conflict at '{at}'"),
        )
    };
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let exists = child_mut(cur, part).is_some();
        if last {
            if exists {
                return Err(conflict(dotted));
            }
            set_child(cur, part, leaf);
            return Ok(());
        }
        let want_array = is_array_part(&parts[i + 1]);
        if exists {
            let ok = match child_mut(cur, part) {
                Some(Node::Array { .. }) => want_array,
                Some(Node::Object { .. }) => !want_array,
                _ => false,
            };
            if !ok {
                return Err(conflict(&parts[..=i].join(".")));
            }
        } else {
            set_child(
                cur,
                part,
                if want_array {
                    Node::array()
                } else {
                    Node::object()
                },
            );
        }
        cur = child_mut(cur, part).expect("child just ensured");
    }
    Ok(())
}

fn child_mut<'a>(node: &'a mut Node, part: &str) -> Option<&'a mut Node> {
    match node {
        Node::Object {
            children,
            positional,
        } => {
            if part == "$" {
                positional.as_deref_mut()
            } else {
                children.get_mut(part)
            }
        }
        Node::Array { children } => children.get_mut(part),
        Node::Leaf(_) => None,
    }
}

fn set_child(node: &mut Node, part: &str, child: Node) {
    match node {
        Node::Object {
            children,
            positional,
        } => {
            if part == "$" {
                *positional = Some(Box::new(child));
            } else {
                children.insert(part.to_owned(), child);
            }
        }
        Node::Array { children } => {
            children.insert(part.to_owned(), child);
        }
        Node::Leaf(_) => {}
    }
}

/// The children of an object node in application order (lexicographic), with the
/// positional `$` child resolved to the matched index and merged with a same-named child.
pub(super) fn ordered_children<'n>(
    children: &'n BTreeMap<String, Node>,
    positional: &'n Option<Box<Node>>,
    path: &[String],
    st: &ApplyState,
) -> MongoResult<Vec<(String, Cow<'n, Node>)>> {
    let mut out: Vec<(String, Cow<'n, Node>)> = children
        .iter()
        .map(|(k, v)| (k.clone(), Cow::Borrowed(v)))
        .collect();
    if let Some(pos) = positional {
        let Some(idx) = st.ctx.matched_array_index else {
            return Err(MongoError::bad_value(
                "The positional operator did not find the match needed from the query.",
            ));
        };
        let field = idx.to_string();
        match out.binary_search_by(|(k, _)| k.as_str().cmp(&field)) {
            Ok(i) => {
                let full = join_path(path, &field);
                let merged = merge_nodes(pos, &out[i].1, &full)?;
                out[i].1 = Cow::Owned(merged);
            }
            Err(i) => out.insert(i, (field, Cow::Borrowed(&**pos))),
        }
    }
    Ok(out)
}

pub(super) fn join_path(path: &[String], last: &str) -> String {
    let mut s = path.join(".");
    if !s.is_empty() {
        s.push('.');
    }
    s.push_str(last);
    s
}

/// Combines two nodes that apply to the same element (positional `$` and a concrete index,
/// or several array filters matching one element). Two leaves cannot be combined.
pub(super) fn merge_nodes(a: &Node, b: &Node, path: &str) -> MongoResult<Node> {
    let conflict = || {
        MongoError::new(
            ErrorCode::ConflictingUpdateOperators,
            format!("Update created a conflict at '{path}'"),
        )
    };
    match (a, b) {
        (
            Node::Object {
                children: ca,
                positional: pa,
            },
            Node::Object {
                children: cb,
                positional: pb,
            },
        ) => {
            let children = merge_children(ca, cb, path)?;
            let positional = match (pa, pb) {
                (Some(x), Some(y)) => Some(Box::new(merge_nodes(x, y, &format!("{path}.$"))?)),
                (x, y) => x.clone().or_else(|| y.clone()),
            };
            Ok(Node::Object {
                children,
                positional,
            })
        }
        (Node::Array { children: ca }, Node::Array { children: cb }) => {
            let children = merge_children(ca, cb, path)?;
            Ok(Node::Array { children })
        }
        _ => Err(conflict()),
    }
}

/// The children of two merged nodes: those under the same name merged with [`merge_nodes`].
fn merge_children(
    a: &BTreeMap<String, Node>,
    b: &BTreeMap<String, Node>,
    path: &str,
) -> MongoResult<BTreeMap<String, Node>> {
    let mut children = a.clone();
    for (k, v) in b {
        let merged = match children.get(k) {
            Some(existing) => merge_nodes(existing, v, &format!("{path}.{k}"))?,
            None => v.clone(),
        };
        children.insert(k.clone(), merged);
    }
    Ok(children)
}
