//! `_shardsvrCriticalSection`: the donor of a migration of `[min, max)` stops (`on:
//! true`) or resumes (`on: false`, the migration was abandoned) writes to the
//! collection. Entering waits for every write in progress (it takes the collection's
//! write lock), and the state is replicated, so a new primary keeps refusing writes until
//! the outcome is known.

use bson::{doc, Document};
use query::ownership::Ownership;
use wire::{MongoError, MongoResult};

use super::args::opt_bool;
use crate::migrations::migration::{expect_version, install, owned, range};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let on = opt_bool(cmd, "on")?.unwrap_or(true);
    if !cmd.contains_key("version") {
        return Err(MongoError::failed_to_parse("'version' must be an object"));
    }
    let (meta, _) = owned(ctx, cmd)?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let meta = ctx.node.catalog.get(&meta.ns()).unwrap_or(meta);
    let (_, owner) = owned(ctx, cmd)?;
    // Only the migration that began at this version may change it: a newer version means
    // the outcome is already known.
    expect_version(&meta, &owner, cmd)?;
    let critical = on.then(|| range(cmd)).transpose()?;
    if owner.critical != critical {
        install(
            ctx,
            &meta,
            Ownership {
                critical,
                ..(*owner).clone()
            },
        )?;
    }
    Ok(doc! {"critical": on})
}
