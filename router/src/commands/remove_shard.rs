//! `removeShard`: drains a shard. The first call marks it draining; the balancer then
//! moves its chunks to the other shards. Each call reports progress in mongos's shape
//! (`state`: `started`, `ongoing`, `completed`); once it holds no chunks and is no
//! database's primary, the call that finds it so removes it from the catalog.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "removeShard")?;
    let cluster = require(session)?;
    let name = cmd
        .get_str("removeShard")
        .map_err(|_| MongoError::type_mismatch("'removeShard' must be a shard name"))?;
    let shards = catalog::shards(&cluster.config).await?;
    let Some(shard) = shards.iter().find(|s| s.get_str("_id") == Ok(name)) else {
        return Err(MongoError::new(
            ErrorCode::ShardNotFound,
            format!("Shard {name} not found"),
        ));
    };
    if shards.len() == 1 {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "Operation not allowed because it would remove the last shard",
        ));
    }
    if shard.get_bool("draining") != Ok(true) {
        catalog::set_draining(&cluster.config, name).await?;
        return Ok(
            doc! {"msg": "draining started successfully", "state": "started", "shard": name},
        );
    }
    let chunks = catalog::chunks_on(&cluster.config, name).await?;
    let dbs: Vec<String> = catalog::databases_on(&cluster.config, name).await?;
    if chunks > 0 || !dbs.is_empty() {
        return Ok(doc! {
            "msg": "draining ongoing",
            "state": "ongoing",
            "remaining": {"chunks": chunks, "dbs": dbs.len() as i64, "jumboChunks": 0_i64},
            "note": "you need to call movePrimary for these databases, or drop them",
            "dbsToMove": dbs,
        });
    }
    catalog::remove_shard(&cluster.config, name).await?;
    cluster.reload_shards().await?;
    Ok(doc! {"msg": "removeshard completed successfully", "state": "completed", "shard": name})
}
