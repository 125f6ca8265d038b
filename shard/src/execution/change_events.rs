//! The change events a document write records beside its ops (`repl::events`): the
//! operation, the namespace, the document key and, for an update, what it changed.

use bson::{Bson, Document};
use storage::WriteBatch;

use crate::catalog::CollectionMeta;
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
    if meta.ownership.is_some() {
        document(batch, meta, Kind::Insert, doc()?, None);
    } else {
        document(
            batch,
            meta,
            Kind::Insert,
            &bson::doc! {"_id": id.clone()},
            None,
        );
    }
    Ok(())
}

/// Records a document event: `detail` is the update description of an update.
pub fn document(
    batch: &mut WriteBatch,
    meta: &CollectionMeta,
    kind: Kind,
    doc: &Document,
    detail: Option<&Document>,
) {
    let key = bson::to_vec(&document_key(meta, doc)).unwrap_or_default();
    emit(batch, (kind, &meta.ns(), &meta.table), &key, detail);
}

/// Records a DDL event on namespace `ns` (`db` alone for `dropDatabase`).
pub fn ddl(batch: &mut WriteBatch, kind: Kind, ns: &str, detail: Option<&Document>) {
    emit(batch, (kind, ns, ""), &[], detail);
}

fn emit(
    batch: &mut WriteBatch,
    (kind, ns, table): (Kind, &str, &str),
    key: &[u8],
    detail: Option<&Document>,
) {
    let detail = detail
        .and_then(|d| bson::to_vec(d).ok())
        .unwrap_or_default();
    let event = Event {
        kind,
        ns,
        table,
        key,
        detail: &detail,
    };
    record(batch, &event);
}
