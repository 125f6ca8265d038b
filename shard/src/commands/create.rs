//! `create`: an empty collection with options (those Bulwark does not implement are
//! refused, see `unsupported.rs`).

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, existing};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    if existing(ctx, coll).is_some() {
        return Err(MongoError::new(
            ErrorCode::NamespaceExists,
            format!("Collection {}.{coll} already exists.", ctx.db),
        ));
    }
    if cmd.contains_key("viewOn") || cmd.contains_key("pipeline") {
        return Err(MongoError::new(
            ErrorCode::CommandNotSupported,
            "views are not supported",
        ));
    }
    super::unsupported::check_create_options(cmd)?;
    let mut options = Document::new();
    for (k, v) in cmd.iter().skip(1) {
        match k.as_str() {
            "capped"
            | "size"
            | "max"
            | "validator"
            | "validationLevel"
            | "validationAction"
            | "collation"
            | "clusteredIndex"
            | "storageEngine"
            | "indexOptionDefaults"
            | "expireAfterSeconds"
            | "changeStreamPreAndPostImages"
            | "timeseries" => {
                options.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
    if let Some(Bson::Boolean(true)) = options.get("capped") {
        if !options.contains_key("size") {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                "the 'size' field is required when 'capped' is true",
            ));
        }
    }
    ctx.node
        .catalog
        .create_collection(ctx.engine, ctx.db, coll, options)?;
    Ok(Document::new())
}
