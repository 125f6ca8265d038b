//! Opening reads: plan a filter against a collection and return a cursor over the matches.
//! Every command that reads documents (find, count, distinct, update, delete,
//! findAndModify, aggregate) comes through here.

use bson::{Bson, Document};
use query::matcher::Matcher;
use query::projection::Projection;
use query::sort::SortSpec;
use wire::MongoResult;

use super::cursor::{CursorSource, FindCursor};
use super::plan::{plan, Plan};
use super::scan::Scan;
use crate::catalog::CollectionMeta;
use crate::control::deadline::Deadline;
use storage::Engine;

#[derive(Default, Clone)]
pub struct FindArgs {
    pub filter: Document,
    pub sort: Option<Document>,
    pub projection: Option<Document>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub hint: Option<Bson>,
    /// Variables for `$expr` (the command's `let`).
    pub vars: Option<query::expr::Variables>,
    /// The command's `allowDiskUse`, for a sort the index does not provide.
    pub disk: crate::execution::spill::DiskUse,
}

pub fn open_find(meta: &CollectionMeta, args: &FindArgs) -> MongoResult<(FindCursor, Plan)> {
    let mut matcher = Matcher::new(&args.filter)?;
    if let Some(vars) = &args.vars {
        matcher = matcher.with_variables(vars.clone());
    }
    let sort = match &args.sort {
        Some(s) if !s.is_empty() => Some(SortSpec::new(s)?),
        _ => None,
    };
    let projection = match &args.projection {
        Some(p) if !p.is_empty() => Some(Projection::new(p)?),
        _ => None,
    };
    let plan = plan(meta, &args.filter, args.sort.as_ref(), args.hint.as_ref())?;
    let scan = Scan::new(meta, &plan.access);
    let sort = if plan.sort_provided { None } else { sort };
    let limit = args.limit.filter(|&l| l > 0);
    let mut cursor = FindCursor::new(scan, matcher, projection, args.skip, limit, sort);
    cursor.disk = args.disk.clone();
    Ok((cursor, plan))
}

/// All matching documents (unprojected), in sort order, up to `limit`.
pub fn collect(
    engine: &dyn Engine,
    meta: &CollectionMeta,
    args: &FindArgs,
    deadline: &Deadline,
) -> MongoResult<Vec<Document>> {
    let (mut cursor, _) = open_find(meta, args)?;
    let mut out = Vec::new();
    loop {
        let batch = cursor.next_batch(engine, 1024, deadline)?;
        let done = batch.is_empty() || cursor.exhausted();
        out.extend(batch);
        if done {
            return Ok(out);
        }
    }
}
