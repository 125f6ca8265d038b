//! What the coordinator asks of a shard when a collection arrives on it (`shardCollection`,
//! a chunk migration, `movePrimary`): the collection itself, and copies of the donor's
//! indexes.

use bson::{doc, Document};
use wire::{ErrorCode, MongoResult};

use router::shard_client::ShardHandle;
use router::sharding::{internal, scatter};

pub async fn ensure_collection(handle: &ShardHandle, db: &str, coll: &str) -> MongoResult<()> {
    match internal(handle, db, &doc! {"create": coll}, true).await {
        Err(e) if e.code != ErrorCode::NamespaceExists as i32 => Err(e),
        _ => Ok(()),
    }
}

pub async fn list_indexes(
    handle: &ShardHandle,
    db: &str,
    coll: &str,
) -> MongoResult<Vec<Document>> {
    let reply = internal(handle, db, &doc! {"listIndexes": coll}, false).await?;
    Ok(scatter::first_batch(&reply)?.1)
}

pub async fn create_indexes(
    handle: &ShardHandle,
    db: &str,
    coll: &str,
    specs: Vec<Document>,
) -> MongoResult<()> {
    internal(
        handle,
        db,
        &doc! {"createIndexes": coll, "indexes": specs},
        true,
    )
    .await
    .map(|_| ())
}

/// Index specs from `listIndexes` as `createIndexes` takes them on another shard (the
/// `_id` index exists everywhere).
pub fn index_copies(indexes: Vec<Document>) -> Vec<Document> {
    indexes
        .into_iter()
        .filter(|ix| ix.get_str("name") != Ok("_id_"))
        .map(|mut ix| {
            ix.remove("v");
            ix.remove("ns");
            ix
        })
        .collect()
}
