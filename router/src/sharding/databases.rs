//! Commands about whole databases in a sharded cluster: `listDatabases` asks every shard
//! and adds up, `dropDatabase` drops everywhere and then from the catalog, and
//! `renameCollection` stays within one shard.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::coordination::{self, Request};
use super::Cluster;
use crate::context::Session;
use crate::shard_client::{reply_ok, Forward, ShardHandle};

pub async fn list(session: &Session, cluster: &Cluster, cmd: &Document) -> MongoResult<Document> {
    let name_only = cmd.get_bool("nameOnly").unwrap_or(false);
    let mut ask = doc! {"listDatabases": 1, "nameOnly": name_only};
    if let Ok(filter) = cmd.get_document("filter") {
        ask.insert("filter", filter.clone());
    }
    let mut handles: Vec<ShardHandle> = vec![cluster.config.clone()];
    handles.extend(cluster.shards().await?.iter().map(|s| s.handle.clone()));
    let mut merged: Vec<Document> = Vec::new();
    for h in handles {
        let (reply, _, _) = h
            .run("admin", &ask, &Forward::default(), &session.peer_text)
            .await?;
        let reply = reply_ok(reply)?;
        for d in reply
            .get_array("databases")
            .map(|a| a.iter().filter_map(Bson::as_document).cloned().collect())
            .unwrap_or_else(|_| Vec::new())
        {
            let name = d.get_str("name").unwrap_or_default().to_string();
            match merged
                .iter_mut()
                .find(|m| m.get_str("name") == Ok(name.as_str()))
            {
                Some(m) if !name_only => {
                    let size = super::scatter::number(m, "sizeOnDisk")
                        + super::scatter::number(&d, "sizeOnDisk");
                    let empty =
                        m.get_bool("empty").unwrap_or(true) && d.get_bool("empty").unwrap_or(true);
                    m.insert("sizeOnDisk", size);
                    m.insert("empty", empty);
                }
                Some(_) => {}
                None => merged.push(d),
            }
        }
    }
    merged.sort_by(|a, b| {
        a.get_str("name")
            .unwrap_or("")
            .cmp(b.get_str("name").unwrap_or(""))
    });
    if name_only {
        return Ok(doc! {"databases": merged});
    }
    let total: i64 = merged
        .iter()
        .map(|d| super::scatter::number(d, "sizeOnDisk"))
        .sum();
    Ok(doc! {"databases": merged, "totalSize": total, "totalSizeMb": total >> 20})
}

/// Drops `db` everywhere: the config server primary runs the drop
/// (`configsvr::drop_database`), which finishes even if this router dies.
pub async fn drop(cluster: &Cluster, db: &str) -> MongoResult<Document> {
    let request = Request::DropDatabase { db: db.to_string() };
    let reply = coordination::run(cluster, request).await;
    cluster.forget_database(db);
    reply
}

/// Where a `renameCollection` goes: the primary shard of both databases. A sharded
/// source, or databases on different shards, would need data moved.
pub async fn rename_target(cluster: &Cluster, cmd: &Document) -> MongoResult<ShardHandle> {
    let from = cmd.get_str("renameCollection").unwrap_or_default();
    let to = cmd.get_str("to").unwrap_or_default();
    let db_of = |ns: &str| ns.split_once('.').map(|(d, _)| d.to_string());
    let (Some(from_db), Some(to_db)) = (db_of(from), db_of(to)) else {
        return Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            format!("invalid namespace in renameCollection: {from} -> {to}"),
        ));
    };
    if cluster.table(from).await?.is_some() || cluster.table(to).await?.is_some() {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "renaming a sharded collection is not supported yet",
        ));
    }
    let source = cluster.primary(&from_db, false).await?;
    let target = cluster.primary(&to_db, true).await?;
    if source.name != target.name {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            format!(
                "cannot rename {from} to {to}: the databases live on different shards ({} and {})",
                source.name, target.name
            ),
        ));
    }
    Ok(source.handle.clone())
}
