//! `$out` and `$merge`: the pipeline computes, the shard writes.
//!
//! `$out` writes into a temporary collection and renames it over the target, so readers
//! see either the old or the new contents, never a half-written collection.

use bson::Document;
use query::agg::{merge_document, MergeAction, MergeSpec, OutputStage, Pipeline};
use wire::MongoResult;

use super::insert::with_id_first;
use crate::execution::cursor::Cursors;
use crate::execution::read::{collect, FindArgs};
use crate::execution::write_path::{insert_documents, replace_document};
use crate::node::Ctx;

/// Performs the pipeline's output stage, if any; returns what the cursor should return
/// (nothing after `$out`/`$merge`).
pub fn write(ctx: &Ctx, pipeline: &Pipeline, results: Vec<Document>) -> MongoResult<Vec<Document>> {
    match pipeline.output_stage() {
        None => Ok(results),
        Some(OutputStage::Out { db, coll }) => {
            out(ctx, db.as_deref().unwrap_or(ctx.db), coll, results)?;
            Ok(Vec::new())
        }
        Some(OutputStage::Merge(spec)) => {
            merge(ctx, spec, results)?;
            Ok(Vec::new())
        }
    }
}

fn out(ctx: &Ctx, db: &str, coll: &str, results: Vec<Document>) -> MongoResult<()> {
    let engine = ctx.engine;
    let catalog = &ctx.node.catalog;
    let temp = format!("tmp.agg_out.{:x}", Cursors::new_id());
    let (meta, _) = catalog.create_collection(engine, db, &temp, Document::new())?;
    let docs: Vec<Document> = results.iter().map(with_id_first).collect();
    if let Some((_, e)) = insert_documents(engine, catalog, &meta, &docs, true, &|_| {})
        .into_iter()
        .next()
    {
        catalog.drop_collection(engine, &meta.ns())?;
        return Err(e);
    }
    let target = format!("{db}.{coll}");
    if let Some(existing) = catalog.get(&target) {
        let lock = existing.write_lock.clone();
        let _guard = ctx.node.catalog.exclusive(&lock);
        catalog.drop_collection(engine, &target)?;
    }
    catalog.rename(engine, &meta.ns(), (db, coll), None)
}

fn merge(ctx: &Ctx, spec: &MergeSpec, results: Vec<Document>) -> MongoResult<()> {
    let engine = ctx.engine;
    let catalog = &ctx.node.catalog;
    let db = spec.db.as_deref().unwrap_or(ctx.db);
    let (meta, _) = catalog.create_collection(engine, db, &spec.coll, Document::new())?;
    let lock = meta.write_lock.clone();
    let _guard = ctx.node.catalog.exclusive(&lock);
    for doc in results {
        ctx.deadline.check()?;
        let meta = catalog.get(&meta.ns()).unwrap_or_else(|| meta.clone());
        // Documents without _id get one, as MongoDB does when `on` is the default `_id`.
        let doc = if doc.contains_key("_id") || spec.on != ["_id"] {
            doc
        } else {
            with_id_first(&doc)
        };
        let filter = spec.match_filter(&doc)?;
        let args = FindArgs {
            filter,
            limit: Some(1),
            ..Default::default()
        };
        let existing = collect(engine, &meta, &args, &ctx.deadline)?
            .into_iter()
            .next();
        match merge_document(existing.as_ref(), &doc, spec)? {
            MergeAction::Nothing => {}
            MergeAction::Insert(d) => {
                if let Some((_, e)) =
                    insert_documents(engine, catalog, &meta, &[with_id_first(&d)], true, &|_| {})
                        .into_iter()
                        .next()
                {
                    return Err(e);
                }
            }
            MergeAction::Update(d) => {
                let old = existing.expect("an update always has a matched document");
                let d = if d.get("_id").is_some() {
                    d
                } else {
                    with_id_first(&d)
                };
                replace_document(engine, catalog, &meta, (&old, &with_id_first(&d)), None)?;
            }
        }
    }
    Ok(())
}
