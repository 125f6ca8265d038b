//! `_shardsvrDeleteRange`: deletes one batch of a range's documents that this shard does
//! not own: the donor's copy after a migration committed, or the recipient's partial
//! copy after one was abandoned. A document the shard owns is never deleted here, nor one
//! a reader at an older ownership may still return: when such documents remain, the range
//! is left to the background range deleter (`deferred: true`; see `range_deleter`), and
//! so is all of it while one of the shard's secondaries still reads it. Each batch goes on
//! from the record key the previous one returned (`next`, sent back as `after`).

use bson::{doc, Document};
use wire::MongoResult;

use crate::migrations::migration::{owned, range};
use crate::migrations::range_deleter::{
    defer, delete_batch, secondary_readers, wait_for_older_readers, SecondaryReaders,
};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (meta, _) = owned(ctx, cmd)?;
    let (min, max) = range(cmd)?;
    // A secondary still reading the range (or one that cannot be asked) leaves all of it
    // to the background pass, which asks again.
    if secondary_readers(ctx.node, &meta, &min, &max) != SecondaryReaders::None {
        defer(ctx.engine, &meta, &min, &max)?;
        return Ok(doc! {"deleted": 0_i64, "more": false, "deferred": true});
    }
    // Commands still in flight at the old ownership end within moments: waited for, so
    // the usual deletion finishes here rather than in the background.
    wait_for_older_readers(&meta);
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    let (meta, owner) = owned(ctx, cmd)?;
    let after = cmd.get_binary_generic("after").ok().map(Vec::as_slice);
    let b = delete_batch(ctx.engine, &meta, &owner, &min, &max, after)?;
    // Kept documents are left to the background pass, which goes over the whole range
    // again once their readers are gone.
    if b.kept {
        defer(ctx.engine, &meta, &min, &max)?;
    }
    let mut reply = doc! {"deleted": b.deleted as i64, "more": b.more, "deferred": b.kept};
    if let Some(next) = b.next {
        reply.insert(
            "next",
            bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: next,
            },
        );
    }
    Ok(reply)
}
