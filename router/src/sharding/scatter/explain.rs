//! `explain` of a command on a sharded collection: the shards the command would go to
//! explain their part, and the router shows them together, as mongos does
//! (`queryPlanner.winningPlan.stage` `SINGLE_SHARD` or `SHARD_MERGE`, one entry per shard).

use bson::{doc, Bson, Document};
use wire::MongoResult;

use super::{aggregate, Ctx};

pub async fn run(ctx: &Ctx<'_>, cmd: Document) -> MongoResult<Document> {
    let inner = cmd.get_document("explain").cloned().unwrap_or_default();
    let name = inner.keys().next().cloned().unwrap_or_default();
    let filter = match name.as_str() {
        "find" => inner.get_document("filter").ok().cloned(),
        "count" | "distinct" | "findAndModify" | "findandmodify" => {
            inner.get_document("query").ok().cloned()
        }
        "aggregate" => Some(aggregate::leading_filter(&inner)),
        _ => None,
    }
    .unwrap_or_default();
    let shards = ctx.targets(&filter);
    let answers = ctx.each(&shards, &cmd).await?;
    let stage = if answers.len() == 1 {
        "SINGLE_SHARD"
    } else {
        "SHARD_MERGE"
    };
    let mut planned = Vec::new();
    let mut executed = Vec::new();
    let mut returned = 0i64;
    for a in &answers {
        let mut plan = doc! {"shardName": &a.shard.name, "connectionString": &a.shard.host};
        if let Ok(q) = a.reply.get_document("queryPlanner") {
            plan.extend(q.clone());
        }
        planned.push(Bson::Document(plan));
        if let Ok(e) = a.reply.get_document("executionStats") {
            returned += super::number(e, "nReturned");
            let mut stats = doc! {"shardName": &a.shard.name};
            stats.extend(e.clone());
            executed.push(Bson::Document(stats));
        }
    }
    let mut out = doc! {
        "queryPlanner": {
            "mongosPlannerVersion": 1,
            "winningPlan": {"stage": stage, "shards": planned},
        },
    };
    if !executed.is_empty() {
        out.insert(
            "executionStats",
            doc! {
                "nReturned": returned,
                "executionStages": {"stage": stage, "shards": executed},
            },
        );
    }
    Ok(out)
}
