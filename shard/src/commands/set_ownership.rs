//! `_shardsvrSetOwnership`: a router tells this shard its part of a sharded collection
//! at a version: after sharding it, after a split or a migration commits, or when this
//! shard answered `StaleConfig` because it was behind. An older version than the one
//! held is ignored. A critical section in progress survives a new version that still
//! gives this shard the migrating range (a split elsewhere) and ends with one that does
//! not (the migration committed).

use bson::{doc, Document};
use query::ownership::Ownership;
use wire::{MongoError, MongoResult};

use super::args::{collection_name, create_on_write};
use crate::migrations::migration::install;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let new = Ownership::from_document(
        cmd.get_document("ownership")
            .map_err(|_| MongoError::failed_to_parse("'ownership' must be an object"))?,
    )?;
    let meta = create_on_write(ctx, coll)?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    let held = meta.ownership.as_deref();
    // Another epoch replaces what is held: the router read it from the catalog just now.
    let newer = held.is_none_or(|h| new.version.newer_than(&h.version).unwrap_or(true));
    if newer {
        let critical = held
            .filter(|h| h.version.epoch == new.version.epoch)
            .and_then(|h| h.critical.clone())
            .filter(|(min, _)| new.owns_key(min));
        install(ctx, &meta, Ownership { critical, ..new })?;
    }
    Ok(doc! {"installed": newer})
}
