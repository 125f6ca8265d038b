//! Update operators, replacement and upsert (owner: update helper).
//!
//! An update is parsed once into an [`UpdateSpec`] and applied to many documents. Operator
//! updates follow mongod's `UpdateNode` design (src/mongo/db/update): every path of every
//! operator is merged into one tree, which is where conflicting paths are detected at parse
//! time; the tree is then walked against the document with the children of each object node
//! applied in lexicographic field order. That walk order is observable: fields created by
//! one update are appended in sorted order, exactly like mongod.

// MongoError is the workspace-wide error type; boxing it is a crate-wide decision.

use bson::{Bson, DateTime, Document};

use crate::agg::Pipeline;
use crate::expr::{type_name, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

mod apply;
mod array;
mod change;
#[cfg(test)]
mod describe_tests;
mod description;
mod diff_calc;
mod diff_tree;
mod log;
mod number;
mod parse;
mod pipeline;
mod replacement;
#[cfg(test)]
mod tests;
mod tree;
mod values;

pub use self::description::{UpdateChange, UpdateDescription};
pub use self::parse::MODIFIERS;

use self::apply::create_at;
use self::pipeline::{apply_pipeline, parse_pipeline};
use self::replacement::{apply_replacement, validate_id, validate_replacement, with_id_first};
use self::tree::ModifierUpdate;
use self::values::same_value;

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
