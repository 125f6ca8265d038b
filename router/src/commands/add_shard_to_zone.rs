//! `addShardToZone` and `removeShardFromZone`: which shards hold a zone's ranges. A
//! zone named after a site, on the shards whose preferred primary is in that site, keeps
//! that site's data written and read locally (`docs/sharding.md`).

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

pub async fn add(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    change(session, db, cmd, "addShardToZone", true).await
}

pub async fn remove(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    change(session, db, cmd, "removeShardFromZone", false).await
}

async fn change(
    session: &mut Session,
    db: &str,
    cmd: &Document,
    name: &str,
    add: bool,
) -> MongoResult<Document> {
    admin_only(db, name)?;
    let cluster = require(session)?;
    let shard = cmd
        .get_str(name)
        .map_err(|_| MongoError::type_mismatch(format!("'{name}' must be a shard name")))?;
    let zone = cmd
        .get_str("zone")
        .map_err(|_| MongoError::type_mismatch("'zone' must be a string"))?;
    if zone.is_empty() {
        return Err(MongoError::bad_value("zone name must not be empty"));
    }
    catalog::set_shard_zone(&cluster.config, shard, zone, add).await?;
    Ok(doc! {})
}
