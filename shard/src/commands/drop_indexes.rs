//! `dropIndexes`: by name, key pattern, list of names, or `"*"` (all but `_id_`).

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, existing_or};
use crate::node::Ctx;
use crate::repl::events::Kind;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let meta = existing_or(ctx, coll, |ns| format!("ns not found {ns}"))?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    let was = meta.indexes.len() as i32 + 1;
    let not_found = |what: String| {
        MongoError::new(
            ErrorCode::IndexNotFound,
            format!("index not found with name [{what}]"),
        )
    };
    let id_err = || MongoError::new(ErrorCode::InvalidOptions, "cannot drop _id index");
    let targets: Vec<String> = match cmd.get("index") {
        Some(Bson::String(s)) if s == "*" => meta.indexes.iter().map(|i| i.name.clone()).collect(),
        Some(Bson::String(s)) if s == "_id_" => return Err(id_err()),
        Some(Bson::String(s)) => vec![s.clone()],
        Some(Bson::Document(key)) => {
            if key.len() == 1 && key.contains_key("_id") {
                return Err(id_err());
            }
            match meta.indexes.iter().find(|i| &i.key == key) {
                Some(i) => vec![i.name.clone()],
                None => {
                    return Err(MongoError::new(
                        ErrorCode::IndexNotFound,
                        format!("can't find index with key: {key}"),
                    ))
                }
            }
        }
        Some(Bson::Array(names)) => {
            let mut v = Vec::new();
            for n in names {
                match n {
                    Bson::String(s) if s == "_id_" => return Err(id_err()),
                    Bson::String(s) => v.push(s.clone()),
                    _ => {
                        return Err(MongoError::type_mismatch(
                            "dropIndexes names must be strings",
                        ))
                    }
                }
            }
            v
        }
        _ => {
            return Err(MongoError::type_mismatch(
                "BSON field 'dropIndexes.index' must be a string, an object or an array",
            ))
        }
    };
    for t in &targets {
        if meta.index(t).is_none() {
            return Err(not_found(t.clone()));
        }
    }
    let keep: Vec<_> = meta
        .indexes
        .iter()
        .filter(|i| !targets.contains(&i.name))
        .cloned()
        .collect();
    let dropped: Vec<_> = meta
        .indexes
        .iter()
        .filter(|i| targets.contains(&i.name))
        .cloned()
        .collect();
    let updated = meta.derive(keep);
    let mut batch = storage::WriteBatch::default();
    ctx.node.catalog.stage(&mut batch, &updated);
    crate::execution::change_events::indexes(&mut batch, Kind::DropIndexes, &meta, &dropped);
    ctx.node
        .engine
        .write(&batch)
        .map_err(crate::error::storage_to_mongo)?;
    ctx.node.catalog.install(updated);
    for i in dropped {
        ctx.node
            .engine
            .drop_table(&i.table)
            .map_err(crate::error::storage_to_mongo)?;
    }
    Ok(doc! {"nIndexesWas": was})
}
