//! What a `shardCollection` command asks for, checked: by the router that receives it,
//! and again by the config server primary that runs it (`configsvr::shard_collection`),
//! as the request may come from a router of another version.

use bson::Document;
use query::shard_key::ShardKey;
use wire::{ErrorCode, MongoError, MongoResult};

/// What a `shardCollection` asks for, checked.
pub struct Spec<'a> {
    pub ns: &'a str,
    pub db: &'a str,
    pub coll: &'a str,
    pub key: ShardKey,
    pub unique: bool,
}

/// Checks `cmd`.
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

/// The error for a collection sharded already by another key.
pub fn already_sharded(ns: &str, key: &Document) -> MongoError {
    MongoError::new(
        ErrorCode::AlreadyInitialized,
        format!("sharding already enabled for collection {ns} with options {{ key: {key} }}"),
    )
}
