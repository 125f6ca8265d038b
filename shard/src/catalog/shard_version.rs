//! The version a router routed a command with (`shardVersion`), checked against what
//! this shard owns of the collection (see `query::ownership`).

use bson::{doc, Bson, Document};
use query::ownership::ShardVersion;
use wire::{ErrorCode, MongoError, MongoResult};

use super::CollectionMeta;

/// How the router routed a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed {
    /// As a sharded collection, with this version.
    At(ShardVersion),
    /// As an unsharded collection, whole to its database's primary shard (`"UNSHARDED"`).
    Unsharded,
}

/// The `shardVersion` a router attached, if any.
pub fn received(cmd: &Document) -> MongoResult<Option<Routed>> {
    match cmd.get("shardVersion") {
        None => Ok(None),
        Some(Bson::Document(d)) => ShardVersion::from_document(d).map(|v| Some(Routed::At(v))),
        Some(Bson::String(s)) if s == "UNSHARDED" => Ok(Some(Routed::Unsharded)),
        Some(_) => Err(MongoError::type_mismatch(
            "shardVersion must be {e: ObjectId, v: Timestamp} or \"UNSHARDED\"",
        )),
    }
}

/// Runs a command routed as `received` only if this shard's ownership of `ns` agrees:
/// the same version, or for a command routed as unsharded, no ownership at all (the
/// collection was not sharded since the router last looked). A write is also refused
/// while a migration out of the collection commits (its critical section); the router
/// retries it once the new owner is known. `ns` is called only to word the error.
pub fn check(
    ns: impl FnOnce() -> String,
    meta: Option<&CollectionMeta>,
    received: &Routed,
    writes: bool,
) -> MongoResult<()> {
    let owned = meta.and_then(|m| m.ownership.as_deref());
    let wanted = owned.map(|o| o.version);
    let critical = writes && owned.is_some_and(|o| o.critical.is_some());
    let agrees = match received {
        Routed::At(v) => wanted == Some(*v),
        Routed::Unsharded => wanted.is_none(),
    };
    if agrees && !critical {
        return Ok(());
    }
    let shown = match received {
        Routed::At(v) => Bson::Document(v.to_document()),
        Routed::Unsharded => Bson::String("UNSHARDED".into()),
    };
    let ns = ns();
    let mut info = doc! {
        "ns": &ns,
        "vReceived": shown.clone(),
        "vWanted": wanted.map(|v| Bson::Document(v.to_document())),
    };
    if critical {
        info.insert("critical", true);
    }
    Err(MongoError::new(
        ErrorCode::StaleConfig,
        format!(
            "version mismatch for {ns}: received {shown}, this shard has {:?}{}",
            wanted.map(|v| v.version),
            if critical {
                " (a migration is committing)"
            } else {
                ""
            }
        ),
    )
    .with_extra(doc! {"errInfo": info}))
}
