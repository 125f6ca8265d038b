//! Update operators, replacement and upsert (owner: update helper).
//!
//! An update is parsed once into an [`UpdateSpec`] and applied to many documents. Operator
//! updates follow mongod's `UpdateNode` design (src/mongo/db/update): every path of every
//! operator is merged into one tree, which is where conflicting paths are detected at parse
//! time; the tree is then walked against the document with the children of each object node
//! applied in lexicographic field order. That walk order is observable: fields created by
//! one update are appended in sorted order, exactly like mongod.

// MongoError is the workspace-wide error type; boxing it is a crate-wide decision.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bson::{Bson, DateTime, Decimal128, Document, Timestamp};

use crate::agg::{NoCollections, Pipeline};
use crate::expr::{type_name, Dec, Variables};
use crate::matcher::Matcher;
use crate::{ErrorCode, MongoError, MongoResult};

/// Per-document inputs to [`UpdateSpec::apply`].
#[derive(Debug, Clone)]
pub struct UpdateContext {
    /// True when the document is the seed of an upsert (enables `$setOnInsert`).
    pub is_upsert_insert: bool,
    /// The array index matched by the query, which the positional `$` resolves to.
    pub matched_array_index: Option<usize>,
    /// The statement's clock reading, used by `$currentDate`.
    pub now: DateTime,
}

impl UpdateContext {
    /// A context for updating an existing document.
    pub fn new(now: DateTime) -> Self {
        UpdateContext {
            is_upsert_insert: false,
            matched_array_index: None,
            now,
        }
    }
}

/// A parsed `update` argument: operator document, replacement document or pipeline.
#[derive(Debug, Clone)]
pub struct UpdateSpec {
    kind: Kind,
    /// The command's `let` variables, visible to pipeline updates.
    vars: Variables,
}

#[derive(Debug, Clone)]
enum Kind {
    Modifiers(Box<ModifierUpdate>),
    Replacement(Document),
    Pipeline(Box<Pipeline>),
}

impl UpdateSpec {
    /// The same update with the command's `let` variables (pipeline updates see them).
    pub fn with_variables(mut self, vars: Variables) -> UpdateSpec {
        self.vars = vars;
        self
    }

    /// Parses an update. `array_filters` are the command's `arrayFilters`; they are only
    /// legal with operator updates and every one of them must be used.
    pub fn parse(update: &Bson, array_filters: Option<&[Document]>) -> MongoResult<UpdateSpec> {
        match update {
            Bson::Array(stages) => {
                if array_filters.is_some_and(|f| !f.is_empty()) {
                    return Err(MongoError::failed_to_parse(
                        "arrayFilters may not be specified for pipeline-style updates",
                    ));
                }
                Ok(UpdateSpec {
                    kind: Kind::Pipeline(Box::new(parse_pipeline(stages)?)),
                    vars: Variables::default(),
                })
            }
            Bson::Document(d) => {
                let is_modifier = d.keys().next().is_some_and(|k| k.starts_with('$'));
                if is_modifier {
                    let m = ModifierUpdate::parse(d, array_filters.unwrap_or(&[]))?;
                    Ok(UpdateSpec {
                        kind: Kind::Modifiers(Box::new(m)),
                        vars: Variables::default(),
                    })
                } else {
                    if array_filters.is_some_and(|f| !f.is_empty()) {
                        return Err(MongoError::failed_to_parse(
                            "arrayFilters may not be specified for replacement-style updates",
                        ));
                    }
                    validate_replacement(d)?;
                    Ok(UpdateSpec {
                        kind: Kind::Replacement(d.clone()),
                        vars: Variables::default(),
                    })
                }
            }
            other => Err(MongoError::failed_to_parse(format!(
                "Update argument must be either an object or an array, not {}",
                type_name(other)
            ))),
        }
    }

    /// True for a replacement document (no operators, not a pipeline).
    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, Kind::Replacement(_))
    }

    /// True for an aggregation-pipeline update.
    pub fn is_pipeline(&self) -> bool {
        matches!(self.kind, Kind::Pipeline(_))
    }

    /// Applies the update to `doc` and reports whether it changed. On error `doc` is left
    /// untouched (the update works on a copy), so a failed write needs no undo.
    ///
    /// A result nested deeper than `wire::MAX_NESTING_DEPTH` is refused with MongoDB's
    /// storage error (Overflow, 15).
    pub fn apply(&self, doc: &mut Document, ctx: &UpdateContext) -> MongoResult<bool> {
        match &self.kind {
            Kind::Modifiers(m) => m.apply(doc, ctx),
            Kind::Replacement(r) => apply_replacement(r, doc),
            Kind::Pipeline(stages) => apply_pipeline(stages, doc, ctx, &self.vars),
        }
    }

    /// The document an upsert inserts when `filter` matched nothing: the seed from
    /// [`upsert_seed`] (only its `_id` for a replacement) with the update applied as an
    /// insert (`$setOnInsert` active). `_id` is placed first; if neither the filter nor the
    /// update supplies one, a fresh ObjectId is generated.
    pub fn upsert_document(&self, filter: &Document, now: DateTime) -> MongoResult<Document> {
        let ctx = UpdateContext {
            is_upsert_insert: true,
            matched_array_index: None,
            now,
        };
        let seed = upsert_seed(filter)?;
        let mut doc = match &self.kind {
            Kind::Replacement(r) => {
                let mut d = r.clone();
                if !d.contains_key("_id") {
                    if let Some(id) = seed.get("_id") {
                        d = with_id_first(d, id.clone());
                    }
                }
                d
            }
            Kind::Modifiers(m) => {
                let mut d = seed.clone();
                m.apply(&mut d, &ctx)?;
                d
            }
            Kind::Pipeline(stages) => {
                let mut d = seed.clone();
                apply_pipeline(stages, &mut d, &ctx, &self.vars)?;
                d
            }
        };
        if let Some(seed_id) = seed.get("_id") {
            match doc.get("_id") {
                Some(id) if same_value(id, seed_id) => {}
                _ => return Err(MongoError::new(
                    ErrorCode::ImmutableField,
                    "Performing an update on the path '_id' would modify the immutable field '_id'",
                )),
            }
        }
        let id = doc
            .remove("_id")
            .unwrap_or_else(|| Bson::ObjectId(bson::oid::ObjectId::new()));
        validate_id(&id)?;
        doc = with_id_first(doc, id);
        crate::depth::check_document_depth(&doc)?;
        Ok(doc)
    }
}

/// The document an upsert starts from: the equality conditions of `filter` (top level,
/// inside `$and`, single-clause `$or`, `$eq` and one-element `$in`), dotted paths expanded
/// into sub-documents, `_id` first when present.
pub fn upsert_seed(filter: &Document) -> MongoResult<Document> {
    let mut eqs: Vec<(String, Bson)> = Vec::new();
    collect_equalities(filter, &mut eqs);
    for (path, _) in &eqs {
        crate::depth::check_path(path)?;
    }
    for (i, (a, _)) in eqs.iter().enumerate() {
        for (b, _) in eqs.iter().skip(i + 1) {
            if a == b {
                return Err(MongoError::new(
                    ErrorCode::NotSingleValueField,
                    format!("cannot infer query fields to set, path '{a}' is matched twice"),
                ));
            }
            let (short, long) = if a.len() < b.len() { (a, b) } else { (b, a) };
            if long.starts_with(short.as_str()) && long.as_bytes()[short.len()] == b'.' {
                return Err(MongoError::new(
                    ErrorCode::NotSingleValueField,
                    format!("cannot infer query fields to set, both paths '{short}' and '{long}' are matched"),
                ));
            }
        }
    }
    let mut root = Bson::Document(Document::new());
    for (path, value) in eqs {
        let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
        create_at(&mut root, &parts, value)?;
    }
    let Bson::Document(mut doc) = root else {
        unreachable!()
    };
    if let Some(id) = doc.remove("_id") {
        doc = with_id_first(doc, id);
    }
    Ok(doc)
}

fn collect_equalities(filter: &Document, out: &mut Vec<(String, Bson)>) {
    for (k, v) in filter {
        match k.as_str() {
            "$and" => {
                if let Bson::Array(clauses) = v {
                    for c in clauses {
                        if let Bson::Document(c) = c {
                            collect_equalities(c, out);
                        }
                    }
                }
            }
            "$or" => {
                // A one-clause $or is its clause after mongod's expression simplification.
                if let Bson::Array(clauses) = v {
                    if let [Bson::Document(c)] = clauses.as_slice() {
                        collect_equalities(c, out);
                    }
                }
            }
            k if k.starts_with('$') => {}
            _ => match v {
                Bson::Document(d) if d.keys().next().is_some_and(|f| f.starts_with('$')) => {
                    for (op, arg) in d {
                        match (op.as_str(), arg) {
                            ("$eq", _) => out.push((k.clone(), arg.clone())),
                            ("$in", Bson::Array(a))
                                if a.len() == 1 && !matches!(a[0], Bson::RegularExpression(_)) =>
                            {
                                out.push((k.clone(), a[0].clone()))
                            }
                            _ => {}
                        }
                    }
                }
                Bson::RegularExpression(_) => {}
                _ => out.push((k.clone(), v.clone())),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------
// Operator updates: parsing
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ModifierUpdate {
    root: Node,
    renames: Vec<Rename>,
    /// Array filters by identifier; the matcher runs against `{<identifier>: element}`.
    filters: HashMap<String, Matcher>,
    /// Every written path (for the `_id` immutability message).
    paths: Vec<String>,
}

#[derive(Debug, Clone)]
struct Rename {
    from: String,
    to: String,
}

/// A node of the update tree (mongod's UpdateObjectNode / UpdateArrayNode / leaves).
#[derive(Debug, Clone)]
enum Node {
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
    fn object() -> Node {
        Node::Object {
            children: BTreeMap::new(),
            positional: None,
        }
    }
    fn array() -> Node {
        Node::Array {
            children: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
struct Leaf {
    op: Op,
}

#[derive(Debug)]
enum Op {
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

#[derive(Debug)]
struct PushSpec {
    each: Vec<Bson>,
    position: Option<i64>,
    slice: Option<i64>,
    sort: Option<SortSpec>,
}

#[derive(Debug)]
enum SortSpec {
    Whole(bool),
    Fields(Vec<(Vec<String>, bool)>),
}

#[derive(Debug)]
enum PullCond {
    Equal(Bson),
    /// Elements that are documents matching a query (`{$pull: {a: {x: 1}}}`).
    Doc(Matcher),
    /// Elements matching an operator expression (`{$pull: {a: {$gt: 1}}}` or a regex),
    /// evaluated as mongod does against `{x: element}`.
    Value(Matcher),
}

#[derive(Debug, Clone, Copy)]
enum BitOp {
    And,
    Or,
    Xor,
}

/// The update operators (`$set`, ...): a document whose keys are not all among them is
/// refused.
pub const MODIFIERS: &[&str] = &[
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$rename",
    "$setOnInsert",
    "$currentDate",
    "$push",
    "$addToSet",
    "$pop",
    "$pull",
    "$pullAll",
    "$bit",
];

impl ModifierUpdate {
    fn parse(update: &Document, array_filters: &[Document]) -> MongoResult<ModifierUpdate> {
        let filters = parse_array_filters(array_filters)?;
        let mut m = ModifierUpdate {
            root: Node::object(),
            renames: Vec::new(),
            filters: HashMap::new(),
            paths: Vec::new(),
        };
        let mut used: HashSet<String> = HashSet::new();
        for (op, arg) in update {
            if !MODIFIERS.contains(&op.as_str()) {
                return Err(MongoError::failed_to_parse(format!(
                    "Unknown modifier: {op}. Expected a valid update modifier or pipeline-style update specified as an array"
                )));
            }
            let Bson::Document(fields) = arg else {
                return Err(MongoError::failed_to_parse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{}}}",
                    type_name(arg),
                    fmt_elem(op, arg)
                )));
            };
            for (path, value) in fields {
                let parts = parse_update_path(path, &filters, &mut used)?;
                if creates_path(op) {
                    crate::depth::check_update_path(path)?;
                }
                if op == "$rename" {
                    m.add_rename(path, parts, value, &filters, &mut used)?;
                    continue;
                }
                let leaf = parse_op(op, path, value)?;
                insert_node(&mut m.root, &parts, Node::Leaf(Arc::new(leaf)), path)?;
                m.paths.push(path.clone());
            }
        }
        for (id, _) in filters.iter() {
            if !used.contains(id) {
                return Err(MongoError::failed_to_parse(format!(
                    "The array filter for identifier '{id}' was not used in the update {}",
                    fmt_doc(update)
                )));
            }
        }
        m.filters = filters
            .into_iter()
            .map(|(k, (_, matcher))| (k, matcher))
            .collect();
        Ok(m)
    }

    fn add_rename(
        &mut self,
        from: &str,
        from_parts: Vec<String>,
        to: &Bson,
        filters: &HashMap<String, (Document, Matcher)>,
        used: &mut HashSet<String>,
    ) -> MongoResult<()> {
        let Bson::String(to) = to else {
            return Err(MongoError::bad_value(format!(
                "The 'to' field for $rename must be a string: {}",
                fmt_elem(from, to)
            )));
        };
        let to_parts = parse_update_path(to, filters, used)?;
        crate::depth::check_update_path(to)?;
        let dynamic = |p: &[String]| p.iter().any(|c| c == "$" || is_array_part(c));
        if dynamic(&from_parts) {
            return Err(MongoError::bad_value(format!(
                "The source field for $rename may not be dynamic: {from}"
            )));
        }
        if dynamic(&to_parts) {
            return Err(MongoError::bad_value(format!(
                "The destination field for $rename may not be dynamic: {to}"
            )));
        }
        let spec = fmt_elem(from, &Bson::String(to.clone()));
        if from_parts == to_parts {
            return Err(MongoError::bad_value(format!(
                "The source and target field for $rename must differ: {spec}"
            )));
        }
        let n = from_parts.len().min(to_parts.len());
        if from_parts[..n] == to_parts[..n] {
            return Err(MongoError::bad_value(format!(
                "The source and target field for $rename must not be on the same path: {spec}"
            )));
        }
        let idx = self.renames.len();
        self.renames.push(Rename {
            from: from.to_owned(),
            to: to.clone(),
        });
        insert_node(
            &mut self.root,
            &from_parts,
            Node::Leaf(Arc::new(Leaf {
                op: Op::RenameFrom(idx),
            })),
            from,
        )?;
        insert_node(
            &mut self.root,
            &to_parts,
            Node::Leaf(Arc::new(Leaf {
                op: Op::RenameTo(idx),
            })),
            to,
        )?;
        self.paths.push(from.to_owned());
        self.paths.push(to.clone());
        Ok(())
    }
}

/// Operators that can create the path they name (and so deepen the document).
fn creates_path(op: &str) -> bool {
    !matches!(op, "$unset" | "$pop" | "$pull" | "$pullAll" | "$rename")
}

fn is_array_part(c: &str) -> bool {
    c.starts_with("$[") && c.ends_with(']')
}

/// Validates an update path and returns its components.
fn parse_update_path(
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
fn parse_array_filters(filters: &[Document]) -> MongoResult<HashMap<String, (Document, Matcher)>> {
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
fn insert_node(root: &mut Node, parts: &[String], leaf: Node, dotted: &str) -> MongoResult<()> {
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

fn parse_op(op: &str, path: &str, value: &Bson) -> MongoResult<Leaf> {
    let op = match op {
        "$set" => Op::Set(value.clone()),
        "$setOnInsert" => Op::SetOnInsert(value.clone()),
        "$unset" => Op::Unset,
        "$inc" | "$mul" => {
            if Num::of(value).is_none() {
                let verb = if op == "$inc" {
                    "increment"
                } else {
                    "multiply"
                };
                return Err(MongoError::type_mismatch(format!(
                    "Cannot {verb} with non-numeric argument: {{{}}}",
                    fmt_elem(path, value)
                )));
            }
            if op == "$inc" {
                Op::Inc(value.clone())
            } else {
                Op::Mul(value.clone())
            }
        }
        "$min" => Op::Min(value.clone()),
        "$max" => Op::Max(value.clone()),
        "$currentDate" => Op::CurrentDate {
            timestamp: parse_current_date(value)?,
        },
        "$push" => Op::Push(parse_push(value)?),
        "$addToSet" => Op::AddToSet(parse_add_to_set(value)?),
        "$pop" => {
            let n = integer_arg(path, value)?;
            if n != 1 && n != -1 {
                return Err(MongoError::failed_to_parse(format!(
                    "$pop expects 1 or -1, found: {n}"
                )));
            }
            Op::Pop { front: n == -1 }
        }
        "$pull" => Op::Pull(parse_pull(value)?),
        "$pullAll" => match value {
            Bson::Array(a) => Op::PullAll(a.clone()),
            other => {
                return Err(MongoError::bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_name(other)
                )))
            }
        },
        "$bit" => Op::Bit(parse_bit(value)?),
        _ => return Err(MongoError::internal(format!("unhandled modifier {op}"))),
    };
    Ok(Leaf { op })
}

/// mongod's `parseIntegerElementToLong` as used by `$pop`.
fn integer_arg(path: &str, value: &Bson) -> MongoResult<i64> {
    let n = match value {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) => {
            if d.fract() != 0.0 || !d.is_finite() {
                return Err(MongoError::failed_to_parse(format!(
                    "Expected an integer: {}",
                    fmt_elem(path, value)
                )));
            }
            Some(*d as i64)
        }
        Bson::Decimal128(_) => Num::of(value).and_then(|n| n.to_f64()).map(|d| d as i64),
        _ => None,
    };
    n.ok_or_else(|| {
        MongoError::failed_to_parse(format!("Expected a number in: {}", fmt_elem(path, value)))
    })
}

fn parse_current_date(value: &Bson) -> MongoResult<bool> {
    match value {
        Bson::Boolean(_) => Ok(false),
        Bson::Document(d) => {
            let mut found = None;
            for (k, v) in d {
                if k != "$type" {
                    return Err(MongoError::bad_value(format!("Unrecognized $currentDate option: {k}")));
                }
                match v {
                    Bson::String(s) if s == "date" => found = Some(false),
                    Bson::String(s) if s == "timestamp" => found = Some(true),
                    _ => {}
                }
            }
            found.ok_or_else(|| {
                MongoError::bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                )
            })
        }
        other => Err(MongoError::bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
            type_name(other)
        ))),
    }
}

fn parse_push(value: &Bson) -> MongoResult<PushSpec> {
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

fn integral(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.is_finite() => Some(*d as i64),
        Bson::Decimal128(_) => Num::of(v)?
            .to_f64()
            .filter(|d| d.fract() == 0.0)
            .map(|d| d as i64),
        _ => None,
    }
}

fn sort_direction(v: &Bson) -> Option<bool> {
    let d = Num::of(v)?.to_f64()?;
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
        v if Num::of(v).is_some() => Ok(SortSpec::Whole(sort_direction(v).ok_or_else(bad_dir)?)),
        _ => Err(MongoError::bad_value(
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
        )),
    }
}

fn parse_add_to_set(value: &Bson) -> MongoResult<Vec<Bson>> {
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

fn parse_pull(value: &Bson) -> MongoResult<PullCond> {
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

fn parse_bit(value: &Bson) -> MongoResult<Vec<(BitOp, Bson)>> {
    let Bson::Document(d) = value else {
        return Err(MongoError::bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_name(value)
        )));
    };
    if d.is_empty() {
        return Err(MongoError::bad_value(
            "You must pass in at least one bitwise operation. The format is: {$bit: {field: {and/or/xor: #}}",
        ));
    }
    let mut ops = Vec::new();
    for (k, v) in d {
        let op = match k.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            _ => {
                return Err(MongoError::bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{k}' which is an unknown operator: {{{}}}",
                    fmt_elem(k, v)
                )))
            }
        };
        if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(MongoError::bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{}}}",
                type_name(v),
                fmt_elem(k, v)
            )));
        }
        ops.push((op, v.clone()));
    }
    Ok(ops)
}

// ---------------------------------------------------------------------------------------
// Operator updates: applying
// ---------------------------------------------------------------------------------------

struct ApplyState<'a> {
    ctx: &'a UpdateContext,
    /// `_id` of the document, for error messages.
    id: Option<Bson>,
    filters: &'a HashMap<String, Matcher>,
    /// The source value of each `$rename`, read before the walk (None: source missing).
    rename_values: Vec<Option<Bson>>,
    changed: bool,
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
    fn apply(&self, doc: &mut Document, ctx: &UpdateContext) -> MongoResult<bool> {
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
            changed: false,
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
            return Ok(false);
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
        Ok(true)
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

/// The children of an object node in application order (lexicographic), with the
/// positional `$` child resolved to the matched index and merged with a same-named child.
fn ordered_children<'n>(
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

fn join_path(path: &[String], last: &str) -> String {
    let mut s = path.join(".");
    if !s.is_empty() {
        s.push('.');
    }
    s.push_str(last);
    s
}

/// Combines two nodes that apply to the same element (positional `$` and a concrete index,
/// or several array filters matching one element). Two leaves cannot be combined.
fn merge_nodes(a: &Node, b: &Node, path: &str) -> MongoResult<Node> {
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
            let mut children = ca.clone();
            for (k, v) in cb {
                let merged = match children.get(k) {
                    Some(existing) => merge_nodes(existing, v, &format!("{path}.{k}"))?,
                    None => v.clone(),
                };
                children.insert(k.clone(), merged);
            }
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
            let mut children = ca.clone();
            for (k, v) in cb {
                let merged = match children.get(k) {
                    Some(existing) => merge_nodes(existing, v, &format!("{path}.{k}"))?,
                    None => v.clone(),
                };
                children.insert(k.clone(), merged);
            }
            Ok(Node::Array { children })
        }
        _ => Err(conflict()),
    }
}

/// An array index in an update path. Unlike `crate::path::array_index`, leading zeros are
/// accepted: mongod's update walk uses `parseUnsignedBase10Integer` here.
fn parse_index(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn lookup<'a>(c: &'a Bson, f: &str) -> Option<&'a Bson> {
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
            create_at(deepest, to_create, value)?;
            st.changed = true;
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
fn create_at(base: &mut Bson, parts: &[String], value: Bson) -> MongoResult<()> {
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
                check_backfill(a.len(), idx)?;
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

/// mongod's `kMaxPaddingAllowed`: an update may pad an array with at most this many nulls.
pub(crate) const MAX_ARRAY_PADDING: usize = 1_500_000;

/// Refuses padding an array of `len` elements up to index `idx` with more than
/// [`MAX_ARRAY_PADDING`] nulls: CannotBackfillArray (34), as mongod's `maybePadTo`.
pub(crate) fn check_backfill(len: usize, idx: usize) -> MongoResult<()> {
    if idx.saturating_sub(len) > MAX_ARRAY_PADDING {
        return Err(MongoError {
            code: 34,
            code_name: Cow::Borrowed("CannotBackfillArray"),
            message: format!("can't backfill more than {MAX_ARRAY_PADDING} elements"),
            extra: None,
        });
    }
    Ok(())
}

/// The value a leaf creates on a missing path; None when the operator does not create.
fn value_for_missing(leaf: &Leaf, st: &ApplyState) -> MongoResult<Option<Bson>> {
    Ok(match &leaf.op {
        Op::Set(v) => Some(v.clone()),
        Op::SetOnInsert(v) => st.ctx.is_upsert_insert.then(|| v.clone()),
        Op::Inc(v) | Op::Min(v) | Op::Max(v) => Some(v.clone()),
        Op::Mul(v) => Some(Num::of(v).map(Num::zero_like).unwrap_or(Bson::Int32(0))),
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
        match parent {
            Bson::Document(d) => {
                d.remove(field);
            }
            Bson::Array(a) => {
                if let Some(e) = parse_index(field).and_then(|i| a.get_mut(i)) {
                    *e = Bson::Null;
                }
            }
            _ => {}
        }
        st.changed = true;
        return Ok(());
    }
    let id_str = st.id_str();
    let dotted = path.join(".");
    let v =
        lookup_mut(parent, field).ok_or_else(|| MongoError::internal("update target vanished"))?;
    let changed = match &leaf.op {
        Op::Set(x) => set_value(v, x),
        Op::SetOnInsert(x) => st.ctx.is_upsert_insert && set_value(v, x),
        Op::RenameTo(i) => match &st.rename_values[*i] {
            Some(x) => set_value(v, &x.clone()),
            None => false,
        },
        Op::Inc(x) | Op::Mul(x) => {
            let is_inc = matches!(leaf.op, Op::Inc(_));
            let name = if is_inc { "$inc" } else { "$mul" };
            let (Some(cur), Some(arg)) = (Num::of(v), Num::of(x)) else {
                return Err(MongoError::type_mismatch(format!(
                    "Cannot apply {name} to a value of non-numeric type. {{{id_str}}} has the field '{field}' of non-numeric type {}",
                    type_name(v)
                )));
            };
            let result = if is_inc { cur.add(arg) } else { cur.mul(arg) };
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
        Op::Push(spec) => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::bad_value(format!(
                    "The field '{dotted}' must be an array but is of type {} in document {{{id_str}}}",
                    type_name(v)
                )));
            };
            perform_push(spec, arr)
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
            changed
        }
        Op::Pop { front } => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::type_mismatch(format!(
                    "Path '{dotted}' contains an element of non-array type '{}'",
                    type_name(v)
                )));
            };
            if arr.is_empty() {
                false
            } else {
                if *front {
                    arr.remove(0);
                } else {
                    arr.pop();
                }
                true
            }
        }
        Op::Pull(cond) => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::bad_value(
                    "Cannot apply $pull to a non-array value",
                ));
            };
            let before = arr.len();
            arr.retain(|e| !pull_matches(cond, e));
            arr.len() != before
        }
        Op::PullAll(values) => {
            let Bson::Array(arr) = v else {
                return Err(MongoError::bad_value(
                    "Cannot apply $pull to a non-array value",
                ));
            };
            let before = arr.len();
            arr.retain(|e| !values.iter().any(|x| crate::order::values_equal(e, x)));
            arr.len() != before
        }
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
        Op::Unset | Op::RenameFrom(_) => false,
    };
    if changed {
        st.changed = true;
    }
    Ok(())
}

/// `$set` semantics: replaces `v` unless it is already identical (type and value).
fn set_value(v: &mut Bson, x: &Bson) -> bool {
    if identical(v, x) {
        return false;
    }
    *v = x.clone();
    true
}

fn pull_matches(cond: &PullCond, e: &Bson) -> bool {
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

/// mongod's PushNode: insert at `$position`, then `$sort`, then `$slice`. Returns whether
/// mongod counts the array as modified (any `$sort` does).
fn perform_push(spec: &PushSpec, arr: &mut Vec<Bson>) -> bool {
    let mut changed = false;
    if !spec.each.is_empty() {
        let len = arr.len() as i64;
        let at = match spec.position {
            None => len,
            Some(p) if p > len => len,
            Some(p) if p >= 0 => p,
            Some(p) if p.unsigned_abs() < len as u64 => len + p,
            Some(_) => 0,
        } as usize;
        arr.splice(at..at, spec.each.iter().cloned());
        changed = true;
    }
    if let Some(sort) = &spec.sort {
        sort_array(arr, sort);
        changed = true;
    }
    if let Some(slice) = spec.slice {
        let keep = slice.unsigned_abs().min(usize::MAX as u64) as usize;
        if arr.len() > keep {
            if slice >= 0 {
                arr.truncate(keep);
            } else {
                arr.drain(..arr.len() - keep);
            }
            changed = true;
        }
    }
    changed
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

fn apply_bit(v: &Bson, ops: &[(BitOp, Bson)]) -> Bson {
    let mut cur = v.clone();
    for (op, arg) in ops {
        cur = match (&cur, arg) {
            (Bson::Int32(a), Bson::Int32(b)) => {
                Bson::Int32(bit_op(*op, *a as i64, *b as i64) as i32)
            }
            (a, b) => {
                let a = match a {
                    Bson::Int32(i) => *i as i64,
                    Bson::Int64(i) => *i,
                    _ => 0,
                };
                let b = match b {
                    Bson::Int32(i) => *i as i64,
                    Bson::Int64(i) => *i,
                    _ => 0,
                };
                Bson::Int64(bit_op(*op, a, b))
            }
        };
    }
    cur
}

fn bit_op(op: BitOp, a: i64, b: i64) -> i64 {
    match op {
        BitOp::And => a & b,
        BitOp::Or => a | b,
        BitOp::Xor => a ^ b,
    }
}

// ---------------------------------------------------------------------------------------
// Replacement
// ---------------------------------------------------------------------------------------

fn validate_replacement(d: &Document) -> MongoResult<()> {
    for k in d.keys() {
        if k.starts_with('$') {
            return Err(MongoError::new(
                ErrorCode::DollarPrefixedFieldName,
                format!(
                    "The dollar ($) prefixed field '{k}' in '{k}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith."
                ),
            ));
        }
    }
    if let Some(id) = d.get("_id") {
        validate_id(id)?;
    }
    Ok(())
}

fn validate_id(id: &Bson) -> MongoResult<()> {
    let bad = match id {
        Bson::Array(_) => Some("array"),
        Bson::RegularExpression(_) => Some("regex"),
        Bson::Undefined => Some("undefined"),
        _ => None,
    };
    match bad {
        Some(t) => Err(MongoError::new(
            ErrorCode::InvalidIdField,
            format!("The '_id' value cannot be of type {t}"),
        )),
        None => Ok(()),
    }
}

fn apply_replacement(r: &Document, doc: &mut Document) -> MongoResult<bool> {
    let mut new_doc = r.clone();
    keep_id(doc, &mut new_doc)?;
    if identical_docs(doc, &new_doc) {
        return Ok(false);
    }
    crate::depth::check_document_depth(&new_doc)?;
    *doc = new_doc;
    Ok(true)
}

/// A replacement (or pipeline result) keeps the original `_id`: absent → copied in first,
/// different → ImmutableField.
fn keep_id(original: &Document, new_doc: &mut Document) -> MongoResult<()> {
    let Some(old_id) = original.get("_id") else {
        return Ok(());
    };
    match new_doc.get("_id") {
        None => {
            *new_doc = with_id_first(std::mem::take(new_doc), old_id.clone());
            Ok(())
        }
        Some(id) if same_value(id, old_id) => Ok(()),
        Some(id) => Err(MongoError::new(
            ErrorCode::ImmutableField,
            format!(
                "After applying the update, the (immutable) field '_id' was found to have been altered to {}",
                fmt_elem("_id", id)
            ),
        )),
    }
}

fn with_id_first(doc: Document, id: Bson) -> Document {
    let mut out = Document::new();
    out.insert("_id", id);
    for (k, v) in doc {
        if k != "_id" {
            out.insert(k, v);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Pipeline updates: evaluated by crate::agg, restricted to the stages mongod allows
// ---------------------------------------------------------------------------------------

const PIPELINE_UPDATE_STAGES: &[&str] = &[
    "$addFields",
    "$set",
    "$project",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

fn parse_pipeline(stages: &[Bson]) -> MongoResult<Pipeline> {
    let mut docs = Vec::with_capacity(stages.len());
    for s in stages {
        let Bson::Document(d) = s else {
            return Err(MongoError::type_mismatch(format!(
                "Each element of the 'pipeline' array must be an object, but found {}",
                type_name(s)
            )));
        };
        docs.push(d.clone());
    }
    let pipeline = Pipeline::parse(&docs)?;
    for d in &docs {
        let name = d.keys().next().map(String::as_str).unwrap_or_default();
        if !PIPELINE_UPDATE_STAGES.contains(&name) {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                format!("{name} is not allowed to be used within an update"),
            ));
        }
    }
    Ok(pipeline)
}

fn apply_pipeline(
    pipeline: &Pipeline,
    doc: &mut Document,
    ctx: &UpdateContext,
    vars: &Variables,
) -> MongoResult<bool> {
    let vars = vars.clone().with_now(ctx.now);
    let mut out = pipeline.run_with(vec![doc.clone()], &NoCollections, &vars)?;
    let mut cur = match (out.pop(), out.is_empty()) {
        (Some(d), true) => d,
        _ => {
            return Err(MongoError::internal(
                "an update pipeline must produce exactly one document",
            ))
        }
    };
    if ctx.is_upsert_insert {
        if let Some(id) = cur.remove("_id") {
            cur = with_id_first(cur, id);
        }
    } else {
        keep_id(doc, &mut cur)?;
    }
    if identical_docs(doc, &cur) {
        return Ok(false);
    }
    crate::depth::check_document_depth(&cur)?;
    *doc = cur;
    Ok(true)
}

// ---------------------------------------------------------------------------------------
// Numbers: mongod's SafeNum promotion rules
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Num {
    I32(i32),
    I64(i64),
    F64(f64),
    Dec(Decimal128),
}

impl Num {
    fn of(v: &Bson) -> Option<Num> {
        match v {
            Bson::Int32(i) => Some(Num::I32(*i)),
            Bson::Int64(i) => Some(Num::I64(*i)),
            Bson::Double(d) => Some(Num::F64(*d)),
            Bson::Decimal128(d) => Some(Num::Dec(*d)),
            _ => None,
        }
    }

    fn zero_like(self) -> Bson {
        match self {
            Num::I32(_) => Bson::Int32(0),
            Num::I64(_) => Bson::Int64(0),
            Num::F64(_) => Bson::Double(0.0),
            Num::Dec(_) => Bson::Decimal128("0".parse().expect("valid decimal")),
        }
    }

    fn to_f64(self) -> Option<f64> {
        Some(match self {
            Num::I32(i) => i as f64,
            Num::I64(i) => i as f64,
            Num::F64(d) => d,
            Num::Dec(d) => d.to_string().parse().ok()?,
        })
    }

    /// Decimal arithmetic is shared with the aggregation expressions (`crate::expr::Dec`).
    fn to_dec(self) -> Dec {
        match self {
            Num::I32(i) => Dec::from_i64(i64::from(i)),
            Num::I64(i) => Dec::from_i64(i),
            Num::F64(d) => Dec::from_f64(d),
            Num::Dec(d) => Dec::from_d128(&d),
        }
    }

    /// None when a 64-bit integer result overflows (mongod reports an error there).
    fn add(self, o: Num) -> Option<Bson> {
        use Num::*;
        Some(match (self, o) {
            (Dec(_), _) | (_, Dec(_)) => Bson::Decimal128(self.to_dec().add(&o.to_dec()).to_d128()),
            (F64(_), _) | (_, F64(_)) => Bson::Double(self.to_f64()? + o.to_f64()?),
            (I32(a), I32(b)) => match a.checked_add(b) {
                Some(r) => Bson::Int32(r),
                None => Bson::Int64(a as i64 + b as i64),
            },
            (a, b) => Bson::Int64(a.as_i64()?.checked_add(b.as_i64()?)?),
        })
    }

    fn mul(self, o: Num) -> Option<Bson> {
        use Num::*;
        Some(match (self, o) {
            (Dec(_), _) | (_, Dec(_)) => Bson::Decimal128(self.to_dec().mul(&o.to_dec()).to_d128()),
            (F64(_), _) | (_, F64(_)) => Bson::Double(self.to_f64()? * o.to_f64()?),
            (I32(a), I32(b)) => match a.checked_mul(b) {
                Some(r) => Bson::Int32(r),
                None => Bson::Int64(a as i64 * b as i64),
            },
            (a, b) => Bson::Int64(a.as_i64()?.checked_mul(b.as_i64()?)?),
        })
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            Num::I32(i) => Some(i as i64),
            Num::I64(i) => Some(i),
            _ => None,
        }
    }
}

/// mongod's SafeNum debug string used in overflow messages.
fn debug_number(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => format!("(NumberInt){i}"),
        Bson::Int64(i) => format!("(NumberLong){i}"),
        Bson::Double(d) => format!("(NumberDouble){d}"),
        Bson::Decimal128(d) => format!("(NumberDecimal){d}"),
        other => fmt_value(other),
    }
}

// ---------------------------------------------------------------------------------------
// Value helpers
// ---------------------------------------------------------------------------------------

/// Type and value identical, field order included (mongod's `binaryEqualValues`).
/// bson's `Document` equality ignores field order, hence this.
fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Document(x), Bson::Document(y)) => identical_docs(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

fn identical_docs(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
}

/// Equality for immutable-field checks: identical, or equal in MongoDB's comparison (1 == 1.0).
fn same_value(a: &Bson, b: &Bson) -> bool {
    identical(a, b) || crate::order::values_equal(a, b)
}

/// `name: value` the way mongod's `BSONElement::toString` prints it in messages.
fn fmt_elem(name: &str, v: &Bson) -> String {
    format!("{name}: {}", fmt_value(v))
}

fn fmt_doc(d: &Document) -> String {
    if d.is_empty() {
        return "{}".to_owned();
    }
    let fields: Vec<String> = d.iter().map(|(k, v)| fmt_elem(k, v)).collect();
    format!("{{ {} }}", fields.join(", "))
}

fn fmt_value(v: &Bson) -> String {
    match v {
        Bson::Double(d) => {
            if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e16 {
                format!("{d:.1}")
            } else {
                format!("{d}")
            }
        }
        Bson::String(s) => format!("\"{s}\""),
        Bson::Document(d) => fmt_doc(d),
        Bson::Array(a) => {
            if a.is_empty() {
                "[]".to_owned()
            } else {
                let items: Vec<String> = a.iter().map(fmt_value).collect();
                format!("[ {} ]", items.join(", "))
            }
        }
        Bson::ObjectId(o) => format!("ObjectId('{o}')"),
        Bson::Boolean(b) => b.to_string(),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Null => "null".to_owned(),
        Bson::Undefined => "undefined".to_owned(),
        Bson::RegularExpression(r) => format!("/{}/{}", r.pattern, r.options),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => format!("NumberDecimal(\"{d}\")"),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::MinKey => "MinKey".to_owned(),
        Bson::MaxKey => "MaxKey".to_owned(),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn now() -> DateTime {
        DateTime::from_millis(1_700_000_000_123)
    }

    fn run_with(
        before: &Document,
        update: Bson,
        filters: Option<&[Document]>,
        matched: Option<usize>,
    ) -> MongoResult<(Document, bool)> {
        let spec = UpdateSpec::parse(&update, filters)?;
        let ctx = UpdateContext {
            is_upsert_insert: false,
            matched_array_index: matched,
            now: now(),
        };
        let mut d = before.clone();
        let changed = spec.apply(&mut d, &ctx)?;
        if !changed {
            assert!(
                identical_docs(&d, before),
                "unchanged doc was modified: {d}"
            );
        }
        Ok((d, changed))
    }

    fn check(
        cases: &[(Document, Bson, Document)],
        filters: Option<&[Document]>,
        matched: Option<usize>,
    ) {
        for (before, update, want) in cases {
            let (got, changed) = run_with(before, update.clone(), filters, matched)
                .unwrap_or_else(|e| panic!("{before} with {update}: unexpected error {e}"));
            assert!(
                identical_docs(&got, want),
                "{before} with {update}: got {got}, want {want}"
            );
            assert_eq!(
                changed,
                !identical_docs(before, want),
                "{before} with {update}: changed flag"
            );
        }
    }

    fn check_err(
        cases: &[(Document, Bson, i32, &str)],
        filters: Option<&[Document]>,
        matched: Option<usize>,
    ) {
        for (before, update, code, msg) in cases {
            match run_with(before, update.clone(), filters, matched) {
                Ok((d, _)) => panic!("{before} with {update}: expected error {code}, got {d}"),
                Err(e) => {
                    assert_eq!(e.code, *code, "{before} with {update}: {e}");
                    assert!(
                        e.message.contains(msg),
                        "{before} with {update}: message {:?} lacks {msg:?}",
                        e.message
                    );
                }
            }
        }
    }

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(s.parse().unwrap())
    }

    #[test]
    fn set_and_unset() {
        check(
            &[
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a": 1}}),
                    doc! {"_id": 1, "a": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1, "b": 2},
                    bson!({"$set": {"a": 5}}),
                    doc! {"_id": 1, "a": 5, "b": 2},
                ),
                // New fields of one update are created in lexicographic order, like mongod.
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"b": 1, "a": 1}}),
                    doc! {"_id": 1, "a": 1, "b": 1},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a.b.c": 1}}),
                    doc! {"_id": 1, "a": {"b": {"c": 1}}},
                ),
                (
                    doc! {"_id": 1, "a": [1]},
                    bson!({"$set": {"a.2": 5}}),
                    doc! {"_id": 1, "a": [1, null, 5]},
                ),
                (
                    doc! {"_id": 1, "a": [1]},
                    bson!({"$set": {"a.1.b": 5}}),
                    doc! {"_id": 1, "a": [1, {"b": 5}]},
                ),
                (
                    doc! {"_id": 1, "a": {"c": 1}},
                    bson!({"$set": {"a.b": 1}}),
                    doc! {"_id": 1, "a": {"c": 1, "b": 1}},
                ),
                (
                    doc! {"_id": 1, "a": [{"b": 0}, {"b": 1}]},
                    bson!({"$set": {"a.0.b": 1}}),
                    doc! {"_id": 1, "a": [{"b": 1}, {"b": 1}]},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a.0": 1}}),
                    doc! {"_id": 1, "a": {"0": 1}},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a.c": 2, "a.b": 1}}),
                    doc! {"_id": 1, "a": {"b": 1, "c": 2}},
                ),
                (
                    doc! {"_id": 1, "a": 1.0},
                    bson!({"$set": {"a": 1}}),
                    doc! {"_id": 1, "a": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$set": {"a": 1}}),
                    doc! {"_id": 1, "a": 1},
                ),
                (
                    doc! {"_id": 1, "a": {"x": 1, "y": 2}},
                    bson!({"$set": {"a": {"x": 1, "y": 2}}}),
                    doc! {"_id": 1, "a": {"x": 1, "y": 2}},
                ),
                (
                    doc! {"_id": 1, "a": {"y": 2, "x": 1}},
                    bson!({"$set": {"a": {"x": 1, "y": 2}}}),
                    doc! {"_id": 1, "a": {"x": 1, "y": 2}},
                ),
                (doc! {"_id": 1}, bson!({"$set": {}}), doc! {"_id": 1}),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"_id": 1}}),
                    doc! {"_id": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1, "b": 2},
                    bson!({"$unset": {"a": ""}}),
                    doc! {"_id": 1, "b": 2},
                ),
                (
                    doc! {"_id": 1, "a": [1, 2, 3]},
                    bson!({"$unset": {"a.1": 1}}),
                    doc! {"_id": 1, "a": [1, null, 3]},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$unset": {"a": 1}}),
                    doc! {"_id": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$unset": {"a.b": 1}}),
                    doc! {"_id": 1, "a": 1},
                ),
                (
                    doc! {"_id": 1, "a": {"b": 1, "c": 2}},
                    bson!({"$unset": {"a.b": 1}}),
                    doc! {"_id": 1, "a": {"c": 2}},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$set": {"c": 3}, "$unset": {"a": 1}, "$setOnInsert": {"z": 1}}),
                    doc! {"_id": 1, "c": 3},
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn arithmetic() {
        check(
            &[
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$inc": {"a": 2}}),
                    doc! {"_id": 1, "a": 3},
                ),
                (
                    doc! {"_id": 1, "a": i32::MAX},
                    bson!({"$inc": {"a": 1}}),
                    doc! {"_id": 1, "a": i32::MAX as i64 + 1},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$inc": {"a": 2_i64}}),
                    doc! {"_id": 1, "a": 3_i64},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$inc": {"a": 0.5}}),
                    doc! {"_id": 1, "a": 1.5},
                ),
                (
                    doc! {"_id": 1, "a": 1_i64},
                    bson!({"$inc": {"a": 1}}),
                    doc! {"_id": 1, "a": 2_i64},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$inc": {"a": 5_i64}}),
                    doc! {"_id": 1, "a": 5_i64},
                ),
                (
                    doc! {"_id": 1, "a": 7},
                    bson!({"$inc": {"a": 0}}),
                    doc! {"_id": 1, "a": 7},
                ),
                (
                    doc! {"_id": 1, "a": 7},
                    bson!({"$inc": {"a": 0_i64}}),
                    doc! {"_id": 1, "a": 7_i64},
                ),
                (
                    doc! {"_id": 1, "a": dec("1.5")},
                    bson!({"$inc": {"a": 1}}),
                    doc! {"_id": 1, "a": dec("2.5")},
                ),
                (
                    doc! {"_id": 1, "a": 2},
                    bson!({"$inc": {"a": dec("0.25")}}),
                    doc! {"_id": 1, "a": dec("2.25")},
                ),
                (
                    doc! {"_id": 1, "a": dec("1.10")},
                    bson!({"$mul": {"a": dec("3")}}),
                    doc! {"_id": 1, "a": dec("3.30")},
                ),
                (
                    doc! {"_id": 1, "a": 3},
                    bson!({"$mul": {"a": 2}}),
                    doc! {"_id": 1, "a": 6},
                ),
                (
                    doc! {"_id": 1, "a": 65536},
                    bson!({"$mul": {"a": 65536}}),
                    doc! {"_id": 1, "a": 4_294_967_296_i64},
                ),
                (
                    doc! {"_id": 1, "a": 3},
                    bson!({"$mul": {"a": 1.5}}),
                    doc! {"_id": 1, "a": 4.5},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$mul": {"a": 5}}),
                    doc! {"_id": 1, "a": 0},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$mul": {"a": 5_i64}}),
                    doc! {"_id": 1, "a": 0_i64},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$mul": {"a": 2.5}}),
                    doc! {"_id": 1, "a": 0.0},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$min": {"a": 3}}),
                    doc! {"_id": 1, "a": 3},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$min": {"a": 7}}),
                    doc! {"_id": 1, "a": 5},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$min": {"a": 5.0}}),
                    doc! {"_id": 1, "a": 5},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$min": {"a": null}}),
                    doc! {"_id": 1, "a": null},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$max": {"a": 7}}),
                    doc! {"_id": 1, "a": 7},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$max": {"a": "x"}}),
                    doc! {"_id": 1, "a": "x"},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$max": {"a.b": 1}}),
                    doc! {"_id": 1, "a": {"b": 1}},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$bit": {"a": {"and": 3}}}),
                    doc! {"_id": 1, "a": 1},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$bit": {"a": {"or": 2}}}),
                    doc! {"_id": 1, "a": 7},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$bit": {"a": {"xor": 1}}}),
                    doc! {"_id": 1, "a": 4},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$bit": {"a": {"or": 8_i64}}}),
                    doc! {"_id": 1, "a": 13_i64},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!({"$bit": {"a": {"and": 7, "xor": 1}}}),
                    doc! {"_id": 1, "a": 4},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$bit": {"a": {"or": 5}}}),
                    doc! {"_id": 1, "a": 5},
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$bit": {"a": {"and": 5}}}),
                    doc! {"_id": 1, "a": 0},
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn arithmetic_errors() {
        check_err(
            &[
                (
                    doc! {"_id": 1, "a": i64::MAX},
                    bson!({"$inc": {"a": 1}}),
                    2,
                    "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}",
                ),
                (
                    doc! {"_id": 1, "a": 42},
                    bson!({"$inc": {"a": i64::MAX}}),
                    2,
                    "Failed to apply $inc operations to current value ((NumberInt)42) for document {_id: 1}",
                ),
                (doc! {"_id": 1, "a": i64::MAX}, bson!({"$mul": {"a": 2}}), 2, "Failed to apply $mul operations"),
                (
                    doc! {"_id": 1, "a": "x"},
                    bson!({"$inc": {"a": 1}}),
                    14,
                    "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string",
                ),
                (
                    doc! {"_id": "k", "a": {"b": [true]}},
                    bson!({"$mul": {"a.b.0": 1}}),
                    14,
                    "Cannot apply $mul to a value of non-numeric type. {_id: \"k\"} has the field '0' of non-numeric type bool",
                ),
                (doc! {"_id": 1}, bson!({"$inc": {"a": "x"}}), 14, "Cannot increment with non-numeric argument: {a: \"x\"}"),
                (doc! {"_id": 1}, bson!({"$mul": {"a": null}}), 14, "Cannot multiply with non-numeric argument: {a: null}"),
                (
                    doc! {"_id": 1, "a": 1.5},
                    bson!({"$bit": {"a": {"and": 1}}}),
                    2,
                    "Cannot apply $bit to a value of non-integral type._id: 1 has the field a of non-integer type double",
                ),
                (doc! {"_id": 1}, bson!({"$bit": {"a": {"and": 1.0}}}), 2, "The $bit modifier field must be an Integer(32/64 bit)"),
                (doc! {"_id": 1}, bson!({"$bit": {"a": {"nand": 1}}}), 2, "The $bit modifier only supports 'and', 'or', and 'xor'"),
                (doc! {"_id": 1}, bson!({"$bit": {"a": {}}}), 2, "You must pass in at least one bitwise operation"),
                (doc! {"_id": 1}, bson!({"$bit": {"a": 1}}), 2, "The $bit modifier is not compatible with a int"),
            ],
            None,
            None,
        );
    }

    #[test]
    fn rename_set_on_insert_current_date() {
        check(
            &[
                (
                    doc! {"_id": 1, "a": 1, "b": 2},
                    bson!({"$rename": {"a": "z"}}),
                    doc! {"_id": 1, "b": 2, "z": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1, "b": 2},
                    bson!({"$rename": {"a": "b"}}),
                    doc! {"_id": 1, "b": 1},
                ),
                (
                    doc! {"_id": 1, "a": {"b": 1}},
                    bson!({"$rename": {"a.b": "c"}}),
                    doc! {"_id": 1, "a": {}, "c": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$rename": {"a": "x.y"}}),
                    doc! {"_id": 1, "x": {"y": 1}},
                ),
                (
                    doc! {"_id": 1, "b": 1},
                    bson!({"$rename": {"a": "z"}}),
                    doc! {"_id": 1, "b": 1},
                ),
                // The rename's destination is applied in lexicographic order with the rest.
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$rename": {"a": "b"}, "$set": {"c": 1}}),
                    doc! {"_id": 1, "b": 1, "c": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$setOnInsert": {"b": 1}}),
                    doc! {"_id": 1, "a": 1},
                ),
            ],
            None,
            None,
        );
        check_err(
            &[
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "a"}}), 2, "The source and target field for $rename must differ: a: \"a\""),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "a.b"}}), 2, "must not be on the same path: a: \"a.b\""),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": 1}}), 2, "The 'to' field for $rename must be a string: a: 1"),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a.$": "b"}}), 2, "The source field for $rename may not be dynamic: a.$"),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "b.$[]"}}), 2, "The destination field for $rename may not be dynamic: b.$[]"),
                (
                    doc! {"_id": 1, "a": [{"b": 1}]},
                    bson!({"$rename": {"a.0.b": "c"}}),
                    2,
                    "The source field cannot be an array element, 'a.0.b' in doc with _id: 1 has an array field called 'a'",
                ),
                (
                    doc! {"_id": 1, "a": 1, "x": [1]},
                    bson!({"$rename": {"a": "x.y"}}),
                    2,
                    "The destination field cannot be an array element, 'x.y' in doc with _id: 1 has an array field called 'x'",
                ),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a.b": "c"}}), 28, "cannot use the part (b of a.b) to traverse the element ({a: 1})"),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "b"}, "$set": {"b.c": 1}}), 40, "would create a conflict at 'b'"),
                (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"_id": "b"}}), 66, "would modify the immutable field '_id'"),
            ],
            None,
            None,
        );

        let (d, changed) = run_with(
            &doc! {"_id": 1},
            bson!({"$currentDate": {"a": true, "b": {"$type": "date"}, "c": {"$type": "timestamp"}}}),
            None,
            None,
        )
        .unwrap();
        assert!(changed);
        assert_eq!(d.get("a"), Some(&Bson::DateTime(now())));
        assert_eq!(d.get("b"), Some(&Bson::DateTime(now())));
        assert_eq!(
            d.get("c"),
            Some(&Bson::Timestamp(Timestamp {
                time: 1_700_000_000,
                increment: 124
            }))
        );
        check_err(
            &[
                (
                    doc! {"_id": 1},
                    bson!({"$currentDate": {"a": 1}}),
                    2,
                    "int is not valid type for $currentDate",
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$currentDate": {"a": {"$type": "x"}}}),
                    2,
                    "The '$type' string field is required",
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$currentDate": {"a": {"t": 1}}}),
                    2,
                    "Unrecognized $currentDate option: t",
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn push_and_add_to_set() {
        let a = |v: Bson| doc! {"_id": 1, "a": v};
        check(
            &[
                (a(bson!([1])), bson!({"$push": {"a": 2}}), a(bson!([1, 2]))),
                (doc! {"_id": 1}, bson!({"$push": {"a": 2}}), a(bson!([2]))),
                (
                    a(bson!([1])),
                    bson!({"$push": {"a": [2, 3]}}),
                    a(bson!([1, [2, 3]])),
                ),
                (
                    a(bson!([1])),
                    bson!({"$push": {"a": {"$each": [2, 3]}}}),
                    a(bson!([1, 2, 3])),
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$push": {"a": {"$each": []}}}),
                    a(bson!([])),
                ),
                (
                    a(bson!([1])),
                    bson!({"$push": {"a": {"$each": []}}}),
                    a(bson!([1])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$push": {"a": {"$each": [9], "$position": 0}}}),
                    a(bson!([9, 1, 2])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$push": {"a": {"$each": [9], "$position": 1}}}),
                    a(bson!([1, 9, 2])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$push": {"a": {"$each": [9], "$position": 10}}}),
                    a(bson!([1, 2, 9])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$push": {"a": {"$each": [9], "$position": -1}}}),
                    a(bson!([1, 2, 9, 3])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$push": {"a": {"$each": [9], "$position": -5}}}),
                    a(bson!([9, 1, 2])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$push": {"a": {"$each": [4], "$slice": -2}}}),
                    a(bson!([3, 4])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$push": {"a": {"$each": [4], "$slice": 2}}}),
                    a(bson!([1, 2])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$push": {"a": {"$each": [], "$slice": 0}}}),
                    a(bson!([])),
                ),
                (
                    a(bson!([3, 1])),
                    bson!({"$push": {"a": {"$each": [2], "$sort": 1}}}),
                    a(bson!([1, 2, 3])),
                ),
                (
                    a(bson!([3, 1])),
                    bson!({"$push": {"a": {"$each": [2], "$sort": -1, "$slice": 2}}}),
                    a(bson!([3, 2])),
                ),
                (
                    a(bson!([{"x": 1, "y": 1}, {"x": 3}])),
                    bson!({"$push": {"a": {"$each": [{"x": 2}], "$sort": {"x": -1}}}}),
                    a(bson!([{"x": 3}, {"x": 2}, {"x": 1, "y": 1}])),
                ),
                (
                    a(bson!([{"s": {"v": 2}}, {"s": {"v": 1}}])),
                    bson!({"$push": {"a": {"$each": [], "$sort": {"s.v": 1}}}}),
                    a(bson!([{"s": {"v": 1}}, {"s": {"v": 2}}])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$addToSet": {"a": 2}}),
                    a(bson!([1, 2])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$addToSet": {"a": 2.0}}),
                    a(bson!([1, 2])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$addToSet": {"a": 3}}),
                    a(bson!([1, 2, 3])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$addToSet": {"a": {"$each": [2, 3, 3, 4]}}}),
                    a(bson!([1, 2, 3, 4])),
                ),
                (
                    a(bson!([{"x": 1}])),
                    bson!({"$addToSet": {"a": {"x": 1}}}),
                    a(bson!([{"x": 1}])),
                ),
                (
                    a(bson!([1])),
                    bson!({"$addToSet": {"a": [1]}}),
                    a(bson!([1, [1]])),
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$addToSet": {"a": {"$each": [1, 1]}}}),
                    a(bson!([1])),
                ),
            ],
            None,
            None,
        );
        check_err(
            &[
                (a(bson!(5)), bson!({"$push": {"a": 1}}), 2, "The field 'a' must be an array but is of type int in document {_id: 1}"),
                (
                    doc! {"_id": 1, "x": {"a": "s"}},
                    bson!({"$push": {"x.a": 1}}),
                    2,
                    "The field 'x.a' must be an array but is of type string in document {_id: 1}",
                ),
                (a(bson!(5)), bson!({"$addToSet": {"a": 1}}), 2, "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": 1}}}), 2, "The argument to $each in $push must be an array but it was of type: int"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": [], "$foo": 1}}}), 2, "Unrecognized clause in $push: $foo"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": [], "$slice": "x"}}}), 2, "The value for $slice must be an integer value but was given type: string"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": [], "$position": 1.5}}}), 2, "The value for $position must be an integer value, not of type: double"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": [], "$sort": 2}}}), 2, "The $sort element value must be either 1 or -1"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": [], "$sort": {}}}}), 2, "The $sort pattern is empty"),
                (a(bson!([])), bson!({"$push": {"a": {"$each": [], "$sort": "x"}}}), 2, "The $sort is invalid"),
                (a(bson!([])), bson!({"$addToSet": {"a": {"$each": 1}}}), 14, "The argument to $each in $addToSet must be an array but it was of type int"),
                (a(bson!([])), bson!({"$addToSet": {"a": {"$each": [], "x": 1}}}), 2, "Found unexpected fields after $each in $addToSet"),
            ],
            None,
            None,
        );
    }

    #[test]
    fn pop_pull_pull_all() {
        let a = |v: Bson| doc! {"_id": 1, "a": v};
        check(
            &[
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$pop": {"a": 1}}),
                    a(bson!([1, 2])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$pop": {"a": -1}}),
                    a(bson!([2, 3])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$pop": {"a": 1.0}}),
                    a(bson!([1, 2])),
                ),
                (a(bson!([])), bson!({"$pop": {"a": 1}}), a(bson!([]))),
                (doc! {"_id": 1}, bson!({"$pop": {"a": 1}}), doc! {"_id": 1}),
                (
                    a(bson!([1, 2, 3, 2])),
                    bson!({"$pull": {"a": 2}}),
                    a(bson!([1, 3])),
                ),
                (
                    a(bson!([1, 2, 3, 2])),
                    bson!({"$pull": {"a": 2.0}}),
                    a(bson!([1, 3])),
                ),
                (
                    a(bson!([1, 2, 3])),
                    bson!({"$pull": {"a": 9}}),
                    a(bson!([1, 2, 3])),
                ),
                (doc! {"_id": 1}, bson!({"$pull": {"a": 9}}), doc! {"_id": 1}),
                (
                    a(bson!([1, 2, 3, 4])),
                    bson!({"$pull": {"a": {"$gte": 3}}}),
                    a(bson!([1, 2])),
                ),
                (
                    a(bson!([1, 2, 3, 4])),
                    bson!({"$pull": {"a": {"$in": [1, 4]}}}),
                    a(bson!([2, 3])),
                ),
                (
                    a(bson!([{"x": 1, "y": 1}, {"x": 2}, 1])),
                    bson!({"$pull": {"a": {"x": 1}}}),
                    a(bson!([{"x": 2}, 1])),
                ),
                (
                    a(bson!([{"x": 1}, [1], 2])),
                    bson!({"$pull": {"a": {}}}),
                    a(bson!([[1], 2])),
                ),
                (
                    a(bson!([[1, 2], [3]])),
                    bson!({"$pull": {"a": [3]}}),
                    a(bson!([[1, 2]])),
                ),
                (
                    a(bson!([1, 2, 3, 1])),
                    bson!({"$pullAll": {"a": [1, 3]}}),
                    a(bson!([2])),
                ),
                (
                    a(bson!([1, 2])),
                    bson!({"$pullAll": {"a": []}}),
                    a(bson!([1, 2])),
                ),
            ],
            None,
            None,
        );
        check_err(
            &[
                (
                    a(bson!(5)),
                    bson!({"$pop": {"a": 1}}),
                    14,
                    "Path 'a' contains an element of non-array type 'int'",
                ),
                (
                    a(bson!([])),
                    bson!({"$pop": {"a": 2}}),
                    9,
                    "$pop expects 1 or -1, found: 2",
                ),
                (
                    a(bson!([])),
                    bson!({"$pop": {"a": "x"}}),
                    9,
                    "Expected a number in: a: \"x\"",
                ),
                (
                    a(bson!(5)),
                    bson!({"$pull": {"a": 1}}),
                    2,
                    "Cannot apply $pull to a non-array value",
                ),
                (
                    a(bson!(5)),
                    bson!({"$pullAll": {"a": [1]}}),
                    2,
                    "Cannot apply $pull to a non-array value",
                ),
                (
                    a(bson!([])),
                    bson!({"$pullAll": {"a": 1}}),
                    2,
                    "$pullAll requires an array argument but was given a int",
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn positional() {
        check(
            &[
                (
                    doc! {"_id": 1, "a": [1, 2, 3]},
                    bson!({"$set": {"a.$": 9}}),
                    doc! {"_id": 1, "a": [1, 9, 3]},
                ),
                (
                    doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
                    bson!({"$inc": {"a.$.b": 5}}),
                    doc! {"_id": 1, "a": [{"b": 1}, {"b": 7}]},
                ),
                (
                    doc! {"_id": 1, "a": [1, 2, 3]},
                    bson!({"$unset": {"a.$": 1}}),
                    doc! {"_id": 1, "a": [1, null, 3]},
                ),
                (
                    doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
                    bson!({"$set": {"a.$.c": 1, "a.0.c": 2}}),
                    doc! {"_id": 1, "a": [{"b": 1, "c": 2}, {"b": 2, "c": 1}]},
                ),
            ],
            None,
            Some(1),
        );
        check_err(
            &[(
                doc! {"_id": 1, "a": [1, 2]},
                bson!({"$set": {"a.$": 1, "a.1": 2}}),
                40,
                "Update created a conflict at 'a.1'",
            )],
            None,
            Some(1),
        );
        check_err(
            &[
                (
                    doc! {"_id": 1, "a": [1, 2]},
                    bson!({"$set": {"a.$": 1}}),
                    2,
                    "The positional operator did not find the match needed from the query.",
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"$": 1}}),
                    2,
                    "Cannot have positional (i.e. '$') element in the first position",
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a.$.b.$": 1}}),
                    2,
                    "Too many positional (i.e. '$') elements found in path 'a.$.b.$'",
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn all_positional() {
        check(
            &[
                (
                    doc! {"_id": 1, "a": [1, 2]},
                    bson!({"$inc": {"a.$[]": 1}}),
                    doc! {"_id": 1, "a": [2, 3]},
                ),
                (
                    doc! {"_id": 1, "a": []},
                    bson!({"$inc": {"a.$[]": 1}}),
                    doc! {"_id": 1, "a": []},
                ),
                (
                    doc! {"_id": 1, "a": [{"b": 1}, {}]},
                    bson!({"$set": {"a.$[].b": 5}}),
                    doc! {"_id": 1, "a": [{"b": 5}, {"b": 5}]},
                ),
                (
                    doc! {"_id": 1, "a": [[1, 2], [3]]},
                    bson!({"$inc": {"a.$[].$[]": 10}}),
                    doc! {"_id": 1, "a": [[11, 12], [13]]},
                ),
                (
                    doc! {"_id": 1, "a": [{"b": [1]}, {"b": [2]}]},
                    bson!({"$push": {"a.$[].b": 0}}),
                    doc! {"_id": 1, "a": [{"b": [1, 0]}, {"b": [2, 0]}]},
                ),
            ],
            None,
            None,
        );
        check_err(
            &[
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a.$[]": 1}}),
                    2,
                    "The path 'a' must exist in the document in order to apply array updates.",
                ),
                (
                    doc! {"_id": 1, "x": {}},
                    bson!({"$set": {"x.a.$[].b": 1}}),
                    2,
                    "The path 'x.a' must exist in the document in order to apply array updates.",
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"$set": {"a.$[]": 1}}),
                    2,
                    "Cannot apply array updates to non-array element a: 1",
                ),
                (
                    doc! {"_id": 1, "a": [1, {}]},
                    bson!({"$set": {"a.$[].b": 1}}),
                    28,
                    "Cannot create field 'b' in element {0: 1}",
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"$[]": 1}}),
                    2,
                    "Cannot have array filter identifier",
                ),
                (
                    doc! {"_id": 1, "a": [1]},
                    bson!({"$set": {"a.$[]": 1, "a.0": 2}}),
                    40,
                    "Updating the path 'a.0' would create a conflict at 'a'",
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn filtered_positional() {
        let gt1 = [doc! {"x": {"$gt": 1}}];
        check(
            &[
                (
                    doc! {"_id": 1, "a": [1, 2, 3]},
                    bson!({"$set": {"a.$[x]": 0}}),
                    doc! {"_id": 1, "a": [1, 0, 0]},
                ),
                (
                    doc! {"_id": 1, "a": [0, 1]},
                    bson!({"$set": {"a.$[x]": 0}}),
                    doc! {"_id": 1, "a": [0, 1]},
                ),
            ],
            Some(&gt1),
            None,
        );
        let by_field = [doc! {"e.k": "b"}];
        check(
            &[(
                doc! {"_id": 1, "a": [{"k": "a", "n": 1}, {"k": "b", "n": 1}]},
                bson!({"$inc": {"a.$[e].n": 1}}),
                doc! {"_id": 1, "a": [{"k": "a", "n": 1}, {"k": "b", "n": 2}]},
            )],
            Some(&by_field),
            None,
        );
        let nested = [doc! {"i.v": {"$gte": 2}}, doc! {"j": 1}];
        check(
            &[(
                doc! {"_id": 1, "a": [{"v": 1, "w": [1, 2]}, {"v": 2, "w": [1, 2, 1]}]},
                bson!({"$set": {"a.$[i].w.$[j]": 0}}),
                doc! {"_id": 1, "a": [{"v": 1, "w": [1, 2]}, {"v": 2, "w": [0, 2, 0]}]},
            )],
            Some(&nested),
            None,
        );
        check_err(
            &[
                (
                    doc! {"_id": 1, "a": [1]},
                    bson!({"$set": {"a.$[y]": 0}}),
                    2,
                    "No array filter found for identifier 'y' in path 'a.$[y]'",
                ),
                (
                    doc! {"_id": 1, "a": [1]},
                    bson!({"$set": {"a.$[]": 0}}),
                    9,
                    "The array filter for identifier 'x' was not used in the update",
                ),
                (
                    doc! {"_id": 1},
                    bson!({"$set": {"a.$[x]": 0}}),
                    2,
                    "The path 'a' must exist in the document in order to apply array updates.",
                ),
                (
                    doc! {"_id": 1, "a": [1, 2]},
                    bson!({"$set": {"a.$[x]": 0, "a.$[]": 1}}),
                    40,
                    "Update created a conflict at 'a.1'",
                ),
            ],
            Some(&gt1),
            None,
        );
        for (filters, code, msg) in [
            (
                vec![doc! {}],
                9,
                "Cannot use an expression without a top-level field name in arrayFilters",
            ),
            (
                vec![doc! {"x": 1, "y": 1}],
                9,
                "Expected a single top-level field name, found 'x' and 'y'",
            ),
            (
                vec![doc! {"X": 1}],
                2,
                "must be an alphanumeric string beginning with a lowercase letter, found 'X'",
            ),
            (
                vec![doc! {"x": 1}, doc! {"x.a": 1}],
                9,
                "Found multiple array filters with the same top-level field name x",
            ),
        ] {
            let e = UpdateSpec::parse(&bson!({"$set": {"a.$[x]": 1}}), Some(&filters)).unwrap_err();
            assert_eq!(
                (e.code, e.message.contains(msg)),
                (code, true),
                "{filters:?}: {e}"
            );
        }
    }

    #[test]
    fn parse_and_path_errors() {
        check_err(
            &[
                (doc! {"_id": 1}, bson!({"$foo": {"a": 1}}), 9, "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array"),
                (doc! {"_id": 1}, bson!({"$set": {"a": 1}, "b": 2}), 9, "Unknown modifier: b."),
                (doc! {"_id": 1}, bson!({"$set": 1}), 9, "Modifiers operate on fields but we found type int instead"),
                (doc! {"_id": 1}, bson!({"$set": {"a": 1}, "$inc": {"a.b": 1}}), 40, "Updating the path 'a.b' would create a conflict at 'a'"),
                (doc! {"_id": 1}, bson!({"$set": {"a.b": 1}, "$inc": {"a": 1}}), 40, "Updating the path 'a' would create a conflict at 'a'"),
                (doc! {"_id": 1}, bson!({"$set": {"a": 1}, "$unset": {"a": 1}}), 40, "Updating the path 'a' would create a conflict at 'a'"),
                (doc! {"_id": 1}, bson!({"$set": {"": 1}}), 56, "An empty update path is not valid."),
                (doc! {"_id": 1}, bson!({"$set": {"a..b": 1}}), 56, "The update path 'a..b' contains an empty field name"),
                (doc! {"_id": 1}, bson!({"$set": {"$x": 1}}), 52, "The dollar ($) prefixed field '$x'"),
                (doc! {"_id": 1}, bson!({"$set": {"_id": 2}}), 66, "Performing an update on the path '_id' would modify the immutable field '_id'"),
                (doc! {"_id": {"a": 1}}, bson!({"$set": {"_id.a": 2}}), 66, "Performing an update on the path '_id.a' would modify the immutable field '_id'"),
                (doc! {"_id": 1}, bson!({"$unset": {"_id": 1}}), 66, "would modify the immutable field '_id'"),
                (doc! {"_id": 1, "a": 1}, bson!({"$set": {"a.b": 1}}), 28, "Cannot create field 'b' in element {a: 1}"),
                (doc! {"_id": 1, "a": null}, bson!({"$set": {"a.b.c": 1}}), 28, "Cannot create field 'b' in element {a: null}"),
                (doc! {"_id": 1, "a": [1, 2]}, bson!({"$set": {"a.b": 1}}), 28, "Cannot create field 'b' in element {a: [ 1, 2 ]}"),
                (doc! {"_id": 1, "a": {"b": "s"}}, bson!({"$inc": {"a.b.c": 1}}), 28, "Cannot create field 'c' in element {b: \"s\"}"),
                (doc! {"_id": 1}, bson!(1), 9, "Update argument must be either an object or an array"),
            ],
            None,
            None,
        );
        // A failed update leaves the document as it was.
        let spec = UpdateSpec::parse(&bson!({"$set": {"a": 1, "b.c": 1}}), None).unwrap();
        let mut d = doc! {"_id": 1, "b": 5};
        assert!(spec.apply(&mut d, &UpdateContext::new(now())).is_err());
        assert_eq!(d, doc! {"_id": 1, "b": 5});
    }

    #[test]
    fn replacement() {
        check(
            &[
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"b": 2}),
                    doc! {"_id": 1, "b": 2},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"b": 2, "_id": 1}),
                    doc! {"b": 2, "_id": 1},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!({"a": 1}),
                    doc! {"_id": 1, "a": 1},
                ),
                (doc! {"_id": 1, "a": 1}, bson!({}), doc! {"_id": 1}),
            ],
            None,
            None,
        );
        check_err(
            &[
                (
                    doc! {"_id": 1},
                    bson!({"_id": 2}),
                    66,
                    "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2",
                ),
                (doc! {"_id": 1}, bson!({"a": 1, "$set": {"b": 1}}), 52, "The dollar ($) prefixed field '$set' in '$set' is not allowed"),
                (doc! {"_id": 1}, bson!({"_id": [1]}), 53, "The '_id' value cannot be of type array"),
            ],
            None,
            None,
        );
        assert!(UpdateSpec::parse(&bson!({"a": 1}), None)
            .unwrap()
            .is_replacement());
        assert!(!UpdateSpec::parse(&bson!({"$set": {"a": 1}}), None)
            .unwrap()
            .is_replacement());
    }

    #[test]
    fn upsert() {
        let seed = upsert_seed(&doc! {
            "a": 1, "b.c": 2, "$and": [{"d": 3}, {"e": {"$gt": 1}}], "f": {"$eq": 4, "$lt": 9},
            "g": {"$in": [5]}, "h": {"$in": [1, 2]}, "_id": 7, "$or": [{"i": 1}, {"j": 1}], "k": {"x": 1},
        })
        .unwrap();
        assert!(
            identical_docs(
                &seed,
                &doc! {"_id": 7, "a": 1, "b": {"c": 2}, "d": 3, "f": 4, "g": 5, "k": {"x": 1}}
            ),
            "{seed}"
        );
        assert_eq!(
            upsert_seed(&doc! {"a": 1, "$and": [{"a": 2}]})
                .unwrap_err()
                .code,
            54
        );
        let e = upsert_seed(&doc! {"a": 1, "a.b": 2}).unwrap_err();
        assert_eq!(
            e.message,
            "cannot infer query fields to set, both paths 'a' and 'a.b' are matched"
        );

        let spec = UpdateSpec::parse(
            &bson!({"$set": {"x": 1}, "$setOnInsert": {"created": true}, "$inc": {"n": 1}}),
            None,
        )
        .unwrap();
        let d = spec
            .upsert_document(&doc! {"_id": 3, "q": "v"}, now())
            .unwrap();
        assert!(
            identical_docs(
                &d,
                &doc! {"_id": 3, "q": "v", "created": true, "n": 1, "x": 1}
            ),
            "{d}"
        );

        let d = spec.upsert_document(&doc! {"q": "v"}, now()).unwrap();
        assert!(
            matches!(d.iter().next(), Some((k, Bson::ObjectId(_))) if k == "_id"),
            "{d}"
        );
        assert_eq!(d.get("created"), Some(&Bson::Boolean(true)));

        // $set of _id is allowed on insert unless the query fixed it.
        let spec = UpdateSpec::parse(&bson!({"$set": {"_id": 9, "a": 1}}), None).unwrap();
        assert!(identical_docs(
            &spec.upsert_document(&doc! {"a": 0}, now()).unwrap(),
            &doc! {"_id": 9, "a": 1}
        ));
        assert_eq!(
            spec.upsert_document(&doc! {"_id": 1}, now())
                .unwrap_err()
                .code,
            66
        );

        let spec = UpdateSpec::parse(&bson!({"y": 1}), None).unwrap();
        let d = spec
            .upsert_document(&doc! {"_id": 5, "x": 1}, now())
            .unwrap();
        assert!(identical_docs(&d, &doc! {"_id": 5, "y": 1}), "{d}");

        let spec = UpdateSpec::parse(&bson!({"$set": {"a.$": 1}}), None).unwrap();
        assert_eq!(
            spec.upsert_document(&doc! {"a": 1}, now())
                .unwrap_err()
                .code,
            2
        );
    }

    #[test]
    fn pipeline() {
        check(
            &[
                (
                    doc! {"_id": 1, "a": 5},
                    bson!([{"$set": {"b": "$a"}}]),
                    doc! {"_id": 1, "a": 5, "b": 5},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!([{"$addFields": {"c.d": {"$literal": 1}}}]),
                    doc! {"_id": 1, "a": 5, "c": {"d": 1}},
                ),
                (
                    doc! {"_id": 1, "a": {"x": 1}},
                    bson!([{"$set": {"a": {"y": "$a.x"}}}]),
                    doc! {"_id": 1, "a": {"x": 1, "y": 1}},
                ),
                (
                    doc! {"_id": 1, "a": 5, "b": 1},
                    bson!([{"$unset": ["a"]}]),
                    doc! {"_id": 1, "b": 1},
                ),
                (
                    doc! {"_id": 1, "a": 5, "b": 1},
                    bson!([{"$project": {"a": 1}}]),
                    doc! {"_id": 1, "a": 5},
                ),
                (
                    doc! {"_id": 1, "a": 5, "b": 1},
                    bson!([{"$project": {"a": 0}}]),
                    doc! {"_id": 1, "b": 1},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!([{"$replaceWith": {"x": "$a"}}]),
                    doc! {"_id": 1, "x": 5},
                ),
                (
                    doc! {"_id": 1, "a": {"z": 2}},
                    bson!([{"$replaceRoot": {"newRoot": "$a"}}]),
                    doc! {"_id": 1, "z": 2},
                ),
                (
                    doc! {"_id": 1, "a": 5},
                    bson!([{"$set": {"a": 5}}]),
                    doc! {"_id": 1, "a": 5},
                ),
                (doc! {"_id": 1, "a": 5}, bson!([]), doc! {"_id": 1, "a": 5}),
                (
                    doc! {"_id": 1},
                    bson!([{"$set": {"t": "$$NOW"}}]),
                    doc! {"_id": 1, "t": now()},
                ),
                (
                    doc! {"_id": 1, "a": 1},
                    bson!([{"$replaceWith": {"b": 2}}]),
                    doc! {"_id": 1, "b": 2},
                ),
            ],
            None,
            None,
        );
        check_err(
            &[
                (
                    doc! {"_id": 1},
                    bson!([{"$match": {}}]),
                    72,
                    "$match is not allowed to be used within an update",
                ),
                (
                    doc! {"_id": 1},
                    bson!([{"$set": {"_id": 2}}]),
                    66,
                    "was found to have been altered to _id: 2",
                ),
                (
                    doc! {"_id": 1},
                    bson!([{"$set": {"a": 1}, "$unset": "b"}]),
                    40323,
                    "exactly one field",
                ),
                (
                    doc! {"_id": 1},
                    bson!([{"$replaceWith": 1}]),
                    40228,
                    "'replacement document' must evaluate to an object",
                ),
            ],
            None,
            None,
        );
    }

    #[test]
    fn spec_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<UpdateSpec>();
    }

    #[test]
    fn field_order_and_padding() {
        check(
            &[
                // Children apply in string order: "10" pads first, then "9.x" finds null.
                (
                    doc! {"_id": 1, "a": []},
                    bson!({"$set": {"a.3": 1, "a.1.x": 2}}),
                    doc! {"_id": 1, "a": [null, {"x": 2}, null, 1]},
                ),
                (
                    doc! {"_id": 1, "z": 1, "b": 1},
                    bson!({"$set": {"y": 1, "b": 2, "c": 3}}),
                    doc! {"_id": 1, "z": 1, "b": 2, "c": 3, "y": 1},
                ),
                (
                    doc! {"_id": 1, "a": [1, 2]},
                    bson!({"$unset": {"a.$[]": 1}}),
                    doc! {"_id": 1, "a": [null, null]},
                ),
            ],
            None,
            None,
        );
        check_err(
            &[(
                doc! {"_id": 1, "a": []},
                bson!({"$set": {"a.10": 1, "a.9.x": 2}}),
                28,
                "Cannot create field 'x' in element {9: null}",
            )],
            None,
            None,
        );
    }

    #[test]
    fn decimal_arithmetic() {
        let cases = [
            ("1", "2", "3", "2"),
            ("0.1", "0.2", "0.3", "0.02"),
            ("-5", "3", "-2", "-15"),
            ("1E+3", "1", "1001", "1E+3"),
            (
                "9999999999999999999999999999999999",
                "1",
                "1.000000000000000000000000000000000E+34",
                "9999999999999999999999999999999999",
            ),
            ("Infinity", "1", "Infinity", "Infinity"),
            ("NaN", "1", "NaN", "NaN"),
        ];
        for (a, b, sum, prod) in cases {
            let (x, y) = (Num::of(&dec(a)).unwrap(), Num::of(&dec(b)).unwrap());
            assert_eq!(x.add(y).unwrap(), dec(sum), "{a} + {b}");
            assert_eq!(x.mul(y).unwrap(), dec(prod), "{a} * {b}");
        }
        // A double joins decimal arithmetic rounded to 15 significant digits.
        assert_eq!(
            Num::of(&dec("1")).unwrap().add(Num::F64(0.1)).unwrap(),
            dec("1.100000000000000")
        );
    }
}
