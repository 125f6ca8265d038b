//! `createIndexes`: build indexes over existing documents; identical specs are no-ops.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, create_on_write, existing, opt_array};
use crate::catalog::{index_from_spec, IndexMeta};
use crate::execution::write_path::build_index;
use crate::node::Ctx;
use crate::repl::events::Kind;

/// Spec fields that distinguish two indexes on the same key.
const OPTION_FIELDS: &[&str] = &[
    "unique",
    "sparse",
    "partialFilterExpression",
    "expireAfterSeconds",
    "collation",
];

fn same_options(a: &Document, b: &Document) -> bool {
    OPTION_FIELDS.iter().all(|f| {
        let norm = |d: &Document| match d.get(*f) {
            Some(Bson::Boolean(false)) | None => None,
            Some(v) => Some(v.clone()),
        };
        norm(a) == norm(b)
    })
}

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let specs = opt_array(cmd, "indexes")?.ok_or_else(|| {
        MongoError::failed_to_parse(
            "BSON field 'createIndexes.indexes' is missing but a required field",
        )
    })?;
    if specs.is_empty() {
        return Err(MongoError::bad_value(
            "Must specify at least one index to create",
        ));
    }
    let created_coll = existing(ctx, coll).is_none();
    let meta = create_on_write(ctx, coll)?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    let before = meta.indexes.len() as i32 + 1;
    let mut indexes = meta.indexes.clone();
    let mut new: Vec<IndexMeta> = Vec::new();
    for spec in specs {
        let Bson::Document(spec) = spec else {
            return Err(MongoError::type_mismatch(
                "each index specification must be an object",
            ));
        };
        super::unsupported::check_index_spec(spec)?;
        let mut spec = spec.clone();
        spec.remove("v");
        spec.remove("ns");
        let probe = index_from_spec(&spec, String::new())?;
        // The collection is clustered by _id, so the _id index always exists.
        let is_id_key = probe.key == doc! {"_id": 1};
        if probe.name == "_id_" || is_id_key {
            if probe.name == "_id_" && is_id_key {
                continue;
            }
            let code = if is_id_key {
                ErrorCode::IndexOptionsConflict
            } else {
                ErrorCode::IndexKeySpecsConflict
            };
            return Err(MongoError::new(
                code,
                format!("An index conflicting with the _id index was requested: {spec}"),
            ));
        }
        if let Some(existing) = indexes
            .iter()
            .chain(new.iter())
            .find(|i| i.name == probe.name)
        {
            if existing.key == probe.key && same_options(&existing.spec, &spec) {
                continue;
            }
            return Err(MongoError::new(
                ErrorCode::IndexKeySpecsConflict,
                format!("An existing index has the same name as the requested index. Requested index: {spec}, existing index: {}", existing.spec),
            ));
        }
        if let Some(existing) = indexes
            .iter()
            .chain(new.iter())
            .find(|i| i.key == probe.key)
        {
            if same_options(&existing.spec, &spec) {
                return Err(MongoError::new(
                    ErrorCode::IndexOptionsConflict,
                    format!(
                        "Index already exists with a different name: {}",
                        existing.name
                    ),
                ));
            }
            if existing.unique == probe.unique && existing.sparse == probe.sparse {
                return Err(MongoError::new(
                    ErrorCode::IndexOptionsConflict,
                    format!("An equivalent index already exists with the same name but different options. Requested index: {spec}, existing index: {}", existing.spec),
                ));
            }
        }
        let mut spec_with_v = doc! {"v": 2};
        for (k, v) in spec {
            spec_with_v.insert(k, v);
        }
        let table = ctx.node.catalog.new_table_name("i");
        new.push(index_from_spec(&spec_with_v, table)?);
    }
    let engine = ctx.engine;
    for (n, index) in new.iter_mut().enumerate() {
        if let Err(e) = build_index(engine, &meta, index) {
            for built in &new[..=n] {
                let _ = engine.drop_table(&built.table);
            }
            return Err(e);
        }
    }
    let added = new.len();
    indexes.extend(new);
    let updated = meta.derive(indexes);
    let mut batch = storage::WriteBatch::default();
    ctx.node.catalog.stage(&mut batch, &updated);
    let new_specs = &updated.indexes[meta.indexes.len()..];
    crate::execution::change_events::indexes(&mut batch, Kind::CreateIndexes, &meta, new_specs);
    engine
        .write(&batch)
        .map_err(crate::error::storage_to_mongo)?;
    ctx.node.catalog.install(updated);
    let mut reply = doc! {
        "numIndexesBefore": before,
        "numIndexesAfter": before + added as i32,
        "createdCollectionAutomatically": created_coll,
    };
    if added == 0 {
        reply.insert("note", "all indexes already exist");
    }
    Ok(reply)
}
