//! Merging the replies of write commands (`insert`, `update`, `delete`) that went to
//! several shards, with every index mapped back to the client's batch.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use super::{count_value, number};

/// What the shards said, merged.
#[derive(Default)]
pub struct Merged {
    pub n: i64,
    /// `nModified`, for updates.
    pub n_modified: Option<i64>,
    pub upserted: Vec<Document>,
    pub write_errors: Vec<Document>,
    pub write_concern_error: Option<Document>,
}

impl Merged {
    /// Adds a shard's reply for the statements at `indexes` of the client's batch.
    pub fn add(&mut self, reply: &Document, indexes: &[usize]) {
        self.n += number(reply, "n");
        if reply.contains_key("nModified") {
            *self.n_modified.get_or_insert(0) += number(reply, "nModified");
        }
        if let Ok(upserted) = reply.get_array("upserted") {
            for u in upserted.iter().filter_map(Bson::as_document) {
                let mut u = u.clone();
                let at = number(&u, "index") as usize;
                u.insert("index", indexes.get(at).copied().unwrap_or(at) as i32);
                self.upserted.push(u);
            }
        }
        if let Ok(errors) = reply.get_array("writeErrors") {
            for e in errors.iter().filter_map(Bson::as_document) {
                let mut e = e.clone();
                let at = number(&e, "index") as usize;
                let index = indexes.get(at).copied().unwrap_or(at);
                e.insert("index", index as i32);
                self.write_errors.push(e);
            }
        }
        if let Ok(wce) = reply.get_document("writeConcernError") {
            self.write_concern_error.get_or_insert_with(|| wce.clone());
        }
    }

    pub fn reply(mut self) -> Document {
        let mut out = doc! {"n": count_value(self.n)};
        if let Some(m) = self.n_modified {
            out.insert("nModified", count_value(m));
        }
        if !self.upserted.is_empty() {
            self.upserted.sort_by_key(|u| number(u, "index"));
            out.insert("upserted", self.upserted);
        }
        if !self.write_errors.is_empty() {
            self.write_errors.sort_by_key(|e| number(e, "index"));
            out.insert("writeErrors", self.write_errors);
        }
        if let Some(wce) = self.write_concern_error {
            out.insert("writeConcernError", wce);
        }
        out
    }
}

/// The statements of a write command (`documents`, `updates`, `deletes`).
pub fn statements(cmd: &mut Document, field: &str) -> MongoResult<Vec<Document>> {
    match cmd.remove(field) {
        Some(Bson::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Bson::Document(d) => Ok(d),
                _ => Err(MongoError::type_mismatch(format!(
                    "BSON field '{field}' must be an array of objects"
                ))),
            })
            .collect(),
        _ => Err(MongoError::failed_to_parse(format!(
            "BSON field '{field}' is missing or not an array"
        ))),
    }
}

/// A retryable write split over shards keeps each statement's place in the client's
/// batch as its statement id, so a retry of the whole batch finds every statement
/// recorded under the id it had, whichever shard ran it.
pub fn retryable_ids(sub: &mut Document, indexes: &[usize]) {
    if sub.contains_key("txnNumber") {
        let ids: Vec<i32> = indexes.iter().map(|&i| i as i32).collect();
        sub.insert("stmtIds", ids);
    }
}
