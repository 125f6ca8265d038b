//! Writing documents: the record and every index entry change in one storage batch.
//!
//! Callers hold the collection's write lock, so the pre-image they read stays valid
//! until the batch commits. Unique indexes store one entry per key value and use
//! `WriteOp::Insert`, so a duplicate fails inside the same atomic batch.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::BTreeSet;

use bson::{doc, Bson, Document, RawDocument};
use storage::{Engine, StorageError, WriteBatch};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::catalog::keys::{id_key, index_entry_key, index_keys};
use crate::catalog::{Catalog, CollectionMeta, IndexMeta};
use crate::error::{invalid_bson, storage_to_mongo};
use crate::execution::change_events;
use crate::repl::events::Kind;

/// A document about to be inserted: its `_id`, the bytes stored for it (`_id` first), and
/// the parsed document, made only when an index or an error needs its fields. A batch
/// that arrived as raw BSON is stored as it came, without a parse and a re-encode.
pub struct NewDoc<'a> {
    id: Bson,
    bytes: Cow<'a, [u8]>,
    parsed: OnceCell<Cow<'a, Document>>,
}

impl<'a> NewDoc<'a> {
    /// From a parsed document that already has `_id` first. Parsed documents may have
    /// been built here (upserts, `$out`, `$merge`), so their depth is checked: raw ones
    /// came within the wire's nesting limit.
    pub fn parsed(doc: &'a Document) -> MongoResult<NewDoc<'a>> {
        query::check_document_depth(doc)?;
        let id = doc
            .get("_id")
            .cloned()
            .ok_or_else(|| MongoError::internal("document without _id"))?;
        let bytes = bson::to_vec(doc).map_err(invalid_bson)?;
        Ok(NewDoc {
            id,
            bytes: Cow::Owned(bytes),
            parsed: OnceCell::from(Cow::Borrowed(doc)),
        })
    }

    /// From validated raw BSON whose first field is `_id`, with that `_id`.
    pub fn raw(id: Bson, doc: &'a RawDocument) -> NewDoc<'a> {
        NewDoc {
            id,
            bytes: Cow::Borrowed(doc.as_bytes()),
            parsed: OnceCell::new(),
        }
    }

    pub fn doc(&self) -> MongoResult<&Document> {
        if let Some(d) = self.parsed.get() {
            return Ok(d);
        }
        let d = Document::from_reader(&mut &self.bytes[..]).map_err(invalid_bson)?;
        Ok(self.parsed.get_or_init(|| Cow::Owned(d)))
    }
}

/// One index's entries for one document, as storage keys.
pub(crate) fn entries(
    index: &IndexMeta,
    doc: &Document,
    record_key: &[u8],
) -> MongoResult<(BTreeSet<Vec<u8>>, bool)> {
    let keys = index_keys(index, doc)?;
    let multikey = keys.len() > 1;
    Ok((
        keys.iter()
            .map(|k| index_entry_key(index, k, record_key))
            .collect(),
        multikey,
    ))
}

/// Stages inserting `doc` (which already has an `_id`). Returns the indexes that became multikey.
fn stage_insert(
    meta: &CollectionMeta,
    doc: &NewDoc,
    batch: &mut WriteBatch,
) -> MongoResult<Vec<usize>> {
    let rk = id_key(&doc.id);
    check_size(doc.bytes.len())?;
    let bytes = doc.bytes.to_vec();
    let mut flips = Vec::new();
    for (n, index) in meta.indexes.iter().enumerate() {
        let (keys, multikey) = entries(index, doc.doc()?, &rk)?;
        if multikey && !index.multikey {
            flips.push(n);
        }
        for k in keys {
            if index.unique {
                batch.insert(&index.table, k, rk.clone());
            } else {
                batch.put(&index.table, k, rk.clone());
            }
        }
    }
    batch.insert(&meta.table, rk, bytes);
    change_events::inserted(batch, meta, &doc.id, || doc.doc())?;
    Ok(flips)
}

pub fn check_size(len: usize) -> MongoResult<()> {
    if len > wire::MAX_BSON_SIZE {
        return Err(MongoError::new(
            ErrorCode::BSONObjectTooLarge,
            format!(
                "object to insert too large. size in bytes: {len}, max size: {}",
                wire::MAX_BSON_SIZE
            ),
        ));
    }
    Ok(())
}

/// Commits `batch`, first marking `flips` indexes multikey in the same batch.
fn commit(
    engine: &dyn Engine,
    catalog: &Catalog,
    meta: &CollectionMeta,
    mut batch: WriteBatch,
    flips: &BTreeSet<usize>,
    docs: &[&Document],
) -> MongoResult<()> {
    crate::control::ops::check_before_write()?;
    // Flips are staged onto the newest metadata, under the catalog's flip lock until the
    // new metadata is installed (see `Catalog::flips`).
    let _flipping = (!flips.is_empty()).then(|| catalog.flips.lock());
    let updated = if flips.is_empty() {
        None
    } else {
        let newest = catalog.get(&meta.ns());
        let base = newest.as_deref().unwrap_or(meta);
        let mut indexes = base.indexes.clone();
        for &n in flips {
            if let Some(i) = indexes.get_mut(n) {
                i.multikey = true;
            }
        }
        let m = base.derive(indexes);
        catalog.stage(&mut batch, &m);
        Some(m)
    };
    match engine.write_owned(batch) {
        Ok(()) => {
            if let Some(m) = updated.filter(|_| !crate::sessions::txn::is_staging()) {
                catalog.install(m);
            }
            Ok(())
        }
        Err(StorageError::KeyExists { table }) => Err(duplicate_key_error(meta, &table, docs)),
        Err(e) => Err(storage_to_mongo(e)),
    }
}

/// Builds MongoDB's E11000 error for the index that owns `table`.
fn duplicate_key_error(meta: &CollectionMeta, table: &str, docs: &[&Document]) -> MongoError {
    let (name, pattern) = if table == meta.table {
        ("_id_".to_string(), doc! {"_id": 1})
    } else {
        match meta.indexes.iter().find(|i| i.table == table) {
            Some(i) => (i.name.clone(), i.key.clone()),
            None => ("unknown".to_string(), Document::new()),
        }
    };
    // With one document we can say which value collided; a batch falls back to one-by-one.
    let mut key_value = Document::new();
    if let [d] = docs {
        for (field, _) in &pattern {
            let v = query::path::get_path(d, field)
                .cloned()
                .unwrap_or(Bson::Null);
            key_value.insert(field.clone(), v);
        }
    }
    let shown: Vec<String> = key_value.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    MongoError::new(
        ErrorCode::DuplicateKey,
        format!(
            "E11000 duplicate key error collection: {} index: {} dup key: {{ {} }}",
            meta.ns(),
            name,
            shown.join(", ")
        ),
    )
    .with_extra(doc! {"keyPattern": pattern, "keyValue": key_value})
}

/// Inserts documents (each already has `_id`). Tries the whole batch as one transaction;
/// on any failure it retries one document at a time so each error has its index.
/// Returns one result per document, stopping at the first error when `ordered`.
/// `before_write` hears which documents (positions in `docs`) the next write carries.
pub fn insert_documents(
    engine: &dyn Engine,
    catalog: &Catalog,
    meta: &CollectionMeta,
    docs: &[Document],
    ordered: bool,
    before_write: &dyn Fn(std::ops::Range<usize>),
) -> Vec<(usize, MongoError)> {
    let mut new = Vec::with_capacity(docs.len());
    for (i, d) in docs.iter().enumerate() {
        match NewDoc::parsed(d) {
            Ok(d) => new.push(d),
            Err(e) => return vec![(i, e)],
        }
    }
    insert_new(engine, catalog, meta, &new, ordered, before_write)
}

/// [`insert_documents`] for documents already in their stored form.
pub fn insert_new(
    engine: &dyn Engine,
    catalog: &Catalog,
    meta: &CollectionMeta,
    docs: &[NewDoc],
    ordered: bool,
    before_write: &dyn Fn(std::ops::Range<usize>),
) -> Vec<(usize, MongoError)> {
    let mut batch = WriteBatch::default();
    let mut flips = BTreeSet::new();
    let mut staged_ok = true;
    for d in docs {
        match stage_insert(meta, d, &mut batch) {
            Ok(f) => flips.extend(f),
            Err(_) => {
                staged_ok = false;
                break;
            }
        }
    }
    if staged_ok && docs.len() > 1 {
        before_write(0..docs.len());
        match commit(engine, catalog, meta, batch, &flips, &[]) {
            Ok(()) => {
                docs.iter().for_each(|d| meta.moves.record(&d.id));
                return Vec::new();
            }
            // Applied, and only the replication wait ran out: one by one, each document
            // would now collide with itself. As for any statement, the timed-out one is
            // the last the command ran (see `write_concern`).
            Err(e) if e.code == ErrorCode::WriteConcernFailed as i32 => {
                docs.iter().for_each(|d| meta.moves.record(&d.id));
                return vec![(docs.len() - 1, e)];
            }
            Err(_) => {}
        }
    }
    let mut errors = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let mut batch = WriteBatch::default();
        let result = stage_insert(meta, d, &mut batch).and_then(|f| {
            // The catalog may have changed after an earlier document flipped an index.
            let current = catalog.get(&meta.ns());
            let m = current.as_deref().unwrap_or(meta);
            let flips: BTreeSet<usize> = f
                .into_iter()
                .filter(|&n| !m.indexes.get(n).is_some_and(|x| x.multikey))
                .collect();
            before_write(i..i + 1);
            commit(engine, catalog, m, batch, &flips, &[d.doc()?])
        });
        if result.is_ok() {
            meta.moves.record(&d.id);
        }
        if let Err(e) = result {
            errors.push((i, e));
            if ordered {
                break;
            }
        }
    }
    errors
}

/// Replaces `old` by `new` (same `_id`), maintaining only the index entries that changed.
/// `update` is the update description when the change is an update, not a replacement.
pub fn replace_document(
    engine: &dyn Engine,
    catalog: &Catalog,
    meta: &CollectionMeta,
    (old, new): (&Document, &Document),
    update: Option<&Document>,
) -> MongoResult<()> {
    let id = old
        .get("_id")
        .ok_or_else(|| MongoError::internal("document without _id"))?;
    let rk = id_key(id);
    query::check_document_depth(new)?;
    let bytes = bson::to_vec(new).map_err(invalid_bson)?;
    check_size(bytes.len())?;
    let mut batch = WriteBatch::default();
    let mut flips = BTreeSet::new();
    for (n, index) in meta.indexes.iter().enumerate() {
        let (before, _) = entries(index, old, &rk)?;
        let (after, multikey) = entries(index, new, &rk)?;
        if multikey && !index.multikey {
            flips.insert(n);
        }
        for k in before.difference(&after) {
            batch.delete(&index.table, k.clone());
        }
        for k in after.difference(&before) {
            if index.unique {
                batch.insert(&index.table, k.clone(), rk.clone());
            } else {
                batch.put(&index.table, k.clone(), rk.clone());
            }
        }
    }
    batch.put(&meta.table, rk, bytes);
    let kind = if update.is_some() {
        Kind::Update
    } else {
        Kind::Replace
    };
    change_events::document(&mut batch, (meta, kind), new, update, Some(old));
    commit(engine, catalog, meta, batch, &flips, &[new])?;
    meta.moves.record(id);
    Ok(())
}

pub fn delete_document(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    old: &Document,
) -> MongoResult<()> {
    delete_document_with(engine, meta, old, WriteBatch::default())
}

/// Like [`delete_document`], with `batch`'s changes in the same write (one replicated
/// entry, one WiredTiger transaction).
pub fn delete_document_with(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    old: &Document,
    mut batch: WriteBatch,
) -> MongoResult<()> {
    stage_delete(meta, old, &mut batch)?;
    engine.write_owned(batch).map_err(storage_to_mongo)?;
    if let Some(id) = old.get("_id") {
        meta.moves.record(id);
    }
    Ok(())
}

/// Stages deleting `old`: its record and every index entry.
pub fn stage_delete(
    meta: &CollectionMeta,
    old: &Document,
    batch: &mut WriteBatch,
) -> MongoResult<()> {
    let id = old
        .get("_id")
        .ok_or_else(|| MongoError::internal("document without _id"))?;
    let rk = id_key(id);
    for index in &meta.indexes {
        let (keys, _) = entries(index, old, &rk)?;
        for k in keys {
            batch.delete(&index.table, k);
        }
    }
    batch.delete(&meta.table, rk);
    change_events::document(batch, (meta, Kind::Delete), old, None, Some(old));
    Ok(())
}

/// Builds a new index over the existing documents. Fails with E11000 on a unique violation.
pub fn build_index(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    index: &mut IndexMeta,
) -> MongoResult<()> {
    engine
        .create_table(&index.table)
        .map_err(storage_to_mongo)?;
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let range = match &resume {
            None => storage::KeyRange::all(),
            Some(k) => storage::KeyRange {
                start: std::ops::Bound::Excluded(k.clone()),
                end: std::ops::Bound::Unbounded,
            },
        };
        let page = engine
            .scan(&meta.table, &range, false, 512)
            .map_err(storage_to_mongo)?;
        if page.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        let mut docs = Vec::with_capacity(page.len());
        for (rk, value) in &page {
            let d = decode_document(value)?;
            let (keys, multikey) = entries(index, &d, rk)?;
            index.multikey |= multikey;
            for k in keys {
                if index.unique {
                    batch.insert(&index.table, k, rk.clone());
                } else {
                    batch.put(&index.table, k, rk.clone());
                }
            }
            docs.push(d);
        }
        match engine.write(&batch) {
            Ok(()) => {}
            Err(StorageError::KeyExists { .. }) => {
                let probe = meta.derive(vec![index.clone()]);
                let culprit = find_duplicate(index, &docs);
                let refs: Vec<&Document> = culprit.iter().collect();
                return Err(duplicate_key_error(&probe, &index.table, &refs));
            }
            Err(e) => return Err(storage_to_mongo(e)),
        }
        resume = page.last().map(|(k, _)| k.clone());
    }
}

/// Best effort: the document whose key collides, so the E11000 message can name the value.
fn find_duplicate(index: &IndexMeta, docs: &[Document]) -> Option<Document> {
    let mut seen = BTreeSet::new();
    for d in docs {
        for k in index_keys(index, d).ok()? {
            if !seen.insert(crate::catalog::keys::encode_index_prefix(index, &k)) {
                return Some(d.clone());
            }
        }
    }
    docs.first().cloned()
}

pub fn decode_document(bytes: &[u8]) -> MongoResult<Document> {
    Document::from_reader(&mut &bytes[..])
        .map_err(|e| MongoError::internal(format!("corrupt document: {e}")))
}
