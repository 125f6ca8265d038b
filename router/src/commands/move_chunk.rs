//! `moveChunk` and `moveRange`: move a chunk (or a range inside one, split off first) of
//! a sharded collection to another shard. The config servers run the migration
//! (`sharding::coordination`; the work is in `configsvr::migrate`).
//!
//! `moveChunk: ns` names the chunk by a document it holds (`find`) or by its `bounds`,
//! and the shard by `to`; `moveRange: ns` gives `min` (and optionally `max`) and
//! `toShard`.

use bson::{Bson, Document};
use query::shard_key::KeyValue;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::coordination::{self, Request};
use crate::sharding::{admin_only, require, Cluster};

pub async fn move_chunk(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "moveChunk")?;
    let cluster = require(session)?;
    let ns = namespace(cmd, "moveChunk")?;
    let to = cmd
        .get_str("to")
        .map_err(|_| MongoError::failed_to_parse("moveChunk needs 'to', a shard name"))?;
    let table = cluster.refresh(ns).await?.ok_or_else(|| not_sharded(ns))?;
    let key = &table.key;
    let (min, max) = if let Ok(f) = cmd.get_document("find") {
        let chunk = table.chunk_for_key(&key.value_of(f)?).clone();
        (chunk.min, chunk.max)
    } else if let Ok(b) = cmd.get_array("bounds") {
        match b.as_slice() {
            [Bson::Document(lo), Bson::Document(hi)] => {
                (key.from_document(lo)?, key.from_document(hi)?)
            }
            _ => return Err(MongoError::bad_value("'bounds' must be [min, max]")),
        }
    } else {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "moveChunk needs 'find' or 'bounds'",
        ));
    };
    let chunk = table.chunk_for_key(&min);
    if chunk.min != min || chunk.max != max {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "'bounds' must be the bounds of one chunk",
        ));
    }
    move_range_on(cluster, ns, min, Some(max), to).await?;
    Ok(bson::doc! {"millis": 0})
}

pub async fn move_range(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "moveRange")?;
    let cluster = require(session)?;
    let ns = namespace(cmd, "moveRange")?;
    let to = cmd
        .get_str("toShard")
        .map_err(|_| MongoError::failed_to_parse("moveRange needs 'toShard', a shard name"))?;
    let table = cluster.refresh(ns).await?.ok_or_else(|| not_sharded(ns))?;
    let bound = |f: &str| -> MongoResult<Option<KeyValue>> {
        cmd.get_document(f)
            .ok()
            .map(|d| table.key.from_document(d))
            .transpose()
    };
    let min = bound("min")?.ok_or_else(|| MongoError::failed_to_parse("moveRange needs 'min'"))?;
    let max = bound("max")?;
    move_range_on(cluster, ns, min, max, to).await?;
    Ok(Document::new())
}

async fn move_range_on(
    cluster: &Cluster,
    ns: &str,
    min: KeyValue,
    max: Option<KeyValue>,
    to: &str,
) -> MongoResult<Document> {
    let request = Request::MoveRange {
        ns: ns.to_string(),
        min,
        max,
        to: to.to_string(),
    };
    let reply = coordination::run(cluster, request).await?;
    // This router's next command on the collection routes by the new table.
    cluster.refresh(ns).await?;
    Ok(reply)
}

fn namespace<'a>(cmd: &'a Document, name: &str) -> MongoResult<&'a str> {
    cmd.get_str(name)
        .map_err(|_| MongoError::type_mismatch(format!("'{name}' must be a namespace string")))
}

fn not_sharded(ns: &str) -> MongoError {
    MongoError::new(
        ErrorCode::NamespaceNotFound,
        format!("{ns} is not a sharded collection"),
    )
}
