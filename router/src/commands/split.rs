//! `split`: divides a chunk of a sharded collection in two at a key (`middle`), or, for
//! a hashed key, at the middle of the hash range of the chunk holding a document
//! (`find`) or given by its bounds (`bounds`). Both halves stay on the same shard: a
//! split moves no data, it only gives later migrations and zones finer ranges.

use bson::{Bson, Document};
use query::shard_key::KeyValue;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::routing::{Chunk, RoutingTable};
use crate::sharding::{admin_only, catalog, require};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "split")?;
    let cluster = require(session)?;
    let ns = cmd
        .get_str("split")
        .map_err(|_| MongoError::type_mismatch("'split' must be a namespace string"))?;
    let table = cluster.refresh(ns).await?.ok_or_else(|| {
        MongoError::new(
            ErrorCode::NamespaceNotFound,
            format!("{ns} is not a sharded collection"),
        )
    })?;
    let key = &table.key;
    let (chunk, middle) = if let Ok(m) = cmd.get_document("middle") {
        let middle = key.from_document(m)?;
        (table.chunk_for_key(&middle).clone(), middle)
    } else if let Ok(f) = cmd.get_document("find") {
        let point = key.value_of(f)?;
        let chunk = table.chunk_for_key(&point).clone();
        let middle = hashed_middle(&table, &chunk)?;
        (chunk, middle)
    } else if let Ok(b) = cmd.get_array("bounds") {
        let lower = match b.first() {
            Some(Bson::Document(d)) => key.from_document(d)?,
            _ => return Err(MongoError::bad_value("'bounds' must be [min, max]")),
        };
        let chunk = table.chunk_for_key(&lower).clone();
        let middle = hashed_middle(&table, &chunk)?;
        (chunk, middle)
    } else {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "split needs one of 'middle', 'find' or 'bounds'",
        ));
    };
    let inside = query::order::compare_arrays(&chunk.min, &middle).is_lt()
        && query::order::compare_arrays(&middle, &chunk.max).is_lt();
    if !inside {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!(
                "split key {} is a bound of its chunk, not inside it",
                key.to_document(&middle)
            ),
        ));
    }
    catalog::split_chunk(&cluster.config, &table, &chunk, &middle).await?;
    // The version moved on (ownership did not): shards hear it now rather than on the
    // next command.
    if let Some(table) = cluster.refresh(ns).await? {
        cluster.publish(&table).await?;
    }
    Ok(Document::new())
}

/// The middle of a chunk's hash range (hashed keys only: other keys need `middle`).
fn hashed_middle(table: &RoutingTable, chunk: &Chunk) -> MongoResult<KeyValue> {
    let first_hashed = table
        .key
        .pattern()
        .iter()
        .next()
        .is_some_and(|(_, v)| v.as_str() == Some("hashed"));
    if !first_hashed {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "split by 'find' or 'bounds' needs a hashed shard key; give 'middle' instead",
        ));
    }
    let end = |v: &Bson, low: bool| match v {
        Bson::Int64(n) => i128::from(*n),
        _ if low => i128::from(i64::MIN),
        _ => i128::from(i64::MAX) + 1,
    };
    let lo = end(&chunk.min[0], true);
    let hi = end(&chunk.max[0], false);
    let mid = ((lo + hi) / 2) as i64;
    let rest = table.key.fields().len() - 1;
    Ok(std::iter::once(Bson::Int64(mid))
        .chain(std::iter::repeat_n(Bson::MinKey, rest))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use query::shard_key::ShardKey;

    #[test]
    fn hashed_chunks_split_in_the_middle() {
        let key = ShardKey::parse(&doc! {"h": "hashed"}).unwrap();
        let table = RoutingTable {
            version: bson::Timestamp {
                time: 1,
                increment: 0,
            },
            ns: "d.c".into(),
            key: key.clone(),
            unique: false,
            epoch: bson::oid::ObjectId::new(),
            chunks: vec![Chunk {
                min: key.global_min(),
                max: key.global_max(),
                shard: "s".into(),
            }],
        };
        let mid = hashed_middle(&table, &table.chunks[0]).unwrap();
        assert_eq!(mid, vec![Bson::Int64(0)]);
        let ranged = RoutingTable {
            key: ShardKey::parse(&doc! {"r": 1}).unwrap(),
            ..table
        };
        assert!(hashed_middle(&ranged, &ranged.chunks[0]).is_err());
    }
}
