//! `shardCollection`: makes a collection sharded by a key. The router checks the
//! command and asks the config servers to run it (`sharding::coordination`; the work is
//! in `configsvr::shard_collection`).
//!
//! The collection is created on its database's primary shard if needed, and must have an
//! index starting with the key unless it is empty (then the index is created). A hashed
//! key on an empty collection starts with chunks spread evenly over every shard
//! (`numInitialChunks`, default two per shard); any other starts as one chunk on the
//! primary shard. Shards that receive chunks get the collection and its indexes first;
//! the catalog entry, written last, makes the new routing live.

use bson::{doc, Document};
use query::shard_key::ShardKey;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::coordination::{self, Request};
use crate::sharding::{admin_only, catalog, require};

/// What a `shardCollection` asks for, checked.
pub struct Spec<'a> {
    pub ns: &'a str,
    pub db: &'a str,
    pub coll: &'a str,
    pub key: ShardKey,
    pub unique: bool,
}

/// Checks `cmd` (the router does before it asks the config servers, which check again).
pub fn parse(cmd: &Document) -> MongoResult<Spec<'_>> {
    let ns = cmd
        .get_str("shardCollection")
        .or_else(|_| cmd.get_str("shardcollection"))
        .map_err(|_| MongoError::type_mismatch("'shardCollection' must be a namespace string"))?;
    let Some((db, coll)) = ns
        .split_once('.')
        .filter(|(d, c)| !d.is_empty() && !c.is_empty())
    else {
        return Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid namespace specified '{ns}'"),
        ));
    };
    if db == "admin" || db == "config" || coll.starts_with("system.") {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            format!("can't shard {ns}"),
        ));
    }
    let key = ShardKey::parse(
        cmd.get_document("key")
            .map_err(|_| MongoError::failed_to_parse("'key' must be an object"))?,
    )?;
    let unique = cmd.get_bool("unique").unwrap_or(false);
    if unique && key.is_hashed() {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "hashed shard keys cannot be declared unique.",
        ));
    }
    crate::sharding::scatter::count_arg(cmd, "numInitialChunks")?;
    Ok(Spec {
        ns,
        db,
        coll,
        key,
        unique,
    })
}

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "shardCollection")?;
    let cluster = require(session)?;
    let spec = parse(cmd)?;
    if let Some(existing) = catalog::routing_table(&cluster.config, spec.ns, None).await? {
        if existing.key.pattern() == spec.key.pattern() {
            return Ok(doc! {"collectionsharded": spec.ns});
        }
        return Err(already_sharded(spec.ns, existing.key.pattern()));
    }
    let reply = coordination::run(cluster, Request::ShardCollection(cmd.clone())).await?;
    // This router's next command on the collection routes by its new table.
    cluster.refresh(spec.ns).await?;
    Ok(reply)
}

/// The error for a collection sharded already by another key.
pub fn already_sharded(ns: &str, key: &Document) -> MongoError {
    MongoError::new(
        ErrorCode::AlreadyInitialized,
        format!("sharding already enabled for collection {ns} with options {{ key: {key} }}"),
    )
}
