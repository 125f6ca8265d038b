//! Dropping a sharded collection, on the config server primary (a router sends the
//! request: `router::sharding::scatter::whole_collection::drop`).
//!
//! The drop takes the collection's lock in `config.migrations` (`drop: "collection"`),
//! so no migration runs during it, and it waits for one in progress. Taking the lock
//! decides the drop: from then on it is finished, by this run or, when this run stops
//! half way (a shard unreachable, a step-down), by the recovery pass that finds the
//! orphaned lock (`migrate::recover_orphan`). Every step may run again: each shard drops
//! its copy (a missing one is already dropped), then the catalog forgets the collection.

use bson::{doc, Document};
use router::sharding::{catalog, internal};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Ctx;
use crate::locks;

/// The lock field that marks a collection drop.
pub const KIND: &str = "collection";

/// Drops the collection `ns` everywhere, then from the catalog.
pub async fn run(ctx: &Ctx, ns: &str) -> MongoResult<Document> {
    split(ns)?;
    let running = ctx.run_as();
    let lock = doc! {"_id": ns, "owner": running.owner, "drop": KIND};
    locks::decided(ctx, &lock, finish(ctx, ns)).await?;
    Ok(doc! {"ns": ns})
}

/// Finishes a drop whose coordinator stopped (`lock`, now this primary's).
pub async fn recover(ctx: &Ctx, lock: &Document) -> MongoResult<()> {
    let ns = lock.get_str("_id").unwrap_or_default();
    tracing::info!(%ns, "finishing an abandoned drop");
    finish(ctx, ns).await
}

async fn finish(ctx: &Ctx, ns: &str) -> MongoResult<()> {
    let (db, coll) = split(ns)?;
    for shard in ctx.reload_shards().await? {
        match internal(&shard.handle, db, &doc! {"drop": coll}, true).await {
            Err(e) if e.code != ErrorCode::NamespaceNotFound as i32 => return Err(e),
            _ => {}
        }
    }
    catalog::drop_collection(&ctx.config, ns).await?;
    ctx.forget(ns);
    Ok(())
}

fn split(ns: &str) -> MongoResult<(&str, &str)> {
    ns.split_once('.')
        .filter(|(db, coll)| !db.is_empty() && !coll.is_empty())
        .ok_or_else(|| {
            MongoError::new(
                ErrorCode::InvalidNamespace,
                format!("invalid namespace to drop: '{ns}'"),
            )
        })
}
