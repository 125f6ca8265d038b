//! `$out` and `$merge`: parsed here, performed by the caller (the shard), which asks
//! [`merge_document`] what to do with each result document.

use bson::{Bson, Document};

use super::{stage_docs, Nesting, NoCollections, Pipeline};
use crate::expr::{Expr, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

/// A pipeline's trailing write stage.
#[derive(Debug, Clone)]
pub enum OutputStage {
    /// `$out`: replace the target collection with the results. `db: None` = same database.
    Out { db: Option<String>, coll: String },
    /// `$merge`: merge the results into the target collection.
    Merge(MergeSpec),
}

/// A parsed `$merge` specification.
#[derive(Debug, Clone)]
pub struct MergeSpec {
    /// Target database; `None` = the aggregation's database.
    pub db: Option<String>,
    pub coll: String,
    /// Fields identifying the matching target document (default `["_id"]`).
    pub on: Vec<String>,
    /// Variables for a whenMatched pipeline (evaluated against the result document);
    /// `$$new` is always available.
    pub let_vars: Vec<(String, Expr)>,
    pub when_matched: WhenMatched,
    pub when_not_matched: WhenNotMatched,
}

#[derive(Debug, Clone)]
pub enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    Pipeline(Box<Pipeline>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

/// What the caller must do with one result document of a `$merge`.
#[derive(Debug, Clone, PartialEq)]
pub enum MergeAction {
    /// Insert this document (no match existed).
    Insert(Document),
    /// Replace the matched document with this one (its `_id` is the matched one's).
    Update(Document),
    /// Leave the target as it is.
    Nothing,
}

impl OutputStage {
    /// `$out` or `$merge`, which only a top-level pipeline may end with.
    pub(super) fn parse(name: &str, arg: &Bson, nesting: Nesting) -> MongoResult<OutputStage> {
        if nesting != Nesting::Top {
            let code = if nesting == Nesting::Facet {
                ErrorCode::NotAllowedInFacet
            } else {
                ErrorCode::NotAllowedInLookup
            };
            let msg = if nesting == Nesting::Facet {
                format!("{name} is not allowed to be used within a $facet stage")
            } else {
                format!("{name} is not allowed within a $lookup's sub-pipeline")
            };
            return Err(MongoError::new(code, msg));
        }
        if name == "$out" {
            parse_out(arg)
        } else {
            parse_merge(arg)
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            OutputStage::Out { .. } => "$out",
            OutputStage::Merge(_) => "$merge",
        }
    }

    /// The target and what the stage does to it.
    pub(crate) fn access(&self) -> super::CollectionAccess {
        match self {
            OutputStage::Out { db, coll } => super::CollectionAccess {
                db: db.clone(),
                coll: coll.clone(),
                access: super::Access::Replace,
            },
            OutputStage::Merge(m) => super::CollectionAccess {
                db: m.db.clone(),
                coll: m.coll.clone(),
                access: super::Access::Merge {
                    inserts: m.when_not_matched == WhenNotMatched::Insert,
                    updates: !matches!(m.when_matched, WhenMatched::Fail),
                },
            },
        }
    }
}

impl MergeSpec {
    /// The values of the `on` fields of `doc`, as the filter that finds its match.
    /// Each must be present and not null, undefined or an array.
    pub fn match_filter(&self, doc: &Document) -> MongoResult<Document> {
        let mut f = Document::new();
        for field in &self.on {
            let path: Vec<String> = field.split('.').map(str::to_string).collect();
            match super::project::get_nested(doc, &path) {
                Some(Bson::Null) | Some(Bson::Undefined) | Some(Bson::Array(_)) | None => {
                    return Err(MongoError::new(
                        ErrorCode::MergeOnFieldMissing,
                        format!("$merge write error: 'on' field '{field}' cannot be missing, null, undefined or an array"),
                    ))
                }
                Some(v) => {
                    f.insert(field.clone(), v.clone());
                }
            }
        }
        Ok(f)
    }
}

/// Applies `$merge`'s whenMatched/whenNotMatched rules to one result document `new`,
/// given the target document that matched it (if any).
pub fn merge_document(
    existing: Option<&Document>,
    new: &Document,
    spec: &MergeSpec,
) -> MongoResult<MergeAction> {
    let Some(existing) = existing else {
        return match spec.when_not_matched {
            WhenNotMatched::Insert => Ok(MergeAction::Insert(new.clone())),
            WhenNotMatched::Discard => Ok(MergeAction::Nothing),
            WhenNotMatched::Fail => Err(MongoError::new(
                ErrorCode::MergeStageNoMatchingDocument,
                "$merge could not find a matching document in the target collection for at least one document in the source collection",
            )),
        };
    };
    let keep_id = |mut d: Document| -> MongoResult<Document> {
        match (existing.get("_id"), d.get("_id")) {
            (Some(id), None) => {
                let mut out = Document::new();
                out.insert("_id", id.clone());
                out.extend(std::mem::take(&mut d));
                Ok(out)
            }
            (Some(a), Some(b)) if !crate::order::values_equal(a, b) => Err(MongoError::new(
                ErrorCode::ImmutableField,
                "$merge failed to update the matching document, did you attempt to modify the _id or the shard key?",
            )),
            _ => Ok(d),
        }
    };
    match &spec.when_matched {
        WhenMatched::Replace => Ok(MergeAction::Update(keep_id(new.clone())?)),
        WhenMatched::KeepExisting => Ok(MergeAction::Nothing),
        WhenMatched::Merge => {
            let mut merged = existing.clone();
            for (k, v) in new {
                merged.insert(k.clone(), v.clone());
            }
            Ok(MergeAction::Update(keep_id(merged)?))
        }
        WhenMatched::Fail => Err(MongoError::new(
            ErrorCode::DuplicateKey,
            "$merge with whenMatched: fail found an existing document with the same values for the 'on' field",
        )),
        WhenMatched::Pipeline(p) => {
            let mut vars = Variables::new();
            vars.set("new", Bson::Document(new.clone()));
            for (name, e) in &spec.let_vars {
                let v = e.eval(new, &vars)?;
                vars.set(name.clone(), if matches!(v, Bson::Undefined) { Bson::Null } else { v });
            }
            vars.pin_now();
            let mut out = p.run_with(vec![existing.clone()], &NoCollections, &vars)?;
            if out.len() != 1 {
                return Err(MongoError::internal("$merge whenMatched pipeline must produce exactly one document"));
            }
            Ok(MergeAction::Update(keep_id(out.pop().unwrap())?))
        }
    }
}

fn unknown(stage: &str, k: &str) -> MongoError {
    MongoError::new(
        ErrorCode::UnknownField,
        format!("BSON field '{stage}.{k}' is an unknown field."),
    )
}

fn wrong_type(stage: &str, k: &str, expected: &str) -> MongoError {
    MongoError::new(
        ErrorCode::TypeMismatch,
        format!("BSON field '{stage}.{k}' is the wrong type, expected type '{expected}'"),
    )
}

/// The target of `$out` or `$merge`: a valid collection, in a valid database if named.
fn check_target(db: Option<&str>, coll: &str) -> MongoResult<()> {
    if let Some(db) = db {
        wire::namespace::check_db(db)?;
    }
    wire::namespace::check_collection(coll)
}

fn parse_out(arg: &Bson) -> MongoResult<OutputStage> {
    match arg {
        Bson::String(c) => {
            wire::namespace::check_collection(c)?;
            Ok(OutputStage::Out {
                db: None,
                coll: c.clone(),
            })
        }
        Bson::Document(d) => {
            let (mut db, mut coll) = (None, None);
            for (k, v) in d {
                match (k.as_str(), v) {
                    ("db", Bson::String(s)) => db = Some(s.clone()),
                    ("coll", Bson::String(s)) => coll = Some(s.clone()),
                    ("db" | "coll", _) => return Err(wrong_type("$out", k, "string")),
                    ("timeseries", _) => {
                        return Err(MongoError::new(
                            ErrorCode::NotImplemented,
                            "$out to a time-series collection is not supported",
                        ))
                    }
                    _ => return Err(unknown("$out", k)),
                }
            }
            let coll = coll.ok_or_else(|| {
                MongoError::new(
                    ErrorCode::RequiredFieldMissing,
                    "BSON field '$out.coll' is missing but a required field",
                )
            })?;
            check_target(db.as_deref(), &coll)?;
            Ok(OutputStage::Out { db, coll })
        }
        other => Err(MongoError::new(
            ErrorCode::OutSpecInvalid,
            format!(
                "$out only supports a string or object argument, not {}",
                crate::expr::type_name(other)
            ),
        )),
    }
}

fn parse_merge(arg: &Bson) -> MongoResult<OutputStage> {
    let mut spec = MergeSpec {
        db: None,
        coll: String::new(),
        on: vec!["_id".to_string()],
        let_vars: Vec::new(),
        when_matched: WhenMatched::Merge,
        when_not_matched: WhenNotMatched::Insert,
    };
    match arg {
        Bson::String(c) => {
            wire::namespace::check_collection(c)?;
            spec.coll = c.clone();
            return Ok(OutputStage::Merge(spec));
        }
        Bson::Document(_) => {}
        other => {
            return Err(MongoError::new(
                ErrorCode::MergeSpecInvalid,
                format!(
                    "$merge only supports a string or object argument, not {}",
                    crate::expr::type_name(other)
                ),
            ))
        }
    }
    let Bson::Document(d) = arg else {
        unreachable!()
    };
    let mut into = None;
    let mut has_let = false;
    for (k, v) in d {
        match k.as_str() {
            "into" => into = Some(parse_into(v)?),
            "on" => spec.on = parse_on(v)?,
            "let" => {
                let Bson::Document(l) = v else {
                    return Err(wrong_type("$merge", k, "object"));
                };
                has_let = true;
                for (name, e) in l {
                    spec.let_vars.push((name.clone(), Expr::parse(e)?));
                }
            }
            "whenMatched" => spec.when_matched = parse_when_matched(k, v)?,
            "whenNotMatched" => spec.when_not_matched = parse_when_not_matched(k, v)?,
            _ => return Err(unknown("$merge", k)),
        }
    }
    let (db, coll) = into.ok_or_else(|| {
        MongoError::new(
            ErrorCode::RequiredFieldMissing,
            "BSON field '$merge.into' is missing but a required field",
        )
    })?;
    check_target(db.as_deref(), &coll)?;
    if has_let && !matches!(spec.when_matched, WhenMatched::Pipeline(_)) {
        return Err(MongoError::new(
            ErrorCode::MergeLetWithoutPipeline,
            "Cannot use 'let' variables with 'whenMatched' mode other than a pipeline",
        ));
    }
    spec.db = db;
    spec.coll = coll;
    Ok(OutputStage::Merge(spec))
}

/// `into`: a collection name, or `{db, coll}`.
fn parse_into(v: &Bson) -> MongoResult<(Option<String>, String)> {
    Ok(match v {
        Bson::String(c) => (None, c.clone()),
        Bson::Document(ns) => {
            let mut db = None;
            let mut coll = None;
            for (nk, nv) in ns {
                match (nk.as_str(), nv) {
                    ("db", Bson::String(s)) => db = Some(s.clone()),
                    ("coll", Bson::String(s)) => coll = Some(s.clone()),
                    _ => return Err(unknown("$merge.into", nk)),
                }
            }
            let coll = coll.ok_or_else(|| {
                MongoError::new(
                    ErrorCode::RequiredFieldMissing,
                    "BSON field '$merge.into.coll' is missing but a required field",
                )
            })?;
            (db, coll)
        }
        _ => {
            return Err(MongoError::new(
                ErrorCode::MergeIntoInvalid,
                format!(
                    "$merge 'into' field  must be either a string or an object, but found {}",
                    crate::expr::type_name(v)
                ),
            ))
        }
    })
}

/// `on`: the fields that identify a document, each once.
fn parse_on(v: &Bson) -> MongoResult<Vec<String>> {
    let fields: Vec<String> = match v {
        Bson::String(s) => vec![s.clone()],
        Bson::Array(a) if !a.is_empty() => a
            .iter()
            .map(|x| match x {
                Bson::String(s) => Ok(s.clone()),
                _ => Err(MongoError::new(
                    ErrorCode::MergeOnNotStrings,
                    "$merge 'on' array elements must be strings",
                )),
            })
            .collect::<MongoResult<_>>()?,
        Bson::Array(_) => {
            return Err(MongoError::new(
                ErrorCode::MergeOnEmpty,
                "If explicitly specifying $merge 'on', must include at least one field",
            ))
        }
        _ => {
            return Err(MongoError::new(
                ErrorCode::MergeOnInvalid,
                "$merge 'on' field  must be either a string or an array of strings",
            ))
        }
    };
    let mut seen = std::collections::HashSet::new();
    for f in &fields {
        crate::depth::check_path(f)?;
        if !seen.insert(f.clone()) {
            return Err(MongoError::new(
                ErrorCode::MergeOnDuplicateField,
                format!("Found a duplicate field '{f}'"),
            ));
        }
    }
    Ok(fields)
}

/// `whenMatched`: a mode, or an update pipeline of the stages an update allows.
fn parse_when_matched(k: &str, v: &Bson) -> MongoResult<WhenMatched> {
    Ok(match v {
        Bson::String(s) => match s.as_str() {
            "replace" => WhenMatched::Replace,
            "keepExisting" => WhenMatched::KeepExisting,
            "merge" => WhenMatched::Merge,
            "fail" => WhenMatched::Fail,
            other => {
                return Err(MongoError::bad_value(format!(
                "Enumeration value '{other}' for field '$merge.whenMatched' is not a valid value."
            )))
            }
        },
        Bson::Array(stages) => {
            let stages = stage_docs(
                stages,
                ErrorCode::TypeMismatch,
                "$merge whenMatched pipeline stages must be objects",
            )?;
            for s in &stages {
                let name = s.keys().next().map(String::as_str).unwrap_or("");
                if !matches!(
                    name,
                    "$addFields" | "$set" | "$project" | "$unset" | "$replaceRoot" | "$replaceWith"
                ) {
                    return Err(MongoError::new(
                        ErrorCode::InvalidOptions,
                        format!("{name} is not allowed to be used within an update"),
                    ));
                }
            }
            WhenMatched::Pipeline(Box::new(Pipeline::parse(&stages)?))
        }
        _ => return Err(wrong_type("$merge", k, "string or array")),
    })
}

/// `whenNotMatched`: `insert`, `discard` or `fail`.
fn parse_when_not_matched(k: &str, v: &Bson) -> MongoResult<WhenNotMatched> {
    Ok(match v {
        Bson::String(s) => match s.as_str() {
            "insert" => WhenNotMatched::Insert,
            "discard" => WhenNotMatched::Discard,
            "fail" => WhenNotMatched::Fail,
            other => {
                return Err(MongoError::bad_value(format!(
                    "Enumeration value '{other}' for field '$merge.whenNotMatched' is not a valid value."
                )))
            }
        },
        _ => return Err(wrong_type("$merge", k, "string")),
    })
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use super::*;
    use crate::agg::test_support::*;
    use crate::ErrorCode;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (
                bson!([{"$merge": {"into": "x", "whenMatched": "bogus"}}]),
                2,
            ),
            (bson!([{"$merge": {"into": "x", "bogus": 1}}]), 40415),
            (bson!([{"$merge": {"on": "a"}}]), 40414),
            (
                bson!([{"$merge": {"into": "x", "let": {"a": 1}, "whenMatched": "replace"}}]),
                51199,
            ),
            (bson!([{"$out": 1}]), 16990),
        ]);
    }

    fn merge_spec(stage: Bson) -> MergeSpec {
        let p = Pipeline::parse(&[doc! {"$merge": stage}]).unwrap();
        match p.output_stage() {
            Some(OutputStage::Merge(s)) => s.clone(),
            _ => panic!("merge expected"),
        }
    }

    #[test]
    fn merge_semantics() {
        let existing = doc! {"_id": 1, "a": 1, "b": 1};
        let new = doc! {"_id": 1, "b": 2, "c": 3};
        let spec = merge_spec(bson!("target"));
        assert_eq!(
            merge_document(Some(&existing), &new, &spec).unwrap(),
            MergeAction::Update(doc! {"_id": 1, "a": 1, "b": 2, "c": 3})
        );
        assert_eq!(
            merge_document(None, &new, &spec).unwrap(),
            MergeAction::Insert(new.clone())
        );

        let spec =
            merge_spec(bson!({"into": "t", "whenMatched": "replace", "whenNotMatched": "discard"}));
        assert_eq!(
            merge_document(Some(&existing), &new, &spec).unwrap(),
            MergeAction::Update(new.clone())
        );
        assert_eq!(
            merge_document(None, &new, &spec).unwrap(),
            MergeAction::Nothing
        );
        // replace keeps the matched _id when the new document has none (merge on other fields)
        assert_eq!(
            merge_document(Some(&existing), &doc! {"b": 9}, &spec).unwrap(),
            MergeAction::Update(doc! {"_id": 1, "b": 9})
        );
        assert_eq!(
            merge_document(Some(&existing), &doc! {"_id": 2}, &spec)
                .unwrap_err()
                .code,
            66
        );

        let spec = merge_spec(bson!({"into": "t", "whenMatched": "keepExisting"}));
        assert_eq!(
            merge_document(Some(&existing), &new, &spec).unwrap(),
            MergeAction::Nothing
        );

        let spec =
            merge_spec(bson!({"into": "t", "whenMatched": "fail", "whenNotMatched": "fail"}));
        assert_eq!(
            merge_document(Some(&existing), &new, &spec)
                .unwrap_err()
                .code,
            11000
        );
        assert_eq!(merge_document(None, &new, &spec).unwrap_err().code, 13113);

        let spec = merge_spec(bson!({"into": "t", "let": {"inc": "$c"}, "whenMatched": [
            {"$set": {"b": {"$add": ["$b", "$$new.b", "$$inc"]}}}
        ]}));
        assert_eq!(
            merge_document(Some(&existing), &new, &spec).unwrap(),
            MergeAction::Update(doc! {"_id": 1, "a": 1, "b": 6})
        );

        let spec = merge_spec(bson!({"into": "t", "whenMatched": [{"$replaceWith": "$$new"}]}));
        assert_eq!(
            merge_document(Some(&existing), &new, &spec).unwrap(),
            MergeAction::Update(new.clone())
        );
        let e = Pipeline::parse(&[
            doc! {"$merge": {"into": "t", "whenMatched": [{"$group": {"_id": null}}]}},
        ])
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidOptions as i32);
    }
}
