//! Pipeline updates: evaluated by `crate::agg`, restricted to the stages mongod allows.

use bson::{Bson, Document};

use crate::agg::{NoCollections, Pipeline};
use crate::expr::{type_name, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

use super::replacement::{keep_id, with_id_first};
use super::values::identical_docs;
use super::UpdateContext;

const PIPELINE_UPDATE_STAGES: &[&str] = &[
    "$addFields",
    "$set",
    "$project",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

pub(super) fn parse_pipeline(stages: &[Bson]) -> MongoResult<Pipeline> {
    let mut docs = Vec::with_capacity(stages.len());
    for s in stages {
        let Bson::Document(d) = s else {
            return Err(MongoError::type_mismatch(format!(
                "Each element of the 'pipeline' array must be an object, but found {}",
                type_name(s)
            )));
        };
        docs.push(d.clone());
    }
    let pipeline = Pipeline::parse(&docs)?;
    for d in &docs {
        let name = d.keys().next().map(String::as_str).unwrap_or_default();
        if !PIPELINE_UPDATE_STAGES.contains(&name) {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                format!("{name} is not allowed to be used within an update"),
            ));
        }
    }
    Ok(pipeline)
}

pub(super) fn apply_pipeline(
    pipeline: &Pipeline,
    doc: &mut Document,
    ctx: &UpdateContext,
    vars: &Variables,
) -> MongoResult<bool> {
    let vars = vars.clone().with_now(ctx.now);
    let mut out = pipeline.run_with(vec![doc.clone()], &NoCollections, &vars)?;
    let mut cur = match (out.pop(), out.is_empty()) {
        (Some(d), true) => d,
        _ => {
            return Err(MongoError::internal(
                "an update pipeline must produce exactly one document",
            ))
        }
    };
    if ctx.is_upsert_insert {
        if let Some(id) = cur.remove("_id") {
            cur = with_id_first(cur, id);
        }
    } else {
        keep_id(doc, &mut cur)?;
    }
    if identical_docs(doc, &cur) {
        return Ok(false);
    }
    crate::depth::check_document_depth(&cur)?;
    *doc = cur;
    Ok(true)
}
