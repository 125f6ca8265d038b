//! `shardCollection`: makes a collection sharded by a key. The router checks the
//! command (`sharding::shard_collection_spec`) and asks the config servers to run it
//! (`sharding::coordination`; the work is in `configsvr::shard_collection`).
//!
//! The collection is created on its database's primary shard if needed, and must have an
//! index starting with the key unless it is empty (then the index is created). A hashed
//! key on an empty collection starts with chunks spread evenly over every shard
//! (`numInitialChunks`, default two per shard); any other starts as one chunk on the
//! primary shard. Shards that receive chunks get the collection and its indexes first;
//! the catalog entry, written last, makes the new routing live.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;
use crate::sharding::coordination::{self, Request};
use crate::sharding::shard_collection_spec::{already_sharded, parse};
use crate::sharding::{admin_only, catalog, require};

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
