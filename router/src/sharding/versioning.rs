//! Shard versions at the router: every command on a sharded collection carries the
//! version of the routing table it was routed with, and a shard at another version
//! answers `StaleConfig` (13388) without running it (see `query::ownership`).
//!
//! On `StaleConfig` the router reads the collection's routing again; if the shard was
//! the one behind (it did not hear of a migration, or of the collection being sharded),
//! the router sends it its part at the new version. The command is then routed again,
//! within a bounded loop: a router that missed a migration still answers correctly.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use query::ownership::ShardVersion;
use wire::{ErrorCode, MongoError, MongoResult};

use super::routing::RoutingTable;
use super::{internal, Cluster};
use crate::shard_client::ShardHandle;

/// Commands that carry `shardVersion` (those that read or write documents).
pub const VERSIONED: &[&str] = &[
    "find",
    "count",
    "distinct",
    "aggregate",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
];

/// Times a command is routed again after `StaleConfig` before the error is returned.
pub const STALE_RETRIES: u32 = 10;

/// Adds the table's version to a command that carries one.
pub fn attach(name: &str, cmd: &mut Document, table: &RoutingTable) {
    if VERSIONED.contains(&name) {
        cmd.insert("shardVersion", table.shard_version().to_document());
    }
}

/// Marks a command on a collection believed unsharded as routed so; returns whether it
/// is a command that carries a version.
pub fn attach_unsharded(name: &str, cmd: &mut Document) -> bool {
    let carries = VERSIONED.contains(&name);
    if carries {
        cmd.insert("shardVersion", "UNSHARDED");
    }
    carries
}

/// Adds the database version a command routed to the database's primary shard carries
/// (`databaseVersion`; see `shard/src/catalog/db_placement.rs`).
pub fn attach_db_version(cmd: &mut Document, last_mod: i64) {
    cmd.insert("databaseVersion", doc! {"lastMod": last_mod});
}

/// A reply's `StaleDbVersion` error, if it is one: the shard is not (or not yet, or not
/// at this version) the database's primary shard, or a move of it is copying.
pub fn stale_db_error(reply: &Document) -> Option<MongoError> {
    if reply.get_i32("code") != Ok(ErrorCode::StaleDbVersion as i32) {
        return None;
    }
    let mut e = MongoError::new(
        ErrorCode::StaleDbVersion,
        reply.get_str("errmsg").unwrap_or("stale database version"),
    );
    if let Ok(info) = reply.get_document("errInfo") {
        e = e.with_extra(doc! {"errInfo": info.clone()});
    }
    Some(e)
}

/// How long a write waits for a `movePrimary` copying its database before the error is
/// returned (a client deadline ends it sooner).
const MOVE_PRIMARY_WAIT: Duration = Duration::from_secs(30);

/// A reply's `StaleConfig` error, if it is one: as the command's error, or (for a write
/// refused mid-batch as a migration began committing) as one of its write errors.
pub fn stale_error(reply: &Document) -> Option<MongoError> {
    let stale = ErrorCode::StaleConfig as i32;
    if reply.get_i32("code") == Ok(stale) {
        let mut e = MongoError::new(
            ErrorCode::StaleConfig,
            reply.get_str("errmsg").unwrap_or("stale config"),
        );
        if let Ok(info) = reply.get_document("errInfo") {
            e = e.with_extra(doc! {"errInfo": info.clone()});
        }
        return Some(e);
    }
    let stale_write = reply
        .get_array("writeErrors")
        .ok()?
        .iter()
        .filter_map(Bson::as_document)
        .find(|w| w.get_i32("code") == Ok(stale))?;
    Some(MongoError::new(
        ErrorCode::StaleConfig,
        stale_write.get_str("errmsg").unwrap_or("stale config"),
    ))
}

impl Cluster {
    /// Sends every shard owning a chunk of `table`'s collection its part (after sharding
    /// it, a split or a migration), so that none answers the next command as stale.
    /// Shards without chunks are sent no command on the collection and need none.
    pub async fn publish(&self, table: &RoutingTable) -> MongoResult<()> {
        for shard in table.all_shards() {
            self.push_ownership(&shard, table).await?;
        }
        Ok(())
    }

    /// Sends shard `name` its part of `table`'s collection at `table`'s version.
    pub async fn push_ownership(&self, name: &str, table: &RoutingTable) -> MongoResult<()> {
        let shard = self.shard(name).await?;
        let (db, coll) = table.ns.split_once('.').unwrap_or((&table.ns, ""));
        let cmd = doc! {
            "_shardsvrSetOwnership": coll,
            "ownership": table.ownership_of(name).to_document(),
        };
        internal(&shard.handle, db, &cmd, true).await.map(|_| ())
    }

    /// After `StaleConfig` from shard `shard` (when known): the routing to use next, once
    /// the shard, if it was behind, has been brought up to it. `None`: the collection is
    /// no longer sharded.
    pub async fn on_stale(
        &self,
        ns: &str,
        shard: Option<&str>,
        error: &MongoError,
        attempt: u32,
    ) -> MongoResult<Option<Arc<RoutingTable>>> {
        let info = error
            .extra
            .as_ref()
            .and_then(|x| x.get_document("errInfo").ok());
        if info.is_some_and(|i| i.get_bool("critical") == Ok(true)) || info.is_none() {
            // A migration is committing: its outcome is known within moments.
            tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt + 1))).await;
        }
        let Some(table) = self.refresh(ns).await? else {
            return Ok(None);
        };
        let wanted = info
            .and_then(|i| i.get_document("vWanted").ok())
            .and_then(|v| ShardVersion::from_document(v).ok());
        let shard_behind = match wanted {
            None => true,
            Some(w) => table.shard_version().newer_than(&w).unwrap_or(true),
        };
        if let (Some(shard), true) = (shard, shard_behind && info.is_some()) {
            self.push_ownership(shard, &table).await?;
        }
        Ok(Some(table))
    }
}

impl Cluster {
    /// Sends `cmd` (routed to `db`'s primary shard, which answered `first`, a
    /// `StaleDbVersion`) again to the primary the catalog names now, until one accepts
    /// it: a few times for a moved primary, and while a move's critical section lasts, up
    /// to `MOVE_PRIMARY_WAIT`. Returns the reply and the shard that gave it.
    pub async fn resend_to_primary(
        &self,
        db: &str,
        mut cmd: Document,
        fwd: &crate::shard_client::Forward,
        client: &str,
        first: MongoError,
    ) -> MongoResult<(Document, usize, crate::shard_client::Waits, ShardHandle)> {
        let started = std::time::Instant::now();
        let mut stale = first;
        for attempt in 0u32.. {
            let critical = stale
                .extra
                .as_ref()
                .and_then(|x| x.get_document("errInfo").ok())
                .is_some_and(|i| i.get_bool("critical") == Ok(true));
            let give_up = if critical {
                started.elapsed() >= MOVE_PRIMARY_WAIT
            } else {
                attempt >= STALE_RETRIES
            };
            if give_up {
                return Err(stale);
            }
            if critical || attempt > 0 {
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt.min(4) + 1))).await;
            }
            self.forget_primary(db);
            let (shard, version) = self.primary_at(db, fwd.writes).await?;
            match version {
                Some(v) => attach_db_version(&mut cmd, v),
                None => {
                    cmd.remove("databaseVersion");
                }
            }
            let (reply, member, waits) = shard.handle.run(db, &cmd, fwd, client).await?;
            match stale_db_error(&reply) {
                Some(again) => stale = again,
                None => return Ok((reply, member, waits, shard.handle.clone())),
            }
        }
        unreachable!("the loop returns")
    }
}

/// The shard a `StaleConfig` came from, as `scatter` records it in the error.
pub fn stale_shard(error: &MongoError) -> Option<String> {
    error
        .extra
        .as_ref()
        .and_then(|x| x.get_str("shardId").ok())
        .map(str::to_string)
}
