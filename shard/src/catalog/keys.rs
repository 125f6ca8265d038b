//! Record and index keys. A collection is clustered by `_id`: its record key is the
//! order-preserving encoding of `_id`. An index entry's key is the encoding of the
//! indexed values followed (for non-unique indexes) by the record key; its value is
//! the record key, so a scan can fetch the document without decoding.

use bson::{Bson, Document};
use query::keystring;
use wire::{ErrorCode, MongoError, MongoResult};

use super::{IndexMeta, KeyKind};

pub fn id_key(id: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    keystring::encode_value(&mut out, id);
    out
}

/// Hashed index values and hashed shard keys are the same function (routers compute it
/// too), so it lives in `query`.
pub use query::keystring::hashed_value;

/// The key values one document contributes to an index (several when multikey).
/// Returns an empty list when the document is not indexed (sparse or partial).
pub fn index_keys(index: &IndexMeta, doc: &Document) -> MongoResult<Vec<Vec<Bson>>> {
    if let Some(partial) = &index.partial {
        if !partial.matches(doc) {
            return Ok(Vec::new());
        }
    }
    let mut per_field: Vec<Vec<Bson>> = Vec::with_capacity(index.fields.len());
    let mut all_missing = true;
    let mut array_fields = 0;
    for (path, kind) in &index.fields {
        let mut values = query::path::path_values(doc, path);
        if values.is_empty() {
            values.push(Bson::Null);
        } else {
            all_missing = false;
        }
        if values.len() > 1 {
            array_fields += 1;
        }
        if *kind == KeyKind::Hashed {
            if values.iter().any(|v| matches!(v, Bson::Array(_))) || values.len() > 1 {
                return Err(MongoError::new(
                    ErrorCode::HashedIndexArrayValue,
                    "Error: hashed indexes do not currently support array values",
                ));
            }
            values = values.iter().map(hashed_value).collect();
        }
        per_field.push(values);
    }
    if index.sparse && all_missing {
        return Ok(Vec::new());
    }
    if array_fields > 1 {
        return Err(MongoError::new(
            ErrorCode::CannotIndexParallelArrays,
            format!("cannot index parallel arrays for index {}", index.name),
        ));
    }
    // Cartesian product (at most one component has several values).
    let mut keys: Vec<Vec<Bson>> = vec![Vec::new()];
    for values in per_field {
        let mut next = Vec::with_capacity(keys.len() * values.len());
        for k in &keys {
            for v in &values {
                let mut k2 = k.clone();
                k2.push(v.clone());
                next.push(k2);
            }
        }
        keys = next;
    }
    Ok(keys)
}

/// Encodes the indexed values of one entry (without the record key).
pub fn encode_index_prefix(index: &IndexMeta, values: &[Bson]) -> Vec<u8> {
    let descending: Vec<bool> = index
        .fields
        .iter()
        .map(|(_, k)| *k == KeyKind::Descending)
        .collect();
    keystring::encode_key(values, &descending)
}

/// The storage key of an index entry.
pub fn index_entry_key(index: &IndexMeta, values: &[Bson], record_key: &[u8]) -> Vec<u8> {
    let mut k = encode_index_prefix(index, values);
    if !index.unique {
        k.extend_from_slice(record_key);
    }
    k
}
