//! Commands about a sharded collection as a whole: index changes go to every shard that
//! holds part of it (and the primary shard), `drop` is run by the config servers, `collStats` adds the shards' figures up, `validate` is valid when every
//! shard's is, and the rest is answered by the primary shard (every shard has the same
//! indexes and options).

use bson::{doc, Bson, Document};
use wire::MongoResult;

use super::{count_value, number, Answer, Ctx};
use crate::sharding::coordination::{self, Request};

/// The shards holding the collection: those with chunks, and the primary shard.
async fn holders(ctx: &Ctx<'_>) -> MongoResult<Vec<String>> {
    let mut shards = ctx.table.all_shards();
    let primary = ctx.primary().await?.name.clone();
    if !shards.contains(&primary) {
        shards.push(primary);
        shards.sort();
    }
    Ok(shards)
}

/// Runs `cmd` on every holder; the first reply, with each shard's under `raw`.
pub async fn everywhere(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let answers = ctx.each(&holders(ctx).await?, &cmd).await?;
    let raw = by_shard_host(&answers);
    let mut out = answers
        .into_iter()
        .next()
        .map(|a| a.reply)
        .unwrap_or_default();
    out.insert("raw", raw);
    Ok(out)
}

/// `validate` on every holder, as mongos answers it: each shard's result under `raw`,
/// and `valid` when every shard's is.
pub async fn validate(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let answers = ctx.each(&holders(ctx).await?, &cmd).await?;
    let valid = answers
        .iter()
        .all(|a| a.reply.get_bool("valid").unwrap_or(false));
    Ok(doc! {"raw": by_shard_host(&answers), "valid": valid})
}

/// The shards' replies by shard (`name/host1,host2,...`).
fn by_shard_host(answers: &[Answer]) -> Document {
    answers
        .iter()
        .map(|a| (a.shard.host.clone(), Bson::Document(a.reply.clone())))
        .collect()
}

pub async fn on_primary(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let primary = ctx.primary().await?.name.clone();
    Ok(ctx.one(&primary, &cmd).await?.0)
}

/// Drops the collection everywhere: the config server primary runs the drop
/// (`configsvr::drop_collection`), which finishes even if this router dies.
pub async fn drop(ctx: &Ctx<'_>) -> MongoResult<Document> {
    let ns = ctx.ns();
    let reply = coordination::run(ctx.cluster, Request::DropCollection { ns: ns.clone() }).await;
    ctx.cluster.forget(&ns);
    reply
}

/// The shards' `collStats` added up, each shard's under `shards`.
pub async fn coll_stats(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let answers = ctx.each(&holders(ctx).await?, &cmd).await?;
    let mut per_shard = Document::new();
    let mut totals = doc! {};
    let mut index_sizes = Document::new();
    for a in &answers {
        for f in [
            "count",
            "size",
            "storageSize",
            "totalIndexSize",
            "totalSize",
        ] {
            let sum = number(&totals, f) + number(&a.reply, f);
            totals.insert(f, count_value(sum));
        }
        if let Ok(sizes) = a.reply.get_document("indexSizes") {
            for (name, v) in sizes {
                let sum =
                    number(&index_sizes, name) + query::order::as_f64(v).unwrap_or(0.0) as i64;
                index_sizes.insert(name.clone(), count_value(sum));
            }
        }
        per_shard.insert(a.shard.name.clone(), a.reply.clone());
    }
    let count = number(&totals, "count");
    let size = number(&totals, "size");
    let mut out = doc! {
        "sharded": true,
        "ns": ctx.ns(),
        "nchunks": ctx.table.chunks.len() as i32,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "nindexes": index_sizes.len() as i32,
        "indexSizes": index_sizes,
        "shards": per_shard,
    };
    for (k, v) in totals {
        out.insert(k, v);
    }
    Ok(out)
}
