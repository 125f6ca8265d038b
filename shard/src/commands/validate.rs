//! `validate`: checks that a collection's indexes hold exactly the entries its documents
//! make, and answers in mongod's shape (`valid`, `keysPerIndex`, `indexDetails`,
//! `missingIndexEntries`, `extraIndexEntries`, `corruptRecords`, ...).
//!
//! It streams the tables a page at a time ([`each_row`]), so memory does not grow with
//! the collection; at most [`LISTED`] inconsistencies of each kind are listed (all are
//! counted):
//!
//! 1. Documents: each record must decode and sit under the key of its own `_id`; each
//!    index key computed from it (`write_path::entries`, as writes compute them) must be
//!    in the index table pointing at that record, else it is a missing entry. An index
//!    not marked multikey must get at most one key from each document.
//! 2. Index entries are counted. When an index holds more entries than the documents
//!    account for, it is read again and each entry whose record is absent or does not
//!    make that key is an extra entry. (Every expected key was found, so equal counts
//!    mean equal sets.)
//!
//! The collection's write lock is held exclusively throughout, as mongod's validate
//! holds its collection lock: on a primary nothing changes underneath. A secondary
//! applies replicated writes without that lock, so every inconsistency is read again
//! before it is reported. `full` is accepted; every validate here does all of the above
//! (mongod's full validation adds WiredTiger's verify of its files, which this does not
//! run).

use std::collections::BTreeSet;
use std::sync::Arc;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use query::keystring;
use storage::Engine;
use wire::MongoResult;

use super::args::{collection_name, existing_or, opt_bool};
use crate::catalog::keys::id_key;
use crate::catalog::{CollectionMeta, IndexMeta, KeyKind};
use crate::control::deadline::Deadline;
use crate::error::storage_to_mongo;
use crate::execution::scan::each_row;
use crate::execution::write_path::{decode_document, entries};
use crate::node::Ctx;

/// Inconsistencies of each kind listed in the reply at most.
pub const LISTED: usize = 100;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    opt_bool(cmd, "full")?;
    let lock = collection(ctx, coll)?.write_lock.clone();
    let _quiet = ctx.node.catalog.exclusive(&lock);
    // Read again under the lock, which index builds and drops hold too, once the catalog
    // holds every change applied here (multikey flags included).
    ctx.node.await_catalog();
    let meta = collection(ctx, coll)?;
    let mut v = Validation::new(ctx.engine, &ctx.deadline, &meta);
    each_row(ctx.engine, &meta.table, &ctx.deadline, |rk, bytes| {
        v.record(rk, bytes)
    })?;
    for n in 0..meta.indexes.len() {
        v.index(n)?;
    }
    Ok(v.reply())
}

fn collection(ctx: &Ctx, coll: &str) -> MongoResult<Arc<CollectionMeta>> {
    existing_or(ctx, coll, |ns| {
        format!("Collection '{ns}' does not exist to validate.")
    })
}

/// Inconsistencies of one kind: all counted, the first [`LISTED`] kept.
#[derive(Default)]
struct Listed {
    count: usize,
    items: Vec<Bson>,
}

impl Listed {
    fn push(&mut self, item: impl FnOnce() -> Bson) {
        self.count += 1;
        if self.items.len() < LISTED {
            self.items.push(item());
        }
    }
}

/// What the documents and the table say about one secondary index.
#[derive(Default)]
struct Tally {
    /// Keys the documents make.
    expected: usize,
    /// Of those, the keys not in the table (pointing at their record).
    missing: usize,
    /// Entries in the table.
    entries: usize,
    /// A document made several keys though the index is not multikey.
    unflagged_multikey: bool,
    bad: bool,
}

struct Validation<'a> {
    engine: &'a dyn Engine,
    deadline: &'a Deadline,
    meta: &'a CollectionMeta,
    nrecords: usize,
    /// Why each invalid document is invalid.
    invalid: Listed,
    id_index_bad: bool,
    tallies: Vec<Tally>,
    missing: Listed,
    extra: Listed,
    corrupt: Listed,
}

impl<'a> Validation<'a> {
    fn new(engine: &'a dyn Engine, deadline: &'a Deadline, meta: &'a CollectionMeta) -> Self {
        Validation {
            engine,
            deadline,
            meta,
            nrecords: 0,
            invalid: Listed::default(),
            id_index_bad: false,
            tallies: meta.indexes.iter().map(|_| Tally::default()).collect(),
            missing: Listed::default(),
            extra: Listed::default(),
            corrupt: Listed::default(),
        }
    }

    /// Pass 1, one record: readable, under its `_id`'s key, and indexed.
    fn record(&mut self, rk: &[u8], bytes: &[u8]) -> MongoResult<()> {
        self.nrecords += 1;
        let Some(doc) = self.readable(rk, bytes) else {
            return Ok(());
        };
        let meta = self.meta;
        for (n, index) in meta.indexes.iter().enumerate() {
            match entries(index, &doc, rk) {
                Ok((keys, multikey)) => {
                    self.tallies[n].unflagged_multikey |= multikey && !index.multikey;
                    self.expect(n, keys, rk)?;
                }
                Err(e) => self.invalid(|| {
                    format!(
                        "document with _id {} cannot be indexed by {}: {}",
                        id_of(rk),
                        index.name,
                        e.message
                    )
                }),
            }
        }
        Ok(())
    }

    /// The record's document, when it decodes; a record under another key than its
    /// `_id`'s is counted invalid (and its index entries still checked).
    fn readable(&mut self, rk: &[u8], bytes: &[u8]) -> Option<Document> {
        let Ok(doc) = decode_document(bytes) else {
            self.corrupt.push(|| binary(rk));
            self.id_index_bad = true;
            self.invalid(|| format!("record {} is not a BSON document", id_of(rk)));
            return None;
        };
        if doc.get("_id").map(id_key).as_deref() != Some(rk) {
            self.id_index_bad = true;
            self.invalid(|| {
                format!(
                    "record {} holds a document whose _id is {}",
                    id_of(rk),
                    doc.get("_id").map_or("missing".into(), Bson::to_string)
                )
            });
        }
        Some(doc)
    }

    fn invalid(&mut self, why: impl FnOnce() -> String) {
        self.invalid.push(|| Bson::String(why()));
    }

    /// Each of `keys` must be in index `n`'s table, pointing at `rk`.
    fn expect(&mut self, n: usize, keys: BTreeSet<Vec<u8>>, rk: &[u8]) -> MongoResult<()> {
        let index = &self.meta.indexes[n];
        self.tallies[n].expected += keys.len();
        for key in keys {
            if has_entry(self.engine, index, &key, rk)? {
                continue;
            }
            // Read both again: a secondary may have applied a write in between.
            let makes = record_makes(self.engine, self.meta, index, rk, &key)?;
            if !makes || has_entry(self.engine, index, &key, rk)? {
                continue;
            }
            self.tallies[n].missing += 1;
            self.tallies[n].bad = true;
            self.missing.push(|| entry_report(index, &key, rk));
        }
        Ok(())
    }

    /// Pass 2, index `n`: its entries counted, and read one by one when there are more
    /// than the documents account for.
    fn index(&mut self, n: usize) -> MongoResult<()> {
        let meta = self.meta;
        let table = &meta.indexes[n].table;
        let mut entries = 0;
        each_row(self.engine, table, self.deadline, |_, _| {
            entries += 1;
            Ok(())
        })?;
        let tally = &mut self.tallies[n];
        tally.entries = entries;
        tally.bad |= tally.unflagged_multikey;
        if entries == tally.expected - tally.missing {
            return Ok(());
        }
        each_row(self.engine, table, self.deadline, |key, rk| {
            self.entry(n, key, rk)
        })
    }

    /// One entry of index `n`: its record must exist and make its key.
    fn entry(&mut self, n: usize, key: &[u8], rk: &[u8]) -> MongoResult<()> {
        let index = &self.meta.indexes[n];
        if record_makes(self.engine, self.meta, index, rk, key)? {
            return Ok(());
        }
        // Read both again: a secondary may have applied a write in between.
        let still = has_entry(self.engine, index, key, rk)?
            && !record_makes(self.engine, self.meta, index, rk, key)?;
        if still {
            self.tallies[n].bad = true;
            self.extra.push(|| entry_report(index, key, rk));
        }
        Ok(())
    }

    fn reply(self) -> Document {
        let (keys_per_index, details) = self.per_index();
        let errors = self.errors();
        let valid = errors.is_empty();
        let lists = [&self.missing, &self.extra, &self.corrupt, &self.invalid];
        let warnings: Vec<String> = lists
            .iter()
            .any(|l| l.count > l.items.len())
            .then(|| format!("Not all inconsistencies are listed: at most {LISTED} of each kind."))
            .into_iter()
            .collect();
        let mut reply = doc! {
            "ns": self.meta.ns(), "uuid": self.meta.uuid,
            "nInvalidDocuments": count(self.invalid.count), "nNonCompliantDocuments": 0,
            "nrecords": count(self.nrecords), "nIndexes": count(self.meta.indexes.len() + 1),
            "keysPerIndex": keys_per_index, "indexDetails": details, "valid": valid,
            "repaired": false, "warnings": warnings, "errors": errors,
            "extraIndexEntries": self.extra.items, "missingIndexEntries": self.missing.items,
            "corruptRecords": self.corrupt.items,
        };
        if !valid {
            reply.insert(
                "advice",
                "A corrupt namespace has been detected. See http://dochub.mongodb.org/core/data-recovery for recovery steps.",
            );
        }
        reply
    }

    /// `keysPerIndex` and `indexDetails`, `_id_` (the record table) first.
    fn per_index(&self) -> (Document, Document) {
        let mut keys = doc! {"_id_": count(self.nrecords)};
        let mut details = doc! {"_id_": {"valid": !self.id_index_bad}};
        for (index, tally) in self.meta.indexes.iter().zip(&self.tallies) {
            keys.insert(index.name.clone(), count(tally.entries));
            details.insert(index.name.clone(), doc! {"valid": !tally.bad});
        }
        (keys, details)
    }

    /// What makes the collection invalid, a line each (none: valid).
    fn errors(&self) -> Vec<Bson> {
        let mut errors = self.invalid.items.clone();
        for (index, tally) in self.meta.indexes.iter().zip(&self.tallies) {
            if tally.unflagged_multikey {
                errors.push(Bson::String(format!(
                    "Index with name '{}' is not multi-key but has more than one key in a document",
                    index.name
                )));
            }
        }
        for (found, kind) in [(&self.missing, "missing"), (&self.extra, "extra")] {
            if found.count > 0 {
                let line = format!("Detected {} {kind} index entries.", found.count);
                errors.push(Bson::String(line));
            }
        }
        errors
    }
}

/// Whether index `index` holds `key`, pointing at record `rk`.
fn has_entry(engine: &dyn Engine, index: &IndexMeta, key: &[u8], rk: &[u8]) -> MongoResult<bool> {
    let value = engine.get(&index.table, key).map_err(storage_to_mongo)?;
    Ok(value.as_deref() == Some(rk))
}

/// Whether record `rk` exists and its document makes `key` in `index`.
fn record_makes(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    index: &IndexMeta,
    rk: &[u8],
    key: &[u8],
) -> MongoResult<bool> {
    let Some(bytes) = engine.get(&meta.table, rk).map_err(storage_to_mongo)? else {
        return Ok(false);
    };
    let Ok(doc) = decode_document(&bytes) else {
        return Ok(false);
    };
    Ok(entries(index, &doc, rk).is_ok_and(|(keys, _)| keys.contains(key)))
}

/// A missing or extra entry as mongod lists it: the index, the record (its id and its
/// `_id`), and the key's values by field.
fn entry_report(index: &IndexMeta, key: &[u8], rk: &[u8]) -> Bson {
    Bson::Document(doc! {
        "indexName": &index.name, "recordId": binary(rk), "idKey": {"_id": id_of(rk)},
        "indexKey": key_values(index, key, rk),
    })
}

/// The values an index key holds, by field (the raw key when it does not decode).
fn key_values(index: &IndexMeta, key: &[u8], rk: &[u8]) -> Document {
    // A non-unique index's key ends with the record key.
    let prefix = match index.unique {
        true => key,
        false => key.strip_suffix(rk).unwrap_or(key),
    };
    let descending: Vec<bool> = index
        .fields
        .iter()
        .map(|(_, kind)| *kind == KeyKind::Descending)
        .collect();
    match keystring::decode_key(prefix, &descending, index.fields.len()) {
        Ok(values) => index
            .fields
            .iter()
            .map(|(path, _)| path.clone())
            .zip(values)
            .collect(),
        Err(_) => doc! {"keyString": binary(key)},
    }
}

/// The `_id` a record key encodes (the raw key when it does not decode).
fn id_of(rk: &[u8]) -> Bson {
    keystring::decode_value(rk).map_or_else(|_| binary(rk), |(id, _)| id)
}

fn binary(bytes: &[u8]) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: bytes.to_vec(),
    })
}

/// A count as mongod answers it: an int when it fits.
fn count(n: usize) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n as i64), Bson::Int32)
}
