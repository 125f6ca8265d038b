//! Applying an operator update: walking the update tree against a document.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;

use bson::{Bson, DateTime, Document, Timestamp};

use crate::expr::{num_of, type_name};
use crate::matcher::Matcher;
use crate::{ErrorCode, MongoError, MongoResult};

use super::array::{perform_push, pull_matches, Pushed};
use super::log::UpdateLog;
use super::number::{apply_bit, debug_number, safe_add, safe_mul, zero_like};
use super::replacement::validate_id;
use super::tree::{
    join_path, merge_nodes, ordered_children, Leaf, ModifierUpdate, Node, Op, Rename,
};
use super::values::{fmt_elem, identical, same_value};
use super::UpdateContext;

pub(super) struct ApplyState<'a> {
    pub(super) ctx: &'a UpdateContext,
    /// `_id` of the document, for error messages.
    pub(super) id: Option<Bson>,
    pub(super) filters: &'a HashMap<String, Matcher>,
    /// The source value of each `$rename`, read before the walk (None: source missing).
    pub(super) rename_values: Vec<Option<Bson>>,
    pub(super) renames: &'a [Rename],
    pub(super) changed: bool,
    /// What the update touched, for a change stream (off for a plain apply).
    pub(super) log: UpdateLog,
}

impl ApplyState<'_> {
    fn id_str(&self) -> String {
        match &self.id {
            Some(id) => fmt_elem("_id", id),
            None => "no id".to_owned(),
        }
    }
}

impl ModifierUpdate {
    pub(super) fn apply(&self, doc: &mut Document, ctx: &UpdateContext) -> MongoResult<bool> {
        Ok(self.apply_logged(doc, ctx, UpdateLog::off())?.is_some())
    }

    /// Applies the update recording what it touches in `log`; returns the log when the
    /// document changed, None when it did not.
    pub(super) fn apply_logged(
        &self,
        doc: &mut Document,
        ctx: &UpdateContext,
        log: UpdateLog,
    ) -> MongoResult<Option<UpdateLog>> {
        let original_id = doc.get("_id").cloned();
        let rename_values = self
            .renames
            .iter()
            .map(|r| resolve_rename(r, doc, &original_id))
            .collect::<MongoResult<Vec<_>>>()?;
        let mut st = ApplyState {
            ctx,
            id: original_id.clone(),
            filters: &self.filters,
            rename_values,
            renames: &self.renames,
            changed: false,
            log,
        };
        let mut root = Bson::Document(doc.clone());
        let Node::Object { .. } = &self.root else {
            unreachable!()
        };
        apply_existing_inner(&self.root, &mut root, &mut Vec::new(), &mut st)?;
        let Bson::Document(new_doc) = root else {
            unreachable!()
        };
        if !st.changed {
            return Ok(None);
        }
        if !ctx.is_upsert_insert {
            let unchanged = match (&original_id, new_doc.get("_id")) {
                (None, None) => true,
                (Some(a), Some(b)) => same_value(a, b),
                _ => false,
            };
            if !unchanged {
                let path = self
                    .paths
                    .iter()
                    .find(|p| *p == "_id" || p.starts_with("_id."))
                    .map(String::as_str)
                    .unwrap_or("_id");
                return Err(MongoError::new(
                    ErrorCode::ImmutableField,
                    format!("Performing an update on the path '{path}' would modify the immutable field '_id'"),
                ));
            }
        } else if let Some(id) = new_doc.get("_id") {
            validate_id(id)?;
        }
        crate::depth::check_document_depth(&new_doc)?;
        *doc = new_doc;
        Ok(Some(st.log))
    }
}

/// Reads the source of a `$rename` and validates source and destination the way mongod's
/// RenameNode does (neither may go through an array).
fn resolve_rename(r: &Rename, doc: &Document, id: &Option<Bson>) -> MongoResult<Option<Bson>> {
    let id_str = id
        .as_ref()
        .map(|id| fmt_elem("_id", id))
        .unwrap_or_else(|| "no id".to_owned());
    let parts: Vec<&str> = r.from.split('.').collect();
    let mut cur: &Bson = match doc.get(parts[0]) {
        Some(v) => v,
        None => return Ok(None),
    };
    let mut through_array: Option<&str> = None;
    for (i, p) in parts.iter().enumerate().skip(1) {
        let next = match cur {
            Bson::Document(d) => d.get(*p),
            Bson::Array(a) => match parse_index(p) {
                Some(n) => {
                    through_array.get_or_insert(parts[i - 1]);
                    a.get(n)
                }
                None => return Err(not_traversable(p, &r.from, parts[i - 1], cur)),
            },
            _ => return Err(not_traversable(p, &r.from, parts[i - 1], cur)),
        };
        match next {
            Some(v) => cur = v,
            None => return Ok(None),
        }
    }
    if let Some(arr) = through_array {
        return Err(MongoError::bad_value(format!(
            "The source field cannot be an array element, '{}' in doc with {id_str} has an array field called '{arr}'",
            r.from
        )));
    }
    let to: Vec<&str> = r.to.split('.').collect();
    let mut cur = doc.get(to[0]);
    for (i, p) in to.iter().enumerate().skip(1) {
        match cur {
            Some(Bson::Array(_)) => {
                return Err(MongoError::bad_value(format!(
                    "The destination field cannot be an array element, '{}' in doc with {id_str} has an array field called '{}'",
                    r.to,
                    to[i - 1]
                )))
            }
            Some(Bson::Document(d)) => cur = d.get(*p),
            _ => break,
        }
    }
    Ok(Some(cur_value(doc, &parts)))
}

fn cur_value(doc: &Document, parts: &[&str]) -> Bson {
    let mut cur = doc.get(parts[0]).cloned().unwrap_or(Bson::Null);
    for p in &parts[1..] {
        cur = match &cur {
            Bson::Document(d) => d.get(*p).cloned().unwrap_or(Bson::Null),
            _ => Bson::Null,
        };
    }
    cur
}

fn not_traversable(part: &str, path: &str, name: &str, v: &Bson) -> MongoError {
    MongoError::new(
        ErrorCode::PathNotViable,
        format!(
            "cannot use the part ({part} of {path}) to traverse the element ({{{}}})",
            fmt_elem(name, v)
        ),
    )
}

/// An array index in an update path. Unlike `crate::path::array_index`, leading zeros are
/// accepted: mongod's update walk uses `parseUnsignedBase10Integer` here.
pub(super) fn parse_index(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub(super) fn lookup<'a>(c: &'a Bson, f: &str) -> Option<&'a Bson> {
    match c {
        Bson::Document(d) => d.get(f),
        Bson::Array(a) => a.get(parse_index(f)?),
        _ => None,
    }
}

fn lookup_mut<'a>(c: &'a mut Bson, f: &str) -> Option<&'a mut Bson> {
    match c {
        Bson::Document(d) => d.get_mut(f),
        Bson::Array(a) => a.get_mut(parse_index(f)?),
        _ => None,
    }
}

/// Applies an interior node to an existing value `v` (the value at `path`).
fn apply_existing_inner(
    node: &Node,
    v: &mut Bson,
    path: &mut Vec<String>,
    st: &mut ApplyState,
) -> MongoResult<()> {
    match node {
        Node::Object {
            children,
            positional,
        } => {
            for (field, child) in ordered_children(children, positional, path, st)? {
                path.push(field.clone());
                let r = if lookup(v, &field).is_some() {
                    apply_existing(&child, v, &field, path, st)
                } else {
                    let depth = path.len() - 1;
                    apply_missing(&child, v, std::slice::from_ref(&field), path, depth, st)
                };
                path.pop();
                r?;
            }
            Ok(())
        }
        Node::Array { children } => {
            let Bson::Array(arr) = &*v else {
                return Err(MongoError::bad_value(format!(
                    "Cannot apply array updates to non-array element {}",
                    fmt_elem(path.last().map(String::as_str).unwrap_or(""), v)
                )));
            };
            // All matches are computed before any element changes, as mongod does.
            let mut plan: Vec<(usize, Cow<Node>)> = Vec::new();
            for (i, elem) in arr.iter().enumerate() {
                let mut chosen: Option<Cow<Node>> = None;
                for (part, child) in children {
                    let id = &part[2..part.len() - 1];
                    if !id.is_empty() && !filter_matches(st, id, elem) {
                        continue;
                    }
                    chosen = Some(match chosen {
                        None => Cow::Borrowed(child),
                        Some(prev) => {
                            Cow::Owned(merge_nodes(&prev, child, &join_path(path, &i.to_string()))?)
                        }
                    });
                }
                if let Some(c) = chosen {
                    plan.push((i, c));
                }
            }
            for (i, child) in plan {
                let field = i.to_string();
                path.push(field.clone());
                let r = apply_existing(&child, v, &field, path, st);
                path.pop();
                r?;
            }
            Ok(())
        }
        Node::Leaf(_) => Err(MongoError::internal("leaf applied as interior node")),
    }
}

fn filter_matches(st: &ApplyState, id: &str, elem: &Bson) -> bool {
    match st.filters.get(id) {
        Some(m) => {
            let mut wrapped = Document::new();
            wrapped.insert(id, elem.clone());
            m.matches(&wrapped)
        }
        None => false,
    }
}

/// Applies `node` to the existing child `field` of `parent`.
fn apply_existing(
    node: &Node,
    parent: &mut Bson,
    field: &str,
    path: &mut Vec<String>,
    st: &mut ApplyState,
) -> MongoResult<()> {
    match node {
        Node::Leaf(leaf) => apply_leaf_existing(leaf, parent, field, path, st),
        _ => {
            let v = lookup_mut(parent, field)
                .ok_or_else(|| MongoError::internal("update child vanished"))?;
            apply_existing_inner(node, v, path, st)
        }
    }
}

/// Applies `node` to a path that does not exist: `deepest` is the deepest existing value
/// (at `path[..depth]`) and `to_create` the missing components below it.
fn apply_missing(
    node: &Node,
    deepest: &mut Bson,
    to_create: &[String],
    path: &mut Vec<String>,
    depth: usize,
    st: &mut ApplyState,
) -> MongoResult<()> {
    match node {
        Node::Leaf(leaf) => {
            let Some(value) = value_for_missing(leaf, st)? else {
                return Ok(());
            };
            let viable = match &*deepest {
                Bson::Document(_) => true,
                Bson::Array(_) => parse_index(&to_create[0]).is_some(),
                _ => false,
            };
            if !viable {
                let name = if depth == 0 {
                    ""
                } else {
                    path[depth - 1].as_str()
                };
                return Err(MongoError::new(
                    ErrorCode::PathNotViable,
                    format!(
                        "Cannot create field '{}' in element {{{}}}",
                        to_create[0],
                        fmt_elem(name, deepest)
                    ),
                ));
            }
            st.log.created(path, depth, &value);
            create_at(deepest, to_create, value)?;
            st.changed = true;
            log_rename_source(leaf, st);
            Ok(())
        }
        Node::Object {
            children,
            positional,
        } => {
            for (field, child) in ordered_children(children, positional, path, st)? {
                let mut tc = to_create.to_vec();
                tc.push(field.clone());
                path.push(field);
                let r = apply_missing(&child, deepest, &tc, path, depth, st);
                path.pop();
                r?;
            }
            Ok(())
        }
        Node::Array { .. } => Err(MongoError::bad_value(format!(
            "The path '{}' must exist in the document in order to apply array updates.",
            path.join(".")
        ))),
    }
}

/// Creates `parts` below `base` (documents for missing components, null padding for array
/// indexes past the end) and stores `value` at the end.
pub(super) fn create_at(base: &mut Bson, parts: &[String], value: Bson) -> MongoResult<()> {
    let mut cur = base;
    let mut value = Some(value);
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let fill = || {
            if last {
                Bson::Null
            } else {
                Bson::Document(Document::new())
            }
        };
        cur = match cur {
            Bson::Document(d) => {
                if last {
                    d.insert(part.clone(), value.take().unwrap_or(Bson::Null));
                    return Ok(());
                }
                if !d.contains_key(part) {
                    d.insert(part.clone(), fill());
                }
                d.get_mut(part).expect("just inserted")
            }
            Bson::Array(a) => {
                let idx = parse_index(part)
                    .ok_or_else(|| MongoError::internal("non-numeric array component"))?;
                crate::path::check_backfill(a.len(), idx)?;
                while a.len() < idx {
                    a.push(Bson::Null);
                }
                if a.len() == idx {
                    a.push(fill());
                }
                if last {
                    a[idx] = value.take().unwrap_or(Bson::Null);
                    return Ok(());
                }
                &mut a[idx]
            }
            _ => {
                return Err(MongoError::internal(
                    "cannot create a path below a non-container",
                ))
            }
        };
    }
    Ok(())
}

/// The value a leaf creates on a missing path; None when the operator does not create.
fn value_for_missing(leaf: &Leaf, st: &ApplyState) -> MongoResult<Option<Bson>> {
    Ok(match &leaf.op {
        Op::Set(v) => Some(v.clone()),
        Op::SetOnInsert(v) => st.ctx.is_upsert_insert.then(|| v.clone()),
        Op::Inc(v) | Op::Min(v) | Op::Max(v) => Some(v.clone()),
        Op::Mul(v) => Some(num_of(v).map(zero_like).unwrap_or(Bson::Int32(0))),
        Op::CurrentDate { timestamp } => Some(current_date(*timestamp, st.ctx.now)),
        Op::Push(spec) => {
            let mut arr = Vec::new();
            perform_push(spec, &mut arr);
            Some(Bson::Array(arr))
        }
        Op::AddToSet(values) => {
            let mut arr: Vec<Bson> = Vec::new();
            for v in values {
                if !arr.iter().any(|e| crate::order::values_equal(e, v)) {
                    arr.push(v.clone());
                }
            }
            Some(Bson::Array(arr))
        }
        Op::Bit(ops) => Some(apply_bit(&Bson::Int32(0), ops)),
        Op::RenameTo(i) => st.rename_values[*i].clone(),
        Op::Unset | Op::Pop { .. } | Op::Pull(_) | Op::PullAll(_) | Op::RenameFrom(_) => None,
    })
}

fn current_date(timestamp: bool, now: DateTime) -> Bson {
    if timestamp {
        let millis = now.timestamp_millis();
        // The oplog clock is not visible here; the increment carries the sub-second part so
        // that two readings within one second still order.
        Bson::Timestamp(Timestamp {
            time: (millis.div_euclid(1000)).clamp(0, u32::MAX as i64) as u32,
            increment: millis.rem_euclid(1000) as u32 + 1,
        })
    } else {
        Bson::DateTime(now)
    }
}

/// How a modifier changed an existing value, which decides what it logs.
enum Change {
    None,
    /// Logged as the whole new value.
    Whole,
    /// Only elements appended to an array: logged one by one.
    Appended(usize),
}

impl From<bool> for Change {
    fn from(changed: bool) -> Change {
        if changed {
            Change::Whole
        } else {
            Change::None
        }
    }
}

fn apply_leaf_existing(
    leaf: &Leaf,
    parent: &mut Bson,
    field: &str,
    path: &[String],
    st: &mut ApplyState,
) -> MongoResult<()> {
    let remove = match &leaf.op {
        Op::Unset => true,
        Op::RenameFrom(i) => st.rename_values[*i].is_some(),
        _ => false,
    };
    if remove {
        remove_existing(&leaf.op, parent, field, path, st);
        return Ok(());
    }
    let v =
        lookup_mut(parent, field).ok_or_else(|| MongoError::internal("update target vanished"))?;
    let change = match &leaf.op {
        Op::Push(_) | Op::AddToSet(_) | Op::Pop { .. } | Op::Pull(_) | Op::PullAll(_) => {
            modify_array(&leaf.op, v, field, path, st)?
        }
        op => Change::from(modify_value(op, v, field, st)?),
    };
    match change {
        Change::None => {}
        Change::Whole => st.log.updated(path, v),
        Change::Appended(n) => {
            if let Bson::Array(arr) = v {
                st.log.appended(path, arr, n);
            }
        }
    }
    if !matches!(change, Change::None) {
        st.changed = true;
    }
    log_rename_source(leaf, st);
    Ok(())
}

/// `$unset` (and the source of a `$rename`): removes the field; an array element becomes
/// null instead, which mongod logs as an update of that element.
fn remove_existing(op: &Op, parent: &mut Bson, field: &str, path: &[String], st: &mut ApplyState) {
    match parent {
        Bson::Document(d) => {
            d.remove(field);
            // A rename logs its source's removal along with its destination.
            if matches!(op, Op::Unset) {
                st.log.deleted(path);
            }
        }
        Bson::Array(a) => {
            if let Some(e) = parse_index(field).and_then(|i| a.get_mut(i)) {
                *e = Bson::Null;
                st.log.updated(path, e);
            }
        }
        _ => {}
    }
    st.changed = true;
}

/// mongod's RenameNode sets the destination, then unsets the source: the removal is
/// logged right after the destination, wherever the source sits in the update tree.
fn log_rename_source(leaf: &Leaf, st: &mut ApplyState) {
    if let Op::RenameTo(i) = leaf.op {
        if st.rename_values.get(i).is_some_and(Option::is_some) {
            if let Some(r) = st.renames.get(i) {
                let from: Vec<String> = r.from.split('.').map(str::to_owned).collect();
                st.log.deleted(&from);
            }
        }
    }
}

/// The scalar modifiers on an existing value; true when it changed.
fn modify_value(op: &Op, v: &mut Bson, field: &str, st: &ApplyState) -> MongoResult<bool> {
    let id_str = st.id_str();
    Ok(match op {
        Op::Set(x) => set_value(v, x),
        Op::SetOnInsert(x) => st.ctx.is_upsert_insert && set_value(v, x),
        Op::RenameTo(i) => match &st.rename_values[*i] {
            Some(x) => set_value(v, &x.clone()),
            None => false,
        },
        Op::Inc(x) | Op::Mul(x) => {
            let is_inc = matches!(op, Op::Inc(_));
            let name = if is_inc { "$inc" } else { "$mul" };
            let (Some(cur), Some(arg)) = (num_of(v), num_of(x)) else {
                return Err(MongoError::type_mismatch(format!(
                    "Cannot apply {name} to a value of non-numeric type. {{{id_str}}} has the field '{field}' of non-numeric type {}",
                    type_name(v)
                )));
            };
            let result = if is_inc {
                safe_add(cur, arg)
            } else {
                safe_mul(cur, arg)
            };
            let Some(result) = result else {
                return Err(MongoError::bad_value(format!(
                    "Failed to apply {name} operations to current value ({}) for document {{{id_str}}}",
                    debug_number(v)
                )));
            };
            set_value(v, &result)
        }
        Op::Min(x) => crate::order::compare(x, v) == Ordering::Less && set_value(v, x),
        Op::Max(x) => crate::order::compare(x, v) == Ordering::Greater && set_value(v, x),
        Op::CurrentDate { timestamp } => set_value(v, &current_date(*timestamp, st.ctx.now)),
        Op::Bit(ops) => {
            if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
                return Err(MongoError::bad_value(format!(
                    "Cannot apply $bit to a value of non-integral type.{id_str} has the field {field} of non-integer type {}",
                    type_name(v)
                )));
            }
            let result = apply_bit(v, ops);
            set_value(v, &result)
        }
        _ => false,
    })
}

/// The array modifiers on an existing value.
fn modify_array(
    op: &Op,
    v: &mut Bson,
    field: &str,
    path: &[String],
    st: &ApplyState,
) -> MongoResult<Change> {
    let id_str = st.id_str();
    let dotted = path.join(".");
    Ok(match op {
        Op::Push(spec) => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::bad_value(format!(
                    "The field '{dotted}' must be an array but is of type {} in document {{{id_str}}}",
                    type_name(v)
                )));
            };
            match perform_push(spec, arr) {
                Pushed::Unchanged => Change::None,
                Pushed::Appended(n) => Change::Appended(n),
                Pushed::Rewritten => Change::Whole,
            }
        }
        Op::AddToSet(values) => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::bad_value(format!(
                    "Cannot apply $addToSet to non-array field. Field named '{field}' has non-array type {}",
                    type_name(v)
                )));
            };
            let mut changed = false;
            for x in values {
                if !arr.iter().any(|e| crate::order::values_equal(e, x)) {
                    arr.push(x.clone());
                    changed = true;
                }
            }
            // mongod 7.0 logs the whole array (only $push logs appended elements alone).
            Change::from(changed)
        }
        Op::Pop { front } => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::type_mismatch(format!(
                    "Path '{dotted}' contains an element of non-array type '{}'",
                    type_name(v)
                )));
            };
            if arr.is_empty() {
                Change::None
            } else {
                if *front {
                    arr.remove(0);
                } else {
                    arr.pop();
                }
                Change::Whole
            }
        }
        Op::Pull(_) | Op::PullAll(_) => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::bad_value(
                    "Cannot apply $pull to a non-array value",
                ));
            };
            let before = arr.len();
            match op {
                Op::Pull(cond) => arr.retain(|e| !pull_matches(cond, e)),
                Op::PullAll(values) => {
                    arr.retain(|e| !values.iter().any(|x| crate::order::values_equal(e, x)))
                }
                _ => {}
            }
            Change::from(arr.len() != before)
        }
        _ => Change::None,
    })
}

/// `$set` semantics: replaces `v` unless it is already identical (type and value).
fn set_value(v: &mut Bson, x: &Bson) -> bool {
    if identical(v, x) {
        return false;
    }
    *v = x.clone();
    true
}
