//! `findAndModify` on a sharded collection: one document, so one shard. The full shard
//! key in the query names it; without one, the shards the query can touch are tried in
//! turn until one finds a document. A `sort` across several shards, or an upsert, needs
//! the shard key (`ShardKeyNotFound`, as in MongoDB 7.0).

use bson::Document;
use wire::{ErrorCode, MongoError, MongoResult};

use super::write::{check_key_unchanged, replacement};
use super::Ctx;

pub async fn run(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let filter = cmd.get_document("query").cloned().unwrap_or_default();
    let remove = cmd.get_bool("remove").unwrap_or(false);
    let upsert = cmd.get_bool("upsert").unwrap_or(false);
    if !remove {
        check_key_unchanged(ctx, &filter, cmd.get("update"))?;
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
    let mut last = None;
    for s in shards {
        let (reply, _) = ctx.one(&s, &cmd).await?;
        let found = reply
            .get_document("lastErrorObject")
            .map(|l| super::number(l, "n") > 0)
            .unwrap_or(true);
        if found {
            return Ok(reply);
        }
        last = Some(reply);
    }
    Ok(last.unwrap_or_else(|| {
        bson::doc! {"lastErrorObject": {"n": 0, "updatedExisting": false}, "value": bson::Bson::Null}
    }))
}
