//! Running `shardCollection` on the config server primary (the router checks the
//! command and sends it here: `router::commands::shard_collection`; both check it with
//! `router::sharding::shard_collection_spec`).
//!
//! The collection is created on its database's primary shard if needed, and must have an
//! index starting with the key unless it is empty (then the index is created). A hashed
//! key on an empty collection starts with chunks spread evenly over every shard
//! (`numInitialChunks`, default two per shard); any other starts as one chunk on the
//! primary shard. Shards that receive chunks get the collection and its indexes first;
//! the catalog entry, written last, makes the new routing live. Every step may run again
//! (a failover re-runs the request from the start), and the catalog entry is written
//! once.

use bson::{doc, Bson, Document};
use query::shard_key::ShardKey;
use router::sharding::routing::{initial_chunks, zoned_chunks};
use router::sharding::shard_collection_spec::{already_sharded, parse, Spec};
use router::sharding::{catalog, internal, scatter};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Ctx;
use crate::shard_ddl::{create_indexes, ensure_collection, index_copies, list_indexes};
use crate::zones::zone_ranges;

const DEFAULT_CHUNKS_PER_SHARD: usize = 2;

/// Runs the `shardCollection` command `cmd` (checked again: the request may come from
/// any router, of any version).
pub async fn run(cluster: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let Spec {
        ns,
        db: db_name,
        coll,
        key,
        unique,
    } = parse(cmd)?;
    if let Some(existing) = catalog::routing_table(&cluster.config, ns, None).await? {
        if existing.key.pattern() == key.pattern() {
            return Ok(doc! {"collectionsharded": ns});
        }
        return Err(already_sharded(ns, existing.key.pattern()));
    }
    let primary = cluster.primary(db_name, true).await?;
    ensure_collection(&primary.handle, db_name, coll).await?;
    let count = internal(&primary.handle, db_name, &doc! {"count": coll}, false).await?;
    let empty = scatter::number(&count, "n") == 0;
    let mut indexes = list_indexes(&primary.handle, db_name, coll).await?;
    if !indexes.iter().any(|ix| supports(ix, &key)) {
        if !empty {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "Please create an index that starts with the proposed shard key {} before sharding the collection",
                    key.pattern()
                ),
            ));
        }
        let spec = doc! {"key": key.pattern().clone(), "name": index_name(&key), "unique": unique};
        create_indexes(&primary.handle, db_name, coll, vec![spec.clone()]).await?;
        indexes.push(spec);
    }
    // Read from the catalog now: a shard added since this primary last looked (by any
    // router) gets chunks too.
    let shards: Vec<String> = cluster
        .reload_shards()
        .await?
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let per_shard = match scatter::count_arg(cmd, "numInitialChunks")? {
        Some(n) if n > 0 => {
            let count = shards.len().max(1) as i64;
            ((n + count - 1) / count) as usize
        }
        _ => DEFAULT_CHUNKS_PER_SHARD,
    };
    let zones = zone_ranges(cluster, ns, &key).await?;
    let chunks = if empty && !zones.is_empty() {
        let mut zones = zones;
        zoned_chunks(&key, &mut zones, &primary.name)
    } else {
        initial_chunks(&key, &shards, &primary.name, per_shard, empty)
    };
    let copies = index_copies(indexes);
    let mut receivers: Vec<&str> = chunks.iter().map(|c| c.shard.as_str()).collect();
    receivers.sort();
    receivers.dedup();
    for name in receivers.into_iter().filter(|n| *n != primary.name) {
        let shard = cluster.shard(name).await?;
        ensure_collection(&shard.handle, db_name, coll).await?;
        if !copies.is_empty() {
            create_indexes(&shard.handle, db_name, coll, copies.clone()).await?;
        }
    }
    let entry = catalog::shard_collection(&cluster.config, ns, &key, unique, &chunks).await?;
    // Every shard learns its part now, so that the first commands find none behind.
    if let Some(table) = cluster.refresh(ns).await? {
        cluster.publish(&table).await?;
    }
    match entry.get_document("key") {
        Ok(won) if won == key.pattern() => Ok(doc! {"collectionsharded": ns}),
        Ok(won) => Err(already_sharded(ns, won)),
        Err(_) => Err(MongoError::internal("catalog entry without a key")),
    }
}

/// Whether index `ix` starts with the shard key (same fields, same kinds, in order).
fn supports(ix: &Document, key: &ShardKey) -> bool {
    let Ok(ix_key) = ix.get_document("key") else {
        return false;
    };
    if ix.get_document("partialFilterExpression").is_ok() || ix.get_bool("sparse") == Ok(true) {
        return false;
    }
    let mut fields = ix_key.iter();
    key.pattern().iter().all(|(f, kind)| {
        fields.next().is_some_and(|(g, v)| {
            f == g
                && match (kind, v) {
                    (Bson::String(a), Bson::String(b)) => a == b,
                    (Bson::String(_), _) | (_, Bson::String(_)) => false,
                    (a, b) => query::order::values_equal(a, b),
                }
        })
    })
}

fn index_name(key: &ShardKey) -> String {
    key.pattern()
        .iter()
        .map(|(f, v)| match v {
            Bson::String(s) => format!("{f}_{s}"),
            _ => format!("{f}_1"),
        })
        .collect::<Vec<_>>()
        .join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_supports_a_key_it_starts_with() {
        let key = ShardKey::parse(&doc! {"a": 1}).unwrap();
        assert!(supports(&doc! {"key": {"a": 1, "b": 1}}, &key));
        assert!(supports(&doc! {"key": {"a": 1.0}}, &key));
        assert!(!supports(&doc! {"key": {"b": 1, "a": 1}}, &key));
        assert!(!supports(&doc! {"key": {"a": "hashed"}}, &key));
        assert!(!supports(&doc! {"key": {"a": 1}, "sparse": true}, &key));
        let hashed = ShardKey::parse(&doc! {"a": "hashed"}).unwrap();
        assert!(supports(&doc! {"key": {"a": "hashed"}}, &hashed));
        assert_eq!(index_name(&hashed), "a_hashed");
    }
}
