//! Moving a chunk from one shard to another, coordinated by the config server primary
//! (`moveChunk` and `moveRange` through `requests.rs`, the balancer). The state that must
//! survive a failover is in the catalog (the lock, the commit) and on the shards
//! (ownership, the critical section); a new primary recovers what the last one left.
//!
//! 1. Lock the collection's migrations (`config.migrations`) and bring every shard to
//!    the current version; give the recipient the collection's indexes.
//! 2. The donor starts recording the ids written to the collection; the range's
//!    documents are copied to the recipient in `_id` order while writes go on.
//! 3. Catch up: the recorded changes are sent again (the documents as they are now, or
//!    their deletion) until few remain.
//! 4. Critical section: the donor refuses writes to the collection (retried by routers
//!    once the outcome is known), and a last catch-up leaves nothing behind. The donor's
//!    retryable-write history goes to the recipient, so retries are still recognised.
//! 5. Commit on the config servers: the chunk names the recipient at a new major
//!    version. Every shard hears its new part; the donor's critical section ends.
//! 6. The donor deletes its copy of the range (orphans, invisible to reads meanwhile).
//!
//! Until the commit the recipient's copy is orphaned data it skips on reads; a failure
//! before it ends the critical section and deletes that copy, and the chunk stays where
//! it was. A lock whose coordinator no longer runs (its primary stepped down or died) is an
//! orphan: the primary's recovery pass (`migration_recovery.rs`, or the next migration of
//! the collection) takes it over and finishes the work (`recover`): the commit decides
//! whether the migration happened. A coordinator on a deposed primary cannot interfere
//! afterwards: its lock checks fail, the recovery fences its commit off in the catalog,
//! and every step it sends names the collection version it began at, which the shards
//! refuse once the recovery moved them on (`shard/src/migrations/migration.rs`,
//! `expect_version`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{doc, Bson, Document};
use query::ownership::ShardVersion;
use query::shard_key::KeyValue;
use wire::{ErrorCode, MongoError, MongoResult};

use router::shard_client::ShardHandle;
use router::sharding::routing::{Chunk, RoutingTable};
use router::sharding::{catalog, internal, scatter, Shard};

use crate::context::Ctx;
use crate::locks;
use crate::shard_ddl::{create_indexes, index_copies, list_indexes};
/// Catch-up rounds before the critical section, whatever remains.
const CATCH_UP_ROUNDS: usize = 20;
/// Changes left in a round small enough to finish inside the critical section.
const SMALL_ROUND: usize = 100;

/// Moves the chunk `[min, max)` of `ns` to shard `to`; a range inside one chunk is split
/// off it first. Returns once the donor's copy is deleted.
pub async fn move_range(
    cluster: &Ctx,
    ns: &str,
    min: &KeyValue,
    max: Option<&KeyValue>,
    to: &str,
) -> MongoResult<()> {
    let table = routing(cluster, ns).await?;
    let chunk = table.chunk_for_key(min).clone();
    let max = max.cloned().unwrap_or_else(|| chunk.max.clone());
    let cmp = query::order::compare_arrays;
    if cmp(&max, &chunk.max).is_gt() || cmp(min, &max).is_ge() {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!(
                "the range to move must lie inside one chunk of {ns}; the chunk holding min \
                 ends at {}",
                table.key.to_document(&chunk.max)
            ),
        ));
    }
    let recipient = cluster.shard(to).await?;
    if chunk.shard == recipient.name {
        return Ok(());
    }
    for cut in [min, &max] {
        let table = routing(cluster, ns).await?;
        let holder = table.chunk_for_key(cut).clone();
        if cmp(&holder.min, cut).is_lt() {
            catalog::split_chunk(&cluster.config, &table, &holder, cut).await?;
        }
    }
    let mut table = routing(cluster, ns).await?;
    let chunk = table.chunk_for_key(min).clone();
    let donor = cluster.shard(&chunk.shard).await?;
    let running = cluster.run_as();
    let lock = doc! {
        "_id": ns, "owner": running.owner,
        "donor": &donor.name, "recipient": &recipient.name,
        "min": chunk.min.clone(), "max": chunk.max.clone(),
    };
    if let Some(orphan) = locks::take(cluster, lock.clone()).await? {
        recover_orphan(cluster, &orphan).await?;
        if locks::take(cluster, lock.clone()).await?.is_some() {
            return Err(MongoError::new(
                ErrorCode::ConflictingOperationInProgress,
                format!("a migration of {ns} is already in progress"),
            ));
        }
        // The recovery may have moved chunks: route from what the catalog says now.
        table = routing(cluster, ns).await?;
        let now = table.chunk_for_key(min);
        if now.shard == recipient.name && now.min == chunk.min {
            // The recovered migration was this one (run again after a failover), and
            // it had committed.
            return locks::release(cluster, &lock).await;
        }
        if now.shard != chunk.shard || now.min != chunk.min {
            locks::release(cluster, &lock).await?;
            return Err(MongoError::new(
                ErrorCode::ConflictingOperationInProgress,
                format!(
                    "the chunks of {ns} changed while an abandoned migration was recovered; retry"
                ),
            ));
        }
    }
    let m = Migration::new(cluster, &table, &chunk, &donor, &recipient, &lock);
    let moved = m.run().await;
    locks::release_unless(cluster, &lock, m.unfinished.load(Ordering::SeqCst), moved).await
}

/// Takes over `orphan`, the lock of a coordinator that no longer runs, recovers its
/// migration or `movePrimary` (or finishes its drop), and releases the lock. Fails with `LockBusy` when the lock
/// changed meanwhile (another recovery took it over).
pub async fn recover_orphan(cluster: &Ctx, orphan: &Document) -> MongoResult<()> {
    let running = cluster.run_as();
    let Some(lock) = locks::take_over(cluster, orphan, &running).await? else {
        return Err(MongoError::new(
            ErrorCode::LockBusy,
            format!(
                "the abandoned migration of {} is being recovered already",
                orphan.get_str("_id").unwrap_or_default()
            ),
        ));
    };
    match lock.get_str("drop") {
        Ok(crate::drop_collection::KIND) => crate::drop_collection::recover(cluster, &lock).await?,
        Ok(crate::drop_database::KIND) => crate::drop_database::recover(cluster, &lock).await?,
        _ if lock.get_bool("movePrimary") == Ok(true) => {
            crate::move_primary::recover(cluster, &lock).await?
        }
        _ => recover(cluster, &lock).await?,
    }
    locks::release(cluster, &lock).await
}

/// Finishes what a coordinator that stopped left (`lock`, now this primary's): if its
/// commit is in the catalog, the shards learn it and the donor deletes its copy.
/// Otherwise its commit is fenced off first (it may only have stalled), both shards learn
/// the fenced version (which refuses its steps), and the migration is abandoned: the
/// donor takes writes again and the recipient's copy goes.
async fn recover(cluster: &Ctx, lock: &Document) -> MongoResult<()> {
    let ns = lock.get_str("_id").unwrap_or_default();
    let field = |f: &str| lock.get_str(f).unwrap_or_default().to_string();
    let bound = |f: &str| lock.get_array(f).cloned().unwrap_or_default();
    let donor = cluster.shard(&field("donor")).await?;
    let recipient = cluster.shard(&field("recipient")).await?;
    let chunk = Chunk {
        min: bound("min"),
        max: bound("max"),
        shard: donor.name.clone(),
    };
    let committed = |t: &RoutingTable| t.chunk_for_key(&chunk.min).shard == recipient.name;
    let mut table = routing(cluster, ns).await?;
    if !committed(&table) {
        catalog::fence_migration(&cluster.config, &table, &chunk).await?;
        // Fenced, or committed just before the fence: the catalog says which.
        table = routing(cluster, ns).await?;
    }
    let m = Migration::new(cluster, &table, &chunk, &donor, &recipient, lock);
    tracing::info!(%ns, donor = %donor.name, recipient = %recipient.name, "recovering an abandoned migration");
    if committed(&table) {
        return m.finish(&table).await;
    }
    cluster.push_ownership(&donor.name, &table).await?;
    cluster.push_ownership(&recipient.name, &table).await?;
    if !m.abandon(true).await {
        return Err(MongoError::new(
            ErrorCode::HostUnreachable,
            format!("abandoning the migration of {ns} left work undone; the next pass retries"),
        ));
    }
    Ok(())
}

async fn routing(cluster: &Ctx, ns: &str) -> MongoResult<std::sync::Arc<RoutingTable>> {
    cluster.refresh(ns).await?.ok_or_else(|| {
        MongoError::new(
            ErrorCode::NamespaceNotFound,
            format!("{ns} is not a sharded collection"),
        )
    })
}

struct Migration<'a> {
    cluster: &'a Ctx,
    table: &'a RoutingTable,
    chunk: &'a Chunk,
    donor: &'a Shard,
    recipient: &'a Shard,
    /// The `config.migrations` lock this coordinator holds.
    lock: &'a Document,
    /// An abandon left work undone: the lock must stay for the recovery pass.
    unfinished: AtomicBool,
}

impl<'a> Migration<'a> {
    fn new(
        cluster: &'a Ctx,
        table: &'a RoutingTable,
        chunk: &'a Chunk,
        donor: &'a Shard,
        recipient: &'a Shard,
        lock: &'a Document,
    ) -> Migration<'a> {
        Migration {
            cluster,
            table,
            chunk,
            donor,
            recipient,
            lock,
            unfinished: AtomicBool::new(false),
        }
    }

    fn db_coll(&self) -> (&str, &str) {
        self.table
            .ns
            .split_once('.')
            .unwrap_or((&self.table.ns, ""))
    }

    /// A command on the collection for `shard`, with the chunk's bounds and the version
    /// the migration began at (unless `extra` names another).
    async fn on(&self, shard: &Shard, name: &str, mut extra: Document) -> MongoResult<Document> {
        let (db, coll) = self.db_coll();
        let mut cmd = doc! {
            name: coll, "min": self.chunk.min.clone(), "max": self.chunk.max.clone(),
            "version": self.table.shard_version().to_document(),
        };
        cmd.extend(std::mem::take(&mut extra));
        internal(&shard.handle, db, &cmd, true).await
    }

    async fn run(&self) -> MongoResult<()> {
        self.cluster.publish(self.table).await?;
        // The recipient skips its copy on reads from the start, even if it owns nothing.
        self.cluster
            .push_ownership(&self.recipient.name, self.table)
            .await?;
        self.copy_indexes().await?;
        let critical = AtomicBool::new(false);
        if let Err(e) = self.copy(&critical).await {
            let critical = critical.load(Ordering::SeqCst);
            return Err(self.abandoned(critical, e).await);
        }
        // A coordinator whose lock was taken over stops here: the recovery decides.
        self.renew().await?;
        if let Err(e) = catalog::commit_move(
            &self.cluster.config,
            self.table,
            self.chunk,
            &self.recipient.name,
        )
        .await
        {
            // The outcome is what the catalog says now.
            let now = routing(self.cluster, &self.table.ns).await?;
            if now.chunk_for_key(&self.chunk.min).shard != self.recipient.name {
                return Err(self.abandoned(true, e).await);
            }
        }
        let committed = routing(self.cluster, &self.table.ns).await?;
        self.finish(&committed).await
    }

    /// After the commit: every shard involved learns `committed`, and the donor stops
    /// recording and deletes its copy.
    async fn finish(&self, committed: &RoutingTable) -> MongoResult<()> {
        if !self.still_ours().await {
            tracing::info!(ns = %self.table.ns, "the migration committed; the recovery that took it over finishes it");
            return Ok(());
        }
        self.cluster.publish(committed).await?;
        // The donor may own nothing now; it still has to learn that.
        self.cluster
            .push_ownership(&self.donor.name, committed)
            .await?;
        let version = committed.shard_version().to_document();
        self.on(
            self.donor,
            "_shardsvrMoveLog",
            doc! {"on": false, "version": version},
        )
        .await?;
        self.delete_range(self.donor).await
    }

    /// Whether this coordinator still holds its lock.
    async fn still_ours(&self) -> bool {
        locks::still_holds(self.cluster, self.lock).await
    }

    /// Stops the migration once a new primary took its lock over.
    async fn renew(&self) -> MongoResult<()> {
        locks::confirm(self.cluster, self.lock).await
    }

    async fn copy_indexes(&self) -> MongoResult<()> {
        let (db, coll) = self.db_coll();
        let specs = index_copies(list_indexes(&self.donor.handle, db, coll).await?);
        if specs.is_empty() {
            return Ok(());
        }
        create_indexes(&self.recipient.handle, db, coll, specs).await
    }

    /// Steps 2 to 4: everything up to the commit.
    async fn copy(&self, critical: &AtomicBool) -> MongoResult<()> {
        self.on(self.donor, "_shardsvrMoveLog", doc! {"on": true})
            .await?;
        self.relay("_shardsvrMoveClone", "docs", "_shardsvrApplyMoved")
            .await?;
        for _ in 0..CATCH_UP_ROUNDS {
            self.renew().await?;
            if self.catch_up().await? < SMALL_ROUND {
                break;
            }
        }
        self.renew().await?;
        let version = self.table.shard_version().to_document();
        critical.store(true, Ordering::SeqCst);
        self.on(
            self.donor,
            "_shardsvrCriticalSection",
            doc! {"on": true, "version": version},
        )
        .await?;
        while self.catch_up().await? > 0 {}
        self.copy_sessions().await
    }

    /// Gives the recipient the donor's retryable-write history, so that a retry of a
    /// write that ran on the donor is recognised once its document lives on the recipient.
    async fn copy_sessions(&self) -> MongoResult<()> {
        self.relay("_shardsvrMoveSessions", "records", "_shardsvrMergeSessions")
            .await
    }

    /// Pages through `donor_cmd` on the donor and hands each page's `field` to
    /// `recipient_cmd` on the recipient, renewing the lock after each.
    async fn relay(&self, donor_cmd: &str, field: &str, recipient_cmd: &str) -> MongoResult<()> {
        let (db, coll) = self.db_coll();
        let bounds = doc! {"min": self.chunk.min.clone(), "max": self.chunk.max.clone()};
        let version = doc! {"version": self.table.shard_version().to_document()};
        let mut from = doc! {donor_cmd: coll};
        from.extend(bounds.clone());
        from.extend(version.clone());
        let mut into = doc! {recipient_cmd: coll};
        into.extend(bounds);
        into.extend(version);
        let pages = Pages {
            donor: &self.donor.handle,
            recipient: &self.recipient.handle,
            db,
        };
        pages.relay(from, field, into, || self.renew()).await
    }

    /// Sends the recipient one round of the donor's recorded changes; returns how many
    /// there were, counting those still waiting.
    async fn catch_up(&self) -> MongoResult<usize> {
        let mods = self.on(self.donor, "_shardsvrMoveMods", doc! {}).await?;
        let upserts = mods.get_array("upserts").cloned().unwrap_or_default();
        let deletes = mods.get_array("deletes").cloned().unwrap_or_default();
        let n = upserts.len() + deletes.len();
        if n > 0 {
            self.on(
                self.recipient,
                "_shardsvrApplyMoved",
                doc! {"docs": upserts, "deletes": deletes},
            )
            .await?;
        }
        Ok(n + scatter::number(&mods, "pending") as usize)
    }

    /// Abandons after `e`, the error to report; an abandon left unfinished marks the
    /// migration `unfinished`, so that its lock stays for the recovery pass.
    async fn abandoned(&self, critical: bool, e: MongoError) -> MongoError {
        if !self.abandon(critical).await {
            self.unfinished.store(true, Ordering::SeqCst);
        }
        e
    }

    /// Gives up before the commit: the donor takes writes again and the recipient drops
    /// its partial copy. Returns whether both happened. If not, the lock must stay, an
    /// orphan once this operation ends: the recovery pass then abandons again, and no other migration of the
    /// collection starts meanwhile (its commit would bring the leftover copy back to
    /// life). A coordinator whose lock was taken over does nothing: the recovery did
    /// this, and a migration after it may be using the same range.
    async fn abandon(&self, critical: bool) -> bool {
        if !self.still_ours().await {
            tracing::warn!(ns = %self.table.ns, "not abandoning a migration a recovery took over");
            return true;
        }
        let resumed = !critical || self.end_critical_section().await;
        // Unversioned: the donor may have moved on, and this coordinator holds the lock. Only
        // memory is at stake (the donor's recording), so this one is best effort.
        let _ = self
            .on(
                self.donor,
                "_shardsvrMoveLog",
                doc! {"on": false, "version": Bson::Null},
            )
            .await;
        let deleted = self.delete_range(self.recipient).await;
        if let Err(e) = &deleted {
            tracing::warn!(ns = %self.table.ns, error = %e, "abandoning a migration: the recipient's copy stays until the recovery pass");
        }
        resumed && deleted.is_ok()
    }

    /// Ends the donor's critical section at the version the migration began at or, if the
    /// donor has moved on since (a split elsewhere in the collection), at the catalog's.
    async fn end_critical_section(&self) -> bool {
        let off = |version: ShardVersion| doc! {"on": false, "version": version.to_document()};
        let at_start = self.table.shard_version();
        let first = self
            .on(self.donor, "_shardsvrCriticalSection", off(at_start))
            .await;
        if first.is_ok() {
            return true;
        }
        let Ok(now) = routing(self.cluster, &self.table.ns).await else {
            return false;
        };
        if now.chunk_for_key(&self.chunk.min).shard != self.donor.name {
            return false;
        }
        if let Err(e) = self.cluster.push_ownership(&self.donor.name, &now).await {
            tracing::warn!(ns = %self.table.ns, error = %e, "ending a critical section");
            return false;
        }
        let again = self
            .on(
                self.donor,
                "_shardsvrCriticalSection",
                off(now.shard_version()),
            )
            .await;
        if let Err(e) = &again {
            tracing::warn!(ns = %self.table.ns, error = %e, "ending a critical section: writes stay held until the recovery pass");
        }
        again.is_ok()
    }

    /// Deletes `shard`'s documents of the range, batch by batch (it no longer owns it).
    async fn delete_range(&self, shard: &Shard) -> MongoResult<()> {
        let mut after = Bson::Null;
        loop {
            let reply = self
                .on(shard, "_shardsvrDeleteRange", doc! {"after": after})
                .await?;
            if reply.get_bool("deferred") == Ok(true) {
                // A cursor opened before the commit still reads there: the shard's range
                // deleter finishes once it is gone.
                tracing::info!(ns = %self.table.ns, shard = %shard.name, "range deletion deferred until older cursors close");
            }
            if !reply.get_bool("more").unwrap_or(false) {
                return Ok(());
            }
            after = reply.get("next").cloned().unwrap_or(Bson::Null);
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Copies pages of something a donor shard holds to a recipient shard (a migration's
/// documents and session records, a `movePrimary`'s collections).
pub struct Pages<'a> {
    pub donor: &'a ShardHandle,
    pub recipient: &'a ShardHandle,
    pub db: &'a str,
}

impl Pages<'_> {
    /// Pages through `from` on the donor (`after` → `next`) and hands each page's `field`
    /// to `into` on the recipient, calling `renew` (the caller's lock) after each.
    pub async fn relay<F, R>(
        &self,
        from: Document,
        field: &str,
        into: Document,
        renew: F,
    ) -> MongoResult<()>
    where
        F: Fn() -> R,
        R: std::future::Future<Output = MongoResult<()>>,
    {
        let mut after = Bson::Null;
        loop {
            let mut ask = from.clone();
            ask.insert("after", after);
            let page = internal(self.donor, self.db, &ask, true).await?;
            let items = page.get_array(field).cloned().unwrap_or_default();
            if !items.is_empty() {
                let mut give = into.clone();
                give.insert(field, items);
                internal(self.recipient, self.db, &give, true).await?;
            }
            renew().await?;
            after = page.get("next").cloned().unwrap_or(Bson::Null);
            if after == Bson::Null {
                return Ok(());
            }
        }
    }
}
