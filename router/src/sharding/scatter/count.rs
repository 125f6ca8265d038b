//! `count` over several shards: each counts `skip + limit` at most, without skip; the
//! sum is cut by skip and limit here.

use bson::{doc, Document};
use wire::MongoResult;

use super::{count_arg, count_value, number, Ctx};

pub async fn run(ctx: &Ctx<'_>, mut cmd: Document) -> MongoResult<Document> {
    let filter = cmd.get_document("query").cloned().unwrap_or_default();
    let skip = count_arg(&cmd, "skip")?.unwrap_or(0).max(0);
    let limit = count_arg(&cmd, "limit")?.unwrap_or(0).abs();
    cmd.remove("skip");
    if limit > 0 {
        cmd.insert("limit", limit + skip);
    }
    let answers = ctx.each(&ctx.targets(&filter), &cmd).await?;
    let total: i64 = answers.iter().map(|a| number(&a.reply, "n")).sum();
    let mut n = (total - skip).max(0);
    if limit > 0 {
        n = n.min(limit);
    }
    Ok(doc! {"n": count_value(n)})
}
