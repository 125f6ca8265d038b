//! `findAndModify` on a sharded collection: one document, so one shard. The full shard
//! key in the query names it; without one, the shards the query can touch are tried in
//! turn until one finds a document. A `sort` across several shards, or an upsert, needs
//! the shard key (`ShardKeyNotFound`, as in MongoDB 7.0). A change of the shard key moves
//! the document in a retryable write (`shard_key_change`).

use bson::Document;
use wire::{ErrorCode, MongoError, MongoResult};

use super::write::{check_key_unchanged, replacement};
use super::{shard_key_change, Ctx};

pub async fn run(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let filter = cmd.get_document("query").cloned().unwrap_or_default();
    let remove = cmd.get_bool("remove").unwrap_or(false);
    let upsert = cmd.get_bool("upsert").unwrap_or(false);
    let changes_key = !remove && check_key_unchanged(ctx, &filter, cmd.get("update")).is_err();
    if changes_key && !cmd.contains_key("txnNumber") {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "Must run update to shard key field in a multi-statement transaction or with retryWrites: true.",
        ));
    }
    let key = ctx.table.key.equality(&filter).or_else(|| {
        upsert
            .then(|| replacement(cmd.get("update")))
            .flatten()
            .and_then(|r| ctx.table.key.value_of(r).ok())
    });
    let shards = match key {
        Some(k) => vec![ctx.table.shard_for_key(&k).to_string()],
        None => ctx.targets(&filter),
    };
    let sorted = cmd.get_document("sort").is_ok_and(|s| !s.is_empty());
    if shards.len() > 1 && (upsert || sorted) {
        return Err(MongoError::new(
            ErrorCode::ShardKeyNotFound,
            format!(
                "Query for sharded findAndModify must contain the shard key {} (with {})",
                ctx.table.key.pattern(),
                if upsert { "upsert" } else { "sort" }
            ),
        ));
    }
    for _ in 0..shard_key_change::ATTEMPTS {
        let (from, reply) = first_found(ctx, &cmd, &shards).await?;
        let refused = changes_key
            .then(|| shard_key_change::images(&reply))
            .flatten();
        let (Some(from), Some(images)) = (from, refused) else {
            return Ok(reply);
        };
        // The new key belongs to another shard: the document moves there.
        if let Some(moved) = shard_key_change::find_and_modify(ctx, &cmd, &from, images).await? {
            return Ok(moved);
        }
    }
    Err(shard_key_change::kept_changing())
}

/// Asks `shards` in turn until one finds a document; that shard and its reply.
async fn first_found(
    ctx: &Ctx<'_>,
    cmd: &Document,
    shards: &[String],
) -> MongoResult<(Option<String>, Document)> {
    let mut last = None;
    for s in shards {
        let (reply, _) = ctx.one(s, cmd).await?;
        let found = reply
            .get_document("lastErrorObject")
            .map(|l| super::number(l, "n") > 0)
            .unwrap_or(true);
        if found {
            return Ok((Some(s.clone()), reply));
        }
        last = Some(reply);
    }
    Ok((
        None,
        last.unwrap_or_else(|| {
            bson::doc! {"lastErrorObject": {"n": 0, "updatedExisting": false}, "value": bson::Bson::Null}
        }),
    ))
}
