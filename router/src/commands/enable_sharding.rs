//! `enableSharding`: records a database and its primary shard (`primaryShard` picks it).
//! Since MongoDB 6 sharding a collection needs no such step; the command remains for
//! scripts and for choosing a primary shard.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "enableSharding")?;
    let cluster = require(session)?;
    let name = cmd
        .get_str("enableSharding")
        .or_else(|_| cmd.get_str("enablesharding"))
        .map_err(|_| MongoError::type_mismatch("'enableSharding' must be a database name"))?;
    if name.is_empty() || name.contains('.') || name == "admin" || name == "config" {
        return Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            format!("invalid database name for enableSharding: '{name}'"),
        ));
    }
    let primary = match cmd.get_str("primaryShard") {
        Ok(wanted) => {
            let shard = cluster.shard(wanted).await?;
            let (won, _) = catalog::create_database(&cluster.config, name, &shard.name).await?;
            if won != shard.name {
                return Err(MongoError::new(
                    ErrorCode::IllegalOperation,
                    format!("database {name} already has primary shard {won}"),
                ));
            }
            won
        }
        Err(_) => cluster.primary(name, true).await?.name.clone(),
    };
    Ok(doc! {"primaryShard": primary})
}
