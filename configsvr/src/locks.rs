//! Migration locks (`config.migrations`): one migration, `movePrimary` or drop at a time
//! per collection or database. A lock names its owner, an operation running on the config
//! server primary (`context::Running`); a lock whose owner does not run there is an
//! orphan, recovered by `migration_recovery.rs`. Every step of a migration checks that
//! its lock is still its own, so a coordinator on a deposed primary stops at its next
//! step once the new primary took the lock over.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use router::sharding::catalog::{call, delete, find_all};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::{Ctx, Running};

/// Takes the lock `lock` (its `_id` the collection or database, its `owner` an operation
/// running here). `Ok(None)`: taken. `Ok(Some(orphan))`: the lock of an operation no
/// longer running; recover it, then take the lock again.
pub async fn take(ctx: &Ctx, lock: Document) -> MongoResult<Option<Document>> {
    let id = lock.get_str("_id").unwrap_or_default().to_string();
    match call(
        &ctx.config,
        doc! {"insert": "migrations", "documents": [lock]},
        true,
    )
    .await
    {
        Ok(_) => return Ok(None),
        Err(e) if e.code == ErrorCode::DuplicateKey as i32 => {}
        Err(e) => return Err(e),
    }
    let held = find_all(&ctx.config, "config", "migrations", doc! {"_id": &id}).await?;
    let orphan = held
        .into_iter()
        .next()
        .filter(|h| !ctx.is_running(h.get("owner")));
    orphan.map(Some).ok_or_else(|| {
        MongoError::new(
            ErrorCode::ConflictingOperationInProgress,
            format!("a migration of {id} is already in progress"),
        )
    })
}

/// How long an operation that waits its turn (`acquire`) waits for the lock's holder.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// Takes `lock` for an operation that waits its turn (a drop): an orphan is recovered
/// first, and a lock held by an operation running here is waited for, up to `LOCK_WAIT`.
pub async fn acquire(ctx: &Ctx, lock: &Document) -> MongoResult<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match take(ctx, lock.clone()).await {
            Ok(None) => return Ok(()),
            Ok(Some(orphan)) => {
                match Box::pin(crate::migrate::recover_orphan(ctx, &orphan)).await {
                    // Another recovery has it: wait for it as for any holder.
                    Err(e) if e.code != ErrorCode::LockBusy as i32 => return Err(e),
                    _ => {}
                }
            }
            Err(e) if e.code != ErrorCode::ConflictingOperationInProgress as i32 => return Err(e),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `work` under `lock` (taken as `acquire` takes it), for an operation that is
/// decided once it holds the lock: a failure keeps the lock, an orphan once this
/// operation ends, and the recovery pass finishes the work.
pub async fn decided(
    ctx: &Ctx,
    lock: &Document,
    work: impl std::future::Future<Output = MongoResult<()>>,
) -> MongoResult<()> {
    acquire(ctx, lock).await?;
    work.await?;
    release(ctx, lock).await
}

/// Takes over `orphan` for a recovery run as `running`: the lock changes owner only if it
/// is still exactly `orphan`. `Ok(Some(lock))`: ours now; `Ok(None)`: it changed (another
/// recovery took it, or it was released).
pub async fn take_over(
    ctx: &Ctx,
    orphan: &Document,
    running: &Running,
) -> MongoResult<Option<Document>> {
    let mut mine = orphan.clone();
    // Kept in this copy only: what the recovery fences off.
    mine.insert(
        "takenFrom",
        orphan.get("owner").cloned().unwrap_or(Bson::Null),
    );
    mine.insert("owner", running.owner);
    let update = doc! {"q": exactly(orphan), "u": {"$set": {"owner": running.owner}}};
    let reply = call(
        &ctx.config,
        doc! {"update": "migrations", "updates": [update]},
        true,
    )
    .await?;
    Ok((router::sharding::scatter::number(&reply, "nModified") == 1).then_some(mine))
}

/// The locks whose owner does not run on this primary.
pub async fn orphans(ctx: &Ctx) -> MongoResult<Vec<Document>> {
    let all = find_all(&ctx.config, "config", "migrations", doc! {}).await?;
    Ok(all
        .into_iter()
        .filter(|l| !ctx.is_running(l.get("owner")))
        .collect())
}

/// Checks that `lock` is still this operation's. Fails with `LockBusy` once a new primary
/// took it over: the operation must stop.
pub async fn confirm(ctx: &Ctx, lock: &Document) -> MongoResult<()> {
    let found = find_all(&ctx.config, "config", "migrations", exactly(lock)).await?;
    if found.is_empty() {
        return Err(MongoError::new(
            ErrorCode::LockBusy,
            format!(
                "the migration lock of {} was taken over",
                lock.get_str("_id").unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// Whether this operation still holds `lock`: false once a new primary took it over. A
/// failure to reach the config servers counts as held: nobody else can have it without
/// them.
pub async fn still_holds(ctx: &Ctx, lock: &Document) -> bool {
    match confirm(ctx, lock).await {
        Err(e) if e.code == ErrorCode::LockBusy as i32 => false,
        Err(e) => {
            tracing::warn!(error = %e, "checking a migration lock");
            true
        }
        Ok(()) => true,
    }
}

/// Releases `lock` (exactly that one: a lock taken over since stays).
pub async fn release(ctx: &Ctx, lock: &Document) -> MongoResult<()> {
    delete(&ctx.config, "migrations", exactly(lock)).await
}

/// Ends an operation whose outcome is `result`: releases `lock`, unless the operation
/// left work `unfinished` (then the lock stays, an orphan, for the recovery pass).
pub async fn release_unless(
    ctx: &Ctx,
    lock: &Document,
    unfinished: bool,
    result: MongoResult<()>,
) -> MongoResult<()> {
    if unfinished {
        return result;
    }
    let released = release(ctx, lock).await;
    result.and(released)
}

/// Matches exactly `lock`: its name and its owner.
fn exactly(lock: &Document) -> Document {
    doc! {
        "_id": lock.get("_id").cloned().unwrap_or(Bson::Null),
        "owner": lock.get("owner").cloned().unwrap_or(Bson::Null),
    }
}
