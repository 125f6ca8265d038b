//! Dropping a database, on the config server primary (a router sends the request:
//! `router::sharding::databases::drop`).
//!
//! The drop takes the database's lock in `config.migrations` (`drop: "database"`, the
//! lock `movePrimary` takes), so its primary shard stays put, and it waits for a move in
//! progress. Each sharded collection is dropped as `drop` would (`drop_collection.rs`,
//! under the collection's own lock), then every shard drops the database and learns that
//! the database's version is gone, and the catalog forgets it. As with a collection,
//! taking the lock decides the drop, and a run that stops half way is finished by the
//! recovery pass; every step may run again.

use bson::{doc, Document};
use router::sharding::{catalog, internal};
use wire::MongoResult;

use crate::context::Ctx;
use crate::{drop_collection, locks};

/// The lock field that marks a database drop.
pub const KIND: &str = "database";

/// Drops `db` everywhere, then from the catalog.
pub async fn run(ctx: &Ctx, db: &str) -> MongoResult<Document> {
    let running = ctx.run_as();
    let lock = doc! {"_id": db, "owner": running.owner, "drop": KIND};
    locks::decided(ctx, &lock, finish(ctx, db)).await?;
    Ok(doc! {"dropped": db})
}

/// Finishes a database drop whose coordinator stopped (`lock`, now this primary's).
pub async fn recover(ctx: &Ctx, lock: &Document) -> MongoResult<()> {
    let db = lock.get_str("_id").unwrap_or_default();
    tracing::info!(%db, "finishing an abandoned dropDatabase");
    finish(ctx, db).await
}

async fn finish(ctx: &Ctx, db: &str) -> MongoResult<()> {
    for ns in catalog::sharded_collections(&ctx.config, db).await? {
        drop_collection::run(ctx, &ns).await?;
    }
    let version = catalog::database_primary(&ctx.config, db).await?;
    let shards = ctx.reload_shards().await?;
    for s in &shards {
        internal(&s.handle, db, &doc! {"dropDatabase": 1}, true).await?;
    }
    // Every shard remembers the dropped version, so a router that cached it is sent to
    // read the primary again (a database created again starts at a newer version).
    if let Some((_, v)) = version {
        let gone = doc! {"_shardsvrDbPlacement": 1, "primary": false, "lastMod": v};
        for s in &shards {
            internal(&s.handle, db, &gone, true).await?;
        }
    }
    catalog::drop_database(&ctx.config, db).await?;
    ctx.forget_database(db);
    Ok(())
}
