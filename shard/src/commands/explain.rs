//! `explain` of find, count, distinct, update, delete, findAndModify and aggregate:
//! which access path the planner chose (IDHACK, COLLSCAN, IXSCAN) and, at
//! executionStats verbosity, what running it examined.

use std::time::Instant;

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::{collection_name, existing, opt_doc};
use crate::execution::cursor::CursorSource;
use crate::execution::read::{open_find, FindArgs};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let inner = opt_doc(cmd, "explain")?
        .ok_or_else(|| MongoError::failed_to_parse("explain requires a command object"))?;
    let verbosity = match cmd.get("verbosity") {
        None => "allPlansExecution",
        Some(Bson::String(v)) if ["queryPlanner", "executionStats", "allPlansExecution"].contains(&v.as_str()) => v,
        Some(v) => return Err(MongoError::bad_value(format!("verbosity string must be one of {{'queryPlanner', 'executionStats', 'allPlansExecution'}}, got {v}"))),
    };
    let name = inner.keys().next().cloned().unwrap_or_default();
    let args = match name.as_str() {
        "find" => super::find::parse(ctx, inner)?,
        "count" | "distinct" => FindArgs {
            filter: opt_doc(inner, "query")?.cloned().unwrap_or_default(),
            ..Default::default()
        },
        "findAndModify" | "findandmodify" => FindArgs {
            filter: opt_doc(inner, "query")?.cloned().unwrap_or_default(),
            sort: opt_doc(inner, "sort")?.cloned(),
            limit: Some(1),
            ..Default::default()
        },
        "update" | "delete" => {
            let (field, q) = if name == "update" {
                ("updates", "q")
            } else {
                ("deletes", "q")
            };
            let first = match inner.get(field) {
                Some(Bson::Array(a)) => a.first().and_then(|d| d.as_document()).cloned(),
                _ => None,
            }
            .unwrap_or_default();
            FindArgs {
                filter: opt_doc(&first, q)?.cloned().unwrap_or_default(),
                ..Default::default()
            }
        }
        "aggregate" => {
            let filter = match inner.get("pipeline") {
                Some(Bson::Array(stages)) => stages
                    .first()
                    .and_then(|s| s.as_document())
                    .and_then(|s| s.get_document("$match").ok())
                    .cloned()
                    .unwrap_or_default(),
                _ => return Err(MongoError::failed_to_parse("aggregate requires a pipeline")),
            };
            FindArgs {
                filter,
                ..Default::default()
            }
        }
        other => {
            return Err(MongoError::new(
                ErrorCode::CommandNotFound,
                format!("Explain failed due to unknown command: {other}"),
            ))
        }
    };
    let coll = collection_name(inner)?;
    let ns = format!("{}.{coll}", ctx.db);
    let mut reply = doc! {
        "explainVersion": "1",
        "command": inner.clone(),
        "serverInfo": {"host": "bulwark-shard", "version": crate::VERSION},
    };
    let Some(meta) = existing(ctx, coll) else {
        reply.insert("queryPlanner", doc! {"namespace": &ns, "parsedQuery": args.filter.clone(), "winningPlan": {"stage": "EOF"}, "rejectedPlans": []});
        return Ok(reply);
    };
    let (mut cursor, plan) = open_find(&meta, &args)?;
    let winning = plan.describe(&meta);
    reply.insert(
        "queryPlanner",
        doc! {"namespace": &ns, "parsedQuery": args.filter.clone(), "winningPlan": winning.clone(), "rejectedPlans": []},
    );
    if verbosity != "queryPlanner" {
        let started = Instant::now();
        let mut returned = 0i64;
        loop {
            let batch = cursor.next_batch(ctx.engine, 4096, &ctx.deadline)?;
            returned += batch.len() as i64;
            if batch.is_empty() || cursor.exhausted() {
                break;
            }
        }
        reply.insert(
            "executionStats",
            doc! {
                "executionSuccess": true, "nReturned": returned,
                "executionTimeMillis": started.elapsed().as_millis() as i64,
                "totalKeysExamined": cursor.scan.keys_examined as i64,
                "totalDocsExamined": cursor.scan.docs_examined as i64,
                "executionStages": winning,
            },
        );
    }
    Ok(reply)
}
