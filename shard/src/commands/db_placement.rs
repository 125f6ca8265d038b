//! `_shardsvrDbPlacement`: a `movePrimary` tells a shard whether it is the primary shard
//! of the command's database, from which version (`lastMod`), and whether a move out of
//! it is copying the data (`critical`: writes routed to it wait). Entering the critical
//! section returns once every write in progress on the database has finished: DDL holds
//! the database's DDL lock, and every other write its collection's write lock, under which
//! it checks the placement again.

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use super::args::opt_bool;
use crate::catalog::db_placement::DbPlacement;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let primary = opt_bool(cmd, "primary")?
        .ok_or_else(|| MongoError::failed_to_parse("'primary' must be a boolean"))?;
    let last_mod = match cmd.get("lastMod") {
        Some(bson::Bson::Int64(n)) => *n,
        Some(bson::Bson::Int32(n)) => i64::from(*n),
        _ => return Err(MongoError::failed_to_parse("'lastMod' must be an integer")),
    };
    let critical = opt_bool(cmd, "critical")?.unwrap_or(false);
    let placement = DbPlacement {
        primary,
        last_mod,
        critical,
    };
    let catalog = &ctx.node.catalog;
    let was_critical = catalog.placement(ctx.db).is_some_and(|p| p.critical);
    if !critical || was_critical {
        catalog.set_placement(ctx.engine, ctx.db, placement)?;
        return Ok(doc! {"primary": primary, "critical": critical});
    }
    let ddl = catalog.ddl_lock(ctx.db);
    {
        let _no_ddl = ddl.write();
        catalog.set_placement(ctx.engine, ctx.db, placement)?;
    }
    // Writes that checked before the placement changed finish before their lock is free;
    // those after it see the critical section under the lock and are refused.
    for meta in catalog.list(ctx.db) {
        drop(catalog.exclusive(&meta.write_lock));
    }
    Ok(doc! {"primary": primary, "critical": critical})
}
