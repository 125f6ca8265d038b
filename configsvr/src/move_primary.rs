//! Moving a database's primary shard (`movePrimary`): its unsharded collections go to
//! another shard, coordinated by the config server primary. As with a migration, the
//! state that must outlive a failover is in the catalog (the lock, the commit) and on the
//! shards (their placements, the critical section).
//!
//! 1. Lock the database (`config.migrations`, under its name) at its version `v`.
//! 2. The recipient learns it will be primary from `v + 1`; it is sent nothing as primary
//!    before the commit, so this changes nothing yet, and it is ready when routers come.
//! 3. Critical section on the donor: writes routed to it as the database's primary
//!    (carrying `databaseVersion`) are refused with `StaleDbVersion` marked `critical`,
//!    and routers wait; it begins once the writes in progress are done. Reads go on.
//! 4. Every unsharded collection is copied whole (options, indexes, documents in `_id`
//!    order); every sharded one is created on the recipient with its indexes and its
//!    ownership (none of its chunks move), so the new primary lists it and refuses
//!    commands that treat it as unsharded. The donor's retryable-write history follows, so
//!    a retry of a write that ran on the donor applies once on the recipient.
//! 5. Commit: `config.databases` names the recipient at `v + 1`, if it still names the
//!    donor at `v` (it happens once).
//! 6. The donor learns it is no longer primary (commands routed to it get
//!    `StaleDbVersion`, and routers read the primary again), and drops its copies.
//!
//! A failure before the commit ends the critical section and drops the recipient's
//! copies; the database stays where it was. A lock whose coordinator no longer runs is an
//! orphan: the primary's recovery pass (`migration_recovery.rs`, or the next `movePrimary`
//! of the database) takes it over and finishes the work (`recover`): the commit decides
//! whether the move happened. Before abandoning, the recovery fences the old
//! coordinator's commit off (`config.databases` `fencedMoves`), and that coordinator's
//! lock checks fail, so it stops.

use std::sync::atomic::{AtomicBool, Ordering};

use bson::{doc, Bson, Document};
use router::sharding::{catalog, internal, scatter, Shard};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Ctx;
use crate::locks;
use crate::migrate::Pages;
use crate::shard_ddl::{create_indexes, index_copies, list_indexes};

/// Moves `db`'s primary shard to `to`. Returns once the donor's copies are dropped.
pub async fn move_primary(cluster: &Ctx, db: &str, to: &str) -> MongoResult<()> {
    let recipient = cluster.shard(to).await?;
    // A second pass only after recovering an abandoned move, which may have moved it.
    for _ in 0..2 {
        let Some((from, version)) = catalog::database_primary(&cluster.config, db).await? else {
            return Err(MongoError::new(
                ErrorCode::NamespaceNotFound,
                format!("Database {db} not found"),
            ));
        };
        if from == recipient.name {
            return Ok(());
        }
        let donor = cluster.shard(&from).await?;
        let running = cluster.run_as();
        let lock = doc! {
            "_id": db, "owner": running.owner, "movePrimary": true,
            "donor": &donor.name, "recipient": &recipient.name, "lastMod": version,
        };
        if let Some(orphan) = locks::take(cluster, lock.clone()).await? {
            crate::migrate::recover_orphan(cluster, &orphan).await?;
            continue;
        }
        let m = Move {
            cluster,
            db,
            donor: &donor,
            recipient: &recipient,
            version,
            lock: &lock,
            unfinished: AtomicBool::new(false),
        };
        let moved = m.run().await;
        cluster.forget_primary(db);
        let unfinished = m.unfinished.load(Ordering::SeqCst);
        return locks::release_unless(cluster, &lock, unfinished, moved).await;
    }
    Err(MongoError::new(
        ErrorCode::ConflictingOperationInProgress,
        format!("a movePrimary of {db} is already in progress"),
    ))
}

/// Finishes what a coordinator that stopped left (`lock`, now this primary's): if its
/// commit is in the catalog, the donor learns it and drops its copies; otherwise its
/// commit is fenced off and the move is abandoned.
pub async fn recover(cluster: &Ctx, lock: &Document) -> MongoResult<()> {
    let db = lock.get_str("_id").unwrap_or_default();
    let field = |f: &str| lock.get_str(f).unwrap_or_default().to_string();
    let m = Move {
        cluster,
        db,
        donor: &*cluster.shard(&field("donor")).await?,
        recipient: &*cluster.shard(&field("recipient")).await?,
        version: lock.get_i64("lastMod").unwrap_or(1),
        lock,
        unfinished: AtomicBool::new(false),
    };
    tracing::info!(%db, donor = %m.donor.name, recipient = %m.recipient.name, "recovering an abandoned movePrimary");
    let committed = |primary: Option<(String, i64)>| {
        primary.is_some_and(|(now, v)| now == m.recipient.name && v == m.version + 1)
    };
    if committed(catalog::database_primary(&cluster.config, db).await?) {
        return m.finish().await;
    }
    let stalled = lock.get("takenFrom").cloned().unwrap_or(Bson::Null);
    catalog::fence_move_primary(&cluster.config, db, &stalled).await?;
    // Fenced, or committed just before the fence: the catalog says which.
    if committed(catalog::database_primary(&cluster.config, db).await?) {
        return m.finish().await;
    }
    m.abandon().await;
    if m.unfinished.load(Ordering::SeqCst) {
        return Err(MongoError::new(
            ErrorCode::HostUnreachable,
            format!("abandoning the movePrimary of {db} left work undone; the next pass retries"),
        ));
    }
    Ok(())
}

struct Move<'a> {
    cluster: &'a Ctx,
    db: &'a str,
    donor: &'a Shard,
    recipient: &'a Shard,
    /// The database version the move starts from (the recipient's is one more).
    version: i64,
    /// The `config.migrations` lock this coordinator holds.
    lock: &'a Document,
    /// An abandon left work undone: the lock must stay for the recovery pass.
    unfinished: AtomicBool,
}

/// A collection as the donor lists it, and whether the catalog has it sharded.
struct Collection {
    name: String,
    options: Document,
    sharded: bool,
}

impl Move<'_> {
    async fn placement(
        &self,
        shard: &Shard,
        primary: bool,
        version: i64,
        critical: bool,
    ) -> MongoResult<()> {
        let cmd = doc! {
            "_shardsvrDbPlacement": 1, "primary": primary,
            "lastMod": version, "critical": critical,
        };
        internal(&shard.handle, self.db, &cmd, true)
            .await
            .map(|_| ())
    }

    /// Whether this coordinator still holds its lock.
    async fn still_ours(&self) -> bool {
        locks::still_holds(self.cluster, self.lock).await
    }

    /// Stops the move once a new primary took its lock over.
    async fn renew(&self) -> MongoResult<()> {
        locks::confirm(self.cluster, self.lock).await
    }

    async fn run(&self) -> MongoResult<()> {
        // Checked before anything changes: a failure after this drops the recipient's
        // copies, which must never be a collection it had before.
        let on_recipient = self.collections(self.recipient).await?;
        for c in self.collections(self.donor).await? {
            if !c.sharded && on_recipient.iter().any(|r| r.name == c.name) {
                return Err(MongoError::new(
                    ErrorCode::NamespaceExists,
                    format!(
                        "cannot move {}.{} to shard {}: it already has a collection of that name",
                        self.db, c.name, self.recipient.name
                    ),
                ));
            }
        }
        let copied = self.copy().await;
        if let Err(e) = copied {
            self.abandon().await;
            return Err(e);
        }
        // A coordinator whose lock was taken over stops here: the recovery decides.
        self.renew().await?;
        let committed = catalog::move_primary(
            &self.cluster.config,
            self.db,
            &self.donor.name,
            &self.recipient.name,
            self.version,
            self.lock.get("owner").unwrap_or(&Bson::Null),
        )
        .await;
        match committed {
            Ok(true) => self.finish().await,
            Ok(false) => {
                self.abandon().await;
                Err(MongoError::new(
                    ErrorCode::ConflictingOperationInProgress,
                    format!(
                        "the primary shard of {} changed during movePrimary",
                        self.db
                    ),
                ))
            }
            Err(e) => {
                // The outcome is what the catalog says now.
                match catalog::database_primary(&self.cluster.config, self.db).await? {
                    Some((now, _)) if now == self.recipient.name => self.finish().await,
                    _ => {
                        self.abandon().await;
                        Err(e)
                    }
                }
            }
        }
    }

    /// Steps 2 to 4: everything up to the commit.
    async fn copy(&self) -> MongoResult<()> {
        self.placement(self.recipient, true, self.version + 1, false)
            .await?;
        self.placement(self.donor, true, self.version, true).await?;
        // Listed once writes have stopped: no collection appears on the donor after this.
        let on_recipient: Vec<String> = self
            .collections(self.recipient)
            .await?
            .into_iter()
            .map(|c| c.name)
            .collect();
        for c in self.collections(self.donor).await? {
            if !on_recipient.contains(&c.name) {
                let mut create = doc! {"create": &c.name};
                create.extend(c.options.clone());
                internal(&self.recipient.handle, self.db, &create, true).await?;
            }
            let specs = index_copies(list_indexes(&self.donor.handle, self.db, &c.name).await?);
            if !specs.is_empty() {
                create_indexes(&self.recipient.handle, self.db, &c.name, specs).await?;
            }
            if c.sharded {
                self.give_ownership(&c.name).await?;
                continue;
            }
            self.pages()
                .relay(
                    doc! {"_shardsvrMoveClone": &c.name},
                    "docs",
                    doc! {"_shardsvrApplyMoved": &c.name},
                    || self.renew(),
                )
                .await?;
        }
        self.pages()
            .relay(
                doc! {"_shardsvrMoveSessions": 1},
                "records",
                doc! {"_shardsvrMergeSessions": 1},
                || self.renew(),
            )
            .await
    }

    fn pages(&self) -> Pages<'_> {
        Pages {
            donor: &self.donor.handle,
            recipient: &self.recipient.handle,
            db: self.db,
        }
    }

    /// The recipient learns its part (possibly nothing) of the sharded collection `coll`.
    async fn give_ownership(&self, coll: &str) -> MongoResult<()> {
        let ns = format!("{}.{coll}", self.db);
        if let Some(table) = self.cluster.refresh(&ns).await? {
            self.cluster
                .push_ownership(&self.recipient.name, &table)
                .await?;
        }
        Ok(())
    }

    /// The collections `shard` holds of the database, and which of them are sharded.
    async fn collections(&self, shard: &Shard) -> MongoResult<Vec<Collection>> {
        let reply = internal(&shard.handle, self.db, &doc! {"listCollections": 1}, false).await?;
        let (_, listed) = scatter::first_batch(&reply)?;
        let mut out = Vec::new();
        for c in listed {
            let name = c.get_str("name").unwrap_or_default().to_string();
            if name.is_empty() || name.starts_with("system.") {
                continue;
            }
            let ns = format!("{}.{name}", self.db);
            out.push(Collection {
                sharded: self.cluster.refresh(&ns).await?.is_some(),
                options: c.get_document("options").cloned().unwrap_or_default(),
                name,
            });
        }
        Ok(out)
    }

    /// After the commit: the donor learns it is no longer primary and drops its copies of
    /// the unsharded collections (its chunks of sharded ones stay).
    async fn finish(&self) -> MongoResult<()> {
        if !self.still_ours().await {
            tracing::info!(db = %self.db, "the movePrimary committed; the recovery that took it over finishes it");
            return Ok(());
        }
        self.placement(self.recipient, true, self.version + 1, false)
            .await?;
        self.placement(self.donor, false, self.version + 1, false)
            .await?;
        self.cluster.forget_primary(self.db);
        self.drop_copies(self.donor).await
    }

    /// Drops from `shard` the donor's unsharded collections: the donor's own after the
    /// commit, the recipient's copies of them when abandoning.
    async fn drop_copies(&self, shard: &Shard) -> MongoResult<()> {
        for c in self.collections(self.donor).await? {
            if c.sharded {
                continue;
            }
            let dropped = internal(&shard.handle, self.db, &doc! {"drop": &c.name}, true).await;
            match dropped {
                Err(e) if e.code != ErrorCode::NamespaceNotFound as i32 => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Gives up before the commit: the donor takes writes again and the recipient drops
    /// its copies. If a step fails, the move is marked `unfinished`: its lock stays, an
    /// orphan once this operation ends, and the recovery pass abandons again. A coordinator whose lock was taken
    /// over does nothing: the recovery does this.
    async fn abandon(&self) {
        if !self.still_ours().await {
            tracing::warn!(db = %self.db, "not abandoning a movePrimary a recovery took over");
            return;
        }
        let steps = async {
            self.placement(self.donor, true, self.version, false)
                .await?;
            self.drop_copies(self.recipient).await?;
            self.placement(self.recipient, false, self.version, false)
                .await
        };
        if let Err(e) = steps.await {
            tracing::warn!(db = %self.db, error = %e, "abandoning movePrimary left work undone; the recovery pass retries");
            self.unfinished.store(true, Ordering::SeqCst);
        }
    }
}
