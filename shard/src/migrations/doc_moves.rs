//! Shard key changes in flight: the durable half of moving a document whose update gave
//! it a key another shard owns (`router/src/sharding/doc_move.rs` does the moving).
//!
//! The router records its intent on the donor before it inserts the new document on the
//! recipient (`_shardsvrBeginMove`); the donor's delete of the old document removes the
//! intent in the same write (`_shardsvrDeleteIfUnchanged`), and an undone move removes
//! it after the undo (`_shardsvrEndMove`). So if the router dies between the insert and
//! the delete, the intent is still here, with everything needed to finish: any router
//! lists intents that stayed too long (`_shardsvrPendingMoves`) and runs the same steps
//! again, each of which may run twice. Without it, both copies of the document stayed
//! until the client happened to retry.

use bson::{Bson, Document};
use storage::KeyRange;
use wire::MongoResult;

use crate::catalog::CollectionMeta;
use crate::error::storage_to_mongo;
use crate::Node;

/// Intents, one per document being moved, keyed by collection UUID and `_id`.
pub const TABLE: &str = "_doc_moves";

/// The key of the intent to move the document `id` of `meta`'s collection.
pub fn key(meta: &CollectionMeta, id: &Bson) -> Vec<u8> {
    let mut key = meta.uuid.bytes().to_vec();
    key.extend(crate::catalog::keys::id_key(id));
    key
}

/// Whether `meta`'s collection stores exactly `expected` (byte for byte) under its
/// `_id`. The caller holds the collection's write lock.
pub fn stored_exactly(
    engine: &dyn storage::Engine,
    meta: &CollectionMeta,
    expected: &Document,
) -> MongoResult<bool> {
    let id = expected.get("_id").unwrap_or(&Bson::Null);
    let stored = engine
        .get(&meta.table, &crate::catalog::keys::id_key(id))
        .map_err(storage_to_mongo)?;
    let bytes = bson::to_vec(expected)
        .map_err(|e| wire::MongoError::internal(format!("encoding a document: {e}")))?;
    Ok(stored.as_deref() == Some(bytes.as_slice()))
}

/// The intents recorded at least `older_than_ms` ago, oldest first, of collections that
/// still exist.
pub fn pending(node: &Node, older_than_ms: i64) -> MongoResult<Vec<Document>> {
    let now = bson::DateTime::now().timestamp_millis();
    let mut found: Vec<Document> = Vec::new();
    for (_, v) in node
        .engine
        .scan(TABLE, &KeyRange::all(), false, usize::MAX)
        .map_err(storage_to_mongo)?
    {
        let intent = crate::execution::write_path::decode_document(&v)?;
        // A move of a collection since dropped has nothing left to finish.
        let ns = format!(
            "{}.{}",
            intent.get_str("db").unwrap_or_default(),
            intent.get_str("coll").unwrap_or_default()
        );
        let current = node
            .catalog
            .get(&ns)
            .map(|m| Bson::Binary(bson::Binary::from_uuid(m.uuid)));
        if current.as_ref() != intent.get("uuid") {
            continue;
        }
        let since = intent
            .get_datetime("since")
            .map_or(0, |t| t.timestamp_millis());
        if now - since >= older_than_ms {
            found.push(intent);
        }
    }
    found.sort_by_key(|d| d.get_datetime("since").map_or(0, |t| t.timestamp_millis()));
    Ok(found)
}
