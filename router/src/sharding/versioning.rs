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

/// The shard a `StaleConfig` came from, as `scatter` records it in the error.
pub fn stale_shard(error: &MongoError) -> Option<String> {
    error
        .extra
        .as_ref()
        .and_then(|x| x.get_str("shardId").ok())
        .map(str::to_string)
}
