//! The change events a document write records beside its ops (`repl::events`): the
//! operation, the namespace, the document key and, for an update, what it changed.

use bson::{Bson, Document};
use storage::WriteBatch;

use crate::catalog::{CollectionMeta, IndexMeta};
use crate::repl::events::{record, Event, Kind};

/// MongoDB's `documentKey`: the shard key's fields (as dotted names, missing ones absent)
/// and then `_id`.
pub fn document_key(meta: &CollectionMeta, doc: &Document) -> Document {
    let mut key = Document::new();
    if let Some(owner) = &meta.ownership {
        for field in owner.key.fields() {
            if field == "_id" {
                continue;
            }
            if let Some(v) = query::path::get_path(doc, field) {
                key.insert(field.clone(), v.clone());
            }
        }
    }
    key.insert("_id", doc.get("_id").cloned().unwrap_or(Bson::Null));
    key
}

/// Records an insert of the document with `id`, parsing it only when the collection is
/// sharded (an unsharded collection's document key is its `_id`).
pub fn inserted<'d>(
    batch: &mut WriteBatch,
    meta: &CollectionMeta,
    id: &Bson,
    doc: impl FnOnce() -> wire::MongoResult<&'d Document>,
) -> wire::MongoResult<()> {
    let id_only;
    let doc = match meta.ownership {
        Some(_) => doc()?,
        None => {
            id_only = bson::doc! {"_id": id.clone()};
            &id_only
        }
    };
    document(batch, (meta, Kind::Insert), doc, None, None);
    Ok(())
}

/// Records a document event: `detail` is the update description of an update, and
/// `before` the document before an update, replace or delete, kept only when the
/// collection records pre-images.
pub fn document(
    batch: &mut WriteBatch,
    (meta, kind): (&CollectionMeta, Kind),
    doc: &Document,
    detail: Option<&Document>,
    before: Option<&Document>,
) {
    let key = bson::to_vec(&document_key(meta, doc)).unwrap_or_default();
    let uuid = meta.uuid.bytes();
    let before = match before {
        Some(b) if records_images(meta) => bson::to_vec(b).unwrap_or_default(),
        _ => Vec::new(),
    };
    let ids = (kind, meta.ns(), meta.table.as_str());
    emit(
        batch,
        (ids.0, &ids.1, ids.2),
        (&uuid, &key),
        (detail, &before),
    );
}

/// Whether the collection's events carry the documents before and after a change.
pub fn records_images(meta: &CollectionMeta) -> bool {
    meta.options
        .get_document("changeStreamPreAndPostImages")
        .is_ok_and(|d| d.get_bool("enabled") == Ok(true))
}

/// Records a DDL event on namespace `ns` (`db` alone for `dropDatabase`) of the
/// collection `uuid`.
pub fn ddl(
    batch: &mut WriteBatch,
    (kind, ns, uuid): (Kind, &str, Option<bson::Uuid>),
    detail: Option<&Document>,
) {
    let uuid = uuid.map(|u| u.bytes().to_vec()).unwrap_or_default();
    emit(batch, (kind, ns, ""), (&uuid, &[]), (detail, &[]));
}

/// Records the creation or drop of `indexes` of `meta`'s collection.
pub fn indexes(batch: &mut WriteBatch, kind: Kind, meta: &CollectionMeta, indexes: &[IndexMeta]) {
    let specs: Vec<Bson> = indexes.iter().map(|i| i.spec.clone().into()).collect();
    let detail = bson::doc! {"indexes": specs};
    ddl(batch, (kind, &meta.ns(), Some(meta.uuid)), Some(&detail));
}

fn emit(
    batch: &mut WriteBatch,
    (kind, ns, table): (Kind, &str, &str),
    (uuid, key): (&[u8], &[u8]),
    (detail, before): (Option<&Document>, &[u8]),
) {
    let detail = detail
        .and_then(|d| bson::to_vec(d).ok())
        .unwrap_or_default();
    let event = Event {
        kind,
        ns,
        table,
        uuid,
        key,
        detail: &detail,
        before,
    };
    record(batch, &event);
}
