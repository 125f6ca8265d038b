//! The version a router routed a command with (`shardVersion`), checked against what
//! this shard owns of the collection (see `query::ownership`).

use bson::{doc, Bson, Document};
use query::ownership::ShardVersion;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::catalog::CollectionMeta;

/// The `shardVersion` a router attached, if any.
pub fn received(cmd: &Document) -> MongoResult<Option<ShardVersion>> {
    match cmd.get("shardVersion") {
        None => Ok(None),
        Some(Bson::Document(d)) => ShardVersion::from_document(d).map(Some),
        Some(_) => Err(MongoError::type_mismatch(
            "shardVersion must be {e: ObjectId, v: Timestamp}",
        )),
    }
}

/// Runs a command routed at `received` only if this shard's ownership of `ns` is at the
/// same version. A write is also refused while a migration out of the collection commits
/// (its critical section); the router retries it once the new owner is known.
pub fn check(
    ns: &str,
    meta: Option<&CollectionMeta>,
    received: &ShardVersion,
    writes: bool,
) -> MongoResult<()> {
    let owned = meta.and_then(|m| m.ownership.as_deref());
    let wanted = owned.map(|o| o.version);
    let critical = writes && owned.is_some_and(|o| o.critical);
    if wanted == Some(*received) && !critical {
        return Ok(());
    }
    let mut info = doc! {
        "ns": ns,
        "vReceived": received.to_document(),
        "vWanted": wanted.map(|v| Bson::Document(v.to_document())),
    };
    if critical {
        info.insert("critical", true);
    }
    Err(MongoError::new(
        ErrorCode::StaleConfig,
        format!(
            "version mismatch for {ns}: received {:?}, this shard has {:?}{}",
            received.version,
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
