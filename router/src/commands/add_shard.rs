//! `addShard`: adds a replica set (`setName/host1,host2,...`) to the cluster. The router
//! asks it for its name first, so a wrong address fails here rather than later.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::{admin_only, catalog, internal, require};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "addShard")?;
    let cluster = require(session)?;
    let host = cmd
        .get_str("addShard")
        .or_else(|_| cmd.get_str("addshard"))
        .map_err(|_| MongoError::type_mismatch("'addShard' must be a connection string"))?;
    let Some((set, members)) = host
        .split_once('/')
        .filter(|(s, m)| !s.is_empty() && !m.is_empty())
    else {
        return Err(MongoError::new(
            ErrorCode::FailedToParse,
            format!("addShard needs 'setName/host:port,...', got '{host}'"),
        ));
    };
    let probe = cluster.handle_for(host)?;
    probe.refresh().await;
    let hello = internal(&probe, "admin", &doc! {"hello": 1}, false).await?;
    let actual = hello.get_str("setName").unwrap_or_default();
    if actual != set {
        return Err(MongoError::new(
            ErrorCode::OperationFailed,
            format!("in seed list {host}, host {members} belongs to replica set '{actual}', not '{set}'"),
        ));
    }
    let name = cmd.get_str("name").unwrap_or(set);
    catalog::add_shard(&cluster.config, name, host).await?;
    cluster.reload_shards().await?;
    Ok(doc! {"shardAdded": name})
}
