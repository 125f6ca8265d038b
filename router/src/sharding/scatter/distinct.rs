//! `distinct` over several shards: the union of their values, each once.

use bson::{doc, Bson, Document};
use wire::MongoResult;

use super::Ctx;

pub async fn run(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let filter = cmd.get_document("query").cloned().unwrap_or_default();
    let answers = ctx.each(&ctx.targets(&filter), &cmd).await?;
    let mut values: Vec<Bson> = answers
        .iter()
        .filter_map(|a| a.reply.get_array("values").ok())
        .flatten()
        .cloned()
        .collect();
    values.sort_by(query::order::compare);
    values.dedup_by(|a, b| query::order::values_equal(a, b));
    Ok(doc! {"values": values})
}
