//! Aggregation pipeline stages (owner: aggregation helper).
//!
//! [`Pipeline::parse`] validates and compiles every stage once (expressions, matchers,
//! sort keys); [`Pipeline::run`] pushes a batch of documents through the stages. The
//! pipeline never writes: a trailing `$out`/`$merge` is exposed through
//! [`Pipeline::output_stage`] and the caller performs the writes, using
//! [`merge_document`] for `$merge`'s whenMatched/whenNotMatched rules.
//!
//! Each stage is parsed and run in its own file, named after it (`$match` in
//! `match_stage.rs`, `match` being a keyword), but for stages that share their machinery:
//! `$out` is in `merge.rs`, `$addFields`/`$set` in `project.rs` (one projection tree),
//! `$sort` in `sortkey.rs` (the keys `$top`/`$bottom` use too). This module holds the
//! pipeline, the stage enum, parsing by stage name and running by variant.

mod access;
mod accumulator;
mod bucket;
mod bucket_auto;
mod count;
mod documents;
mod facet;
mod graph_lookup;
mod group;
mod limit;
mod lookup;
mod match_stage;
mod merge;
mod project;
mod redact;
mod replace_root;
mod sample;
mod skip;
mod sort_by_count;
mod sortkey;
mod stream;
mod union_with;
mod unset;
mod unwind;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

use bson::{Bson, Document};

use crate::expr::Variables;
use crate::{ErrorCode, MongoError, MongoResult};

pub use access::{Access, CollectionAccess};
pub use merge::{merge_document, MergeAction, MergeSpec, OutputStage, WhenMatched, WhenNotMatched};
pub use stream::{Blocking, Stream};

use bucket_auto::BucketAuto;
use documents::Documents;
use facet::Facet;
use graph_lookup::GraphLookup;
pub use group::{Emit, Group, GroupMerger, GroupTable, PARTIAL_GROUP_FIELD, PARTIAL_KEY};
use lookup::Lookup;
use match_stage::MatchStage;
use project::{Projection, SetFields};
use redact::Redact;
use replace_root::ReplaceRoot;
use sortkey::SortKeys;
use union_with::UnionWith;
use unset::Unset;
use unwind::Unwind;

/// What a pipeline needs from its surroundings.
pub trait AggContext {
    /// All documents of another collection in the same database (`$lookup`, `$unionWith`,
    /// `$graphLookup`). A collection that does not exist has no documents.
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>>;
    /// Variables for the whole operation: the command's `let`, a fixed `$$NOW`.
    fn variables(&self) -> Variables;
}

/// A context with no other collections and no variables (tests, `$merge` pipelines).
pub struct NoCollections;

impl AggContext for NoCollections {
    fn collection_docs(&self, _coll: &str) -> MongoResult<Vec<Document>> {
        Ok(Vec::new())
    }
    fn variables(&self) -> Variables {
        Variables::default()
    }
}

/// A parsed aggregation pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    stages: Vec<Stage>,
    output: Option<OutputStage>,
    /// The filter of a first `$match`, so the caller can use an index.
    leading_match: Option<Document>,
}

#[derive(Debug, Clone)]
enum Stage {
    Match(MatchStage),
    Project(Projection),
    AddFields(SetFields),
    Unset(Unset),
    Group(Box<Group>),
    Sort(SortKeys),
    Limit(usize),
    Skip(usize),
    Unwind(Unwind),
    Lookup(Box<Lookup>),
    GraphLookup(Box<GraphLookup>),
    ReplaceRoot(ReplaceRoot),
    Facet(Facet),
    Sample(usize),
    BucketAuto(Box<BucketAuto>),
    UnionWith(UnionWith),
    Redact(Redact),
    Documents(Documents),
}

impl Pipeline {
    pub fn parse(stages: &[Document]) -> MongoResult<Pipeline> {
        Self::parse_inner(stages, Nesting::Top)
    }

    fn parse_inner(stages: &[Document], nesting: Nesting) -> MongoResult<Pipeline> {
        let mut out = Vec::with_capacity(stages.len());
        let mut output: Option<OutputStage> = None;
        let mut leading_match = None;
        for (i, spec) in stages.iter().enumerate() {
            if spec.len() != 1 {
                return Err(MongoError::new(
                    ErrorCode::StageNotOneField,
                    "A pipeline stage specification object must contain exactly one field.",
                ));
            }
            let (name, arg) = spec.iter().next().unwrap();
            if let Some(last) = &output {
                return Err(MongoError::new(
                    ErrorCode::OutputStageNotLast,
                    format!(
                        "{} can only be the final stage in the pipeline",
                        last.name()
                    ),
                ));
            }
            match name.as_str() {
                "$out" | "$merge" => {
                    output = Some(OutputStage::parse(name, arg, nesting)?);
                    continue;
                }
                "$documents" if i != 0 => {
                    return Err(MongoError::new(
                        ErrorCode::DocumentsNotFirst,
                        "$documents is only valid as the first stage in a pipeline",
                    ));
                }
                "$match" if i == 0 => {
                    if let Bson::Document(d) = arg {
                        leading_match = Some(d.clone());
                    }
                }
                "$facet" if nesting == Nesting::Facet => {
                    return Err(MongoError::new(
                        ErrorCode::NotAllowedInFacet,
                        "$facet is not allowed to be used within a $facet stage",
                    ));
                }
                _ => {}
            }
            match desugar(name, arg)? {
                Some(stages) => {
                    for stage in &stages {
                        let (name, arg) = stage.iter().next().expect("one stage per document");
                        out.push(parse_stage(name, arg)?);
                    }
                }
                None => out.push(parse_stage(name, arg)?),
            }
        }
        Ok(Pipeline {
            stages: out,
            output,
            leading_match,
        })
    }

    /// Runs the pipeline over `input` (the documents of the collection, or of the
    /// caller's pre-filtered scan). `$out`/`$merge` are not applied.
    pub fn run(&self, input: Vec<Document>, ctx: &dyn AggContext) -> MongoResult<Vec<Document>> {
        let mut vars = ctx.variables();
        vars.pin_now();
        self.run_with(input, ctx, &vars)
    }

    /// Runs with explicit variables (sub-pipelines, `$lookup` with `let`).
    pub fn run_with(
        &self,
        input: Vec<Document>,
        ctx: &dyn AggContext,
        vars: &Variables,
    ) -> MongoResult<Vec<Document>> {
        let mut docs = input;
        let mut i = 0;
        while i < self.stages.len() {
            // $sort + $limit: keep only the top k while sorting.
            if let (Stage::Sort(keys), Some(Stage::Limit(n))) =
                (&self.stages[i], self.stages.get(i + 1))
            {
                docs = keys.sort_top(docs, Some(*n));
                docs.truncate(*n);
                i += 2;
                continue;
            }
            docs = run_stage(&self.stages[i], docs, ctx, vars)?;
            i += 1;
        }
        Ok(docs)
    }

    /// The trailing `$out` or `$merge`, which the caller must perform on the results.
    pub fn output_stage(&self) -> Option<&OutputStage> {
        self.output.as_ref()
    }

    /// The filter of a first `$match` stage.
    pub fn leading_match(&self) -> Option<&Document> {
        self.leading_match.as_ref()
    }

    /// True when there are no stages at all (not even `$out`/`$merge`).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty() && self.output.is_none()
    }

    /// Number of processing stages (excluding `$out`/`$merge`).
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// True when the first stage is `$documents` (the pipeline ignores its input
    /// collection, as in `db.aggregate([{$documents: ...}])`).
    pub fn starts_with_documents(&self) -> bool {
        matches!(self.stages.first(), Some(Stage::Documents(_)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Nesting {
    Top,
    Facet,
    Lookup,
}

fn err(code: ErrorCode, msg: impl Into<String>) -> MongoError {
    MongoError::new(code, msg)
}

/// The collection a stage reads (`$lookup`, `$graphLookup`, `$unionWith`), once its name
/// is checked.
fn collection_name(c: &str) -> MongoResult<String> {
    wire::namespace::check_collection(c)?;
    Ok(c.to_string())
}

fn split_path(p: &str) -> Vec<String> {
    p.split('.').map(str::to_string).collect()
}

fn parse_stage(name: &str, arg: &Bson) -> MongoResult<Stage> {
    Ok(match name {
        "$match" => Stage::Match(MatchStage::parse(arg)?),
        "$project" => Stage::Project(Projection::parse(arg)?),
        "$addFields" | "$set" => Stage::AddFields(SetFields::parse(name, arg)?),
        "$unset" => Stage::Unset(Unset::parse(arg)?),
        "$group" => Stage::Group(Box::new(Group::parse(arg)?)),
        "$sort" => Stage::Sort(SortKeys::parse_stage(arg)?),
        "$limit" => Stage::Limit(limit::parse(arg)?),
        "$skip" => Stage::Skip(skip::parse(arg)?),
        "$unwind" => Stage::Unwind(Unwind::parse(arg)?),
        "$lookup" => Stage::Lookup(Box::new(Lookup::parse(arg)?)),
        "$graphLookup" => Stage::GraphLookup(Box::new(GraphLookup::parse(arg)?)),
        "$replaceRoot" => Stage::ReplaceRoot(ReplaceRoot::parse(arg)?),
        "$replaceWith" => Stage::ReplaceRoot(ReplaceRoot::parse_with(arg)?),
        "$facet" => Stage::Facet(Facet::parse(arg)?),
        "$sample" => Stage::Sample(sample::parse(arg)?),
        "$bucketAuto" => Stage::BucketAuto(Box::new(BucketAuto::parse(arg)?)),
        "$unionWith" => Stage::UnionWith(UnionWith::parse(arg)?),
        "$redact" => Stage::Redact(Redact::parse(arg)?),
        "$documents" => Stage::Documents(Documents::parse(arg)?),
        "$collStats"
        | "$indexStats"
        | "$currentOp"
        | "$listSessions"
        | "$listLocalSessions"
        | "$planCacheStats"
        | "$changeStream"
        | "$geoNear"
        | "$search"
        | "$searchMeta"
        | "$listSearchIndexes"
        | "$setWindowFields"
        | "$densify"
        | "$fill"
        | "$shardedDataDistribution"
        | "$listSampledQueries" => {
            return Err(MongoError::new(
                ErrorCode::NotImplemented,
                format!("{name} is not supported by the aggregation library"),
            ))
        }
        _ => {
            return Err(err(
                ErrorCode::UnknownStage,
                format!("Unrecognized pipeline stage name: '{name}'"),
            ))
        }
    })
}

/// The stages of an `aggregate` command: its `pipeline`, an array of documents.
pub fn command_stages(cmd: &Document) -> MongoResult<Vec<Document>> {
    match cmd.get("pipeline") {
        None => Err(MongoError::new(
            ErrorCode::RequiredFieldMissing,
            "BSON field 'aggregate.pipeline' is missing but a required field",
        )),
        Some(Bson::Array(stages)) => stages
            .iter()
            .map(|s| match s {
                Bson::Document(d) => Ok(d.clone()),
                _ => Err(MongoError::type_mismatch(
                    "Each element of the 'pipeline' array must be an object",
                )),
            })
            .collect(),
        Some(_) => Err(MongoError::type_mismatch(
            "BSON field 'aggregate.pipeline' is the wrong type, expected type 'array'",
        )),
    }
}

fn stage_docs(a: &[Bson], code: ErrorCode, msg: &str) -> MongoResult<Vec<Document>> {
    a.iter()
        .map(|s| match s {
            Bson::Document(d) => Ok(d.clone()),
            _ => Err(err(code, msg)),
        })
        .collect()
}

fn run_stage(
    stage: &Stage,
    docs: Vec<Document>,
    ctx: &dyn AggContext,
    vars: &Variables,
) -> MongoResult<Vec<Document>> {
    Ok(match stage {
        Stage::Match(m) => m.run(docs, vars)?,
        Stage::Project(p) => p.run(&docs, vars)?,
        Stage::AddFields(s) => s.run(&docs, vars)?,
        Stage::Unset(u) => u.run(docs),
        Stage::Group(g) => g.run(docs, vars)?,
        Stage::Sort(keys) => keys.sort_top(docs, None),
        Stage::Limit(n) => limit::run(docs, *n),
        Stage::Skip(n) => skip::run(docs, *n),
        Stage::Unwind(u) => u.run(docs),
        Stage::ReplaceRoot(r) => r.run(docs, vars)?,
        Stage::Lookup(l) => l.run(docs, ctx, vars)?,
        Stage::GraphLookup(g) => g.run(docs, ctx, vars)?,
        Stage::Facet(f) => f.run(docs, ctx, vars)?,
        Stage::Redact(r) => r.run(docs, vars)?,
        Stage::Documents(d) => d.run(vars)?,
        Stage::UnionWith(u) => u.run(docs, ctx, vars)?,
        Stage::Sample(n) => sample::run(docs, *n),
        Stage::BucketAuto(b) => b.run(docs, vars)?,
    })
}

/// The stages MongoDB parses one stage as, so that they stream, spill and split over
/// shards as a `$group` does: `$count` is a `$group` and a `$project`, `$sortByCount` a
/// `$group` and a `$sort`, `$bucket` a `$group` whose key is the bucket and a `$sort`.
/// `None` for every other stage.
pub fn desugar(name: &str, arg: &Bson) -> MongoResult<Option<Vec<Document>>> {
    Ok(Some(match name {
        "$count" => count::desugar(arg)?,
        "$sortByCount" => sort_by_count::desugar(arg)?,
        "$bucket" => bucket::desugar(arg)?,
        _ => return Ok(None),
    }))
}
