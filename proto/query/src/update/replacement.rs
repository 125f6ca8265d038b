//! Replacement updates: a whole new document, keeping `_id`.

use bson::{Bson, Document};

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoError, MongoResult};

use super::values::{fmt_elem, identical_docs, same_value};

pub(super) fn validate_replacement(d: &Document) -> MongoResult<()> {
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

pub(super) fn validate_id(id: &Bson) -> MongoResult<()> {
    match id {
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined => Err(MongoError::new(
            ErrorCode::InvalidIdField,
            format!("The '_id' value cannot be of type {}", type_name(id)),
        )),
        _ => Ok(()),
    }
}

pub(super) fn apply_replacement(r: &Document, doc: &mut Document) -> MongoResult<bool> {
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
pub(super) fn keep_id(original: &Document, new_doc: &mut Document) -> MongoResult<()> {
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

pub(super) fn with_id_first(doc: Document, id: Bson) -> Document {
    let mut out = Document::new();
    out.insert("_id", id);
    for (k, v) in doc {
        if k != "_id" {
            out.insert(k, v);
        }
    }
    out
}
