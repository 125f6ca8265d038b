//! `listShards`: the shards of the cluster, as `config.shards` holds them.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

pub async fn run(session: &mut Session, db: &str, _cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "listShards")?;
    let cluster = require(session)?;
    let shards = catalog::shards(&cluster.config).await?;
    Ok(doc! {"shards": shards})
}
