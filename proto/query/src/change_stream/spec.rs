//! `$changeStream`'s options and where a stream may run, checked as MongoDB checks them,
//! the same on routers and shards.

use bson::{Bson, Document};

use super::token::Token;
use crate::expr::type_name;
use crate::{ErrorCode, MongoError, MongoResult};

/// What an update event carries as `fullDocument`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullDocument {
    Default,
    UpdateLookup,
    WhenAvailable,
    Required,
}

/// What an event carries as `fullDocumentBeforeChange`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

/// Where a stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// After everything applied when it opens.
    Now,
    /// After the event of `resumeAfter`.
    ResumeAfter(Token),
    /// After the event of `startAfter`, which may be an `invalidate`.
    StartAfter(Token),
    /// At `startAtOperationTime`, that time's events included.
    At(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub full_document: FullDocument,
    pub before_change: BeforeChange,
    pub start: Start,
    pub all_for_cluster: bool,
    pub expanded: bool,
}

/// Which events a stream watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Collection { db: String, coll: String },
    Database(String),
    Cluster,
}

/// The stages MongoDB allows after `$changeStream`.
const ALLOWED_AFTER: [&str; 8] = [
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
    "$redact",
];

impl Spec {
    /// Parses `{$changeStream: {...}}`'s value.
    pub fn parse(value: &Bson) -> MongoResult<Spec> {
        let Bson::Document(d) = value else {
            return Err(MongoError::new(
                ErrorCode::TypeMismatch,
                format!(
                    "the $changeStream stage takes an object, not {}",
                    type_name(value)
                ),
            ));
        };
        let mut spec = Spec {
            full_document: FullDocument::Default,
            before_change: BeforeChange::Off,
            start: Start::Now,
            all_for_cluster: false,
            expanded: false,
        };
        let (mut resume, mut start_after, mut at) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "fullDocument" => spec.full_document = full_document(v)?,
                "fullDocumentBeforeChange" => spec.before_change = before_change(v)?,
                "resumeAfter" => resume = Some(Token::parse(v)?),
                "startAfter" => start_after = Some(Token::parse(v)?),
                "startAtOperationTime" => match v {
                    Bson::Timestamp(t) => at = Some(((t.time as u64) << 32) | t.increment as u64),
                    other => return Err(wrong_type(k, other, "timestamp")),
                },
                "allChangesForCluster" => spec.all_for_cluster = flag(k, v)?,
                "showExpandedEvents" => spec.expanded = flag(k, v)?,
                // Internal to MongoDB's own routers: accepted only as what it means here.
                "showMigrationEvents" | "showSystemEvents" if !flag(k, v)? => {}
                _ => {
                    return Err(MongoError::new(
                        ErrorCode::UnknownField,
                        format!("BSON field '$changeStream.{k}' is an unknown field."),
                    ))
                }
            }
        }
        spec.start =
            match (resume, start_after, at) {
                (Some(_), Some(_), _) => return Err(MongoError::new(
                    ErrorCode::ChangeStreamBothResumeAndStartAfter,
                    "Do not specify both 'startAfter' and 'resumeAfter' in a $changeStream stage.",
                )),
                (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                    return Err(MongoError::new(
                        ErrorCode::ChangeStreamStartBothTokenAndTime,
                        "Only one type of resume option is allowed, but multiple were found.",
                    ))
                }
                (Some(t), None, None) => {
                    if t.event.as_ref().is_some_and(|e| e.invalidate) {
                        return Err(MongoError::new(
                            ErrorCode::InvalidResumeToken,
                            "Attempting to resume a change stream using 'resumeAfter' is not \
                         allowed from an invalidate notification.",
                        ));
                    }
                    Start::ResumeAfter(t)
                }
                (None, Some(t), None) => Start::StartAfter(t),
                (None, None, Some(t)) => Start::At(t),
                (None, None, None) => Start::Now,
            };
        Ok(spec)
    }

    /// The events the stream watches, for `aggregate` on `coll` (None: `aggregate: 1`)
    /// in `db`.
    pub fn scope(&self, db: &str, coll: Option<&str>) -> MongoResult<Scope> {
        let invalid = |why: String| Err(MongoError::new(ErrorCode::InvalidNamespace, why));
        if self.all_for_cluster {
            if db != "admin" || coll.is_some() {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    "A $changeStream with 'allChangesForCluster:true' may only be opened on \
                     the 'admin' database, and with no collection name",
                ));
            }
            return Ok(Scope::Cluster);
        }
        if matches!(db, "admin" | "config" | "local") {
            return invalid(format!(
                "$changeStream may not be opened on the internal {db} database"
            ));
        }
        match coll {
            None => Ok(Scope::Database(db.to_string())),
            Some(c) if c.starts_with("system.") => invalid(format!(
                "$changeStream may not be opened on the internal {db}.{c} collection"
            )),
            Some(c) => Ok(Scope::Collection {
                db: db.to_string(),
                coll: c.to_string(),
            }),
        }
    }
}

/// Checks a pipeline whose first stage is `$changeStream`: every other stage must be one
/// MongoDB allows after it, and no second `$changeStream`.
pub fn check_pipeline(stages: &[Document]) -> MongoResult<()> {
    for stage in stages.iter().skip(1) {
        let name = stage.keys().next().map(String::as_str).unwrap_or("");
        if name == "$changeStream" {
            return Err(not_first());
        }
        if !ALLOWED_AFTER.contains(&name) {
            return Err(MongoError::new(
                ErrorCode::IllegalOperation,
                format!("{name} is not permitted in a $changeStream pipeline"),
            ));
        }
    }
    Ok(())
}

/// Whether `stages` open a change stream: `$changeStream` first. A `$changeStream`
/// anywhere else is refused.
pub fn opens_stream(stages: &[Document]) -> MongoResult<bool> {
    let first = stages
        .first()
        .is_some_and(|s| s.contains_key("$changeStream"));
    if !first && stages.iter().any(|s| s.contains_key("$changeStream")) {
        return Err(not_first());
    }
    Ok(first)
}

fn not_first() -> MongoError {
    MongoError::new(
        ErrorCode::DocumentsNotFirst,
        "$changeStream is only valid as the first stage in a pipeline",
    )
}

fn flag(k: &str, v: &Bson) -> MongoResult<bool> {
    match v {
        Bson::Boolean(b) => Ok(*b),
        other => Err(wrong_type(k, other, "bool")),
    }
}

fn wrong_type(k: &str, v: &Bson, expected: &str) -> MongoError {
    MongoError::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field '$changeStream.{k}' is the wrong type '{}', expected type '{expected}'",
            type_name(v)
        ),
    )
}

fn full_document(v: &Bson) -> MongoResult<FullDocument> {
    Ok(match v.as_str() {
        Some("default") => FullDocument::Default,
        Some("updateLookup") => FullDocument::UpdateLookup,
        Some("whenAvailable") => FullDocument::WhenAvailable,
        Some("required") => FullDocument::Required,
        _ => return Err(bad_enum("fullDocument", v)),
    })
}

fn before_change(v: &Bson) -> MongoResult<BeforeChange> {
    Ok(match v.as_str() {
        Some("off") => BeforeChange::Off,
        Some("whenAvailable") => BeforeChange::WhenAvailable,
        Some("required") => BeforeChange::Required,
        _ => return Err(bad_enum("fullDocumentBeforeChange", v)),
    })
}

fn bad_enum(k: &str, v: &Bson) -> MongoError {
    MongoError::new(
        ErrorCode::BadValue,
        format!("Enumeration value '{v}' for field '$changeStream.{k}' is not a valid value."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(v: Bson) -> i32 {
        Spec::parse(&v).unwrap_err().code
    }

    #[test]
    fn options_are_checked_with_mongodbs_codes() {
        let tok = Token::high_water_mark(5 << 32).to_document();
        assert_eq!(code(Bson::Int32(1)), ErrorCode::TypeMismatch as i32);
        assert_eq!(code(doc! {"x": 1}.into()), ErrorCode::UnknownField as i32);
        assert_eq!(
            code(doc! {"resumeAfter": tok.clone(), "startAfter": tok.clone()}.into()),
            ErrorCode::ChangeStreamBothResumeAndStartAfter as i32
        );
        assert_eq!(
            code(doc! {"resumeAfter": tok.clone(), "startAtOperationTime": bson::Timestamp {time: 1, increment: 0}}.into()),
            ErrorCode::ChangeStreamStartBothTokenAndTime as i32
        );
        assert_eq!(
            code(doc! {"fullDocument": "all"}.into()),
            ErrorCode::BadValue as i32
        );
        let s =
            Spec::parse(&doc! {"fullDocument": "updateLookup", "startAfter": tok}.into()).unwrap();
        assert_eq!(s.full_document, FullDocument::UpdateLookup);
        assert!(matches!(s.start, Start::StartAfter(_)));
    }

    #[test]
    fn scope_and_pipeline_rules() {
        let s = Spec::parse(&doc! {}.into()).unwrap();
        assert_eq!(
            s.scope("admin", None).unwrap_err().code,
            ErrorCode::InvalidNamespace as i32
        );
        assert_eq!(
            s.scope("db", Some("system.x")).unwrap_err().code,
            ErrorCode::InvalidNamespace as i32
        );
        assert_eq!(s.scope("db", None).unwrap(), Scope::Database("db".into()));
        let all = Spec::parse(&doc! {"allChangesForCluster": true}.into()).unwrap();
        assert_eq!(
            all.scope("db", None).unwrap_err().code,
            ErrorCode::InvalidOptions as i32
        );
        assert_eq!(all.scope("admin", None).unwrap(), Scope::Cluster);
        let cs = doc! {"$changeStream": {}};
        assert!(check_pipeline(&[cs.clone(), doc! {"$match": {}}]).is_ok());
        assert_eq!(
            check_pipeline(&[cs.clone(), doc! {"$group": {"_id": 1}}])
                .unwrap_err()
                .code,
            ErrorCode::IllegalOperation as i32
        );
        assert_eq!(
            opens_stream(&[doc! {"$match": {}}, cs]).unwrap_err().code,
            ErrorCode::DocumentsNotFirst as i32
        );
    }
}
