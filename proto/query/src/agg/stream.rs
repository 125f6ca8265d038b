//! The leading stages of a pipeline that take one document at a time run as documents
//! come from storage, so `aggregate(coll, [$match, $project, ...])` holds one batch, not
//! the collection. Only the stages from the first blocking one on (a sort, `$group`,
//! `$lookup`, `$facet`, ...) need their whole input, and the caller bounds that input
//! (`crate::memory`).

use bson::Document;

use super::{run_stage, Group, NoCollections, Pipeline, Stage};
use crate::expr::Variables;
use crate::sort::SortSpec;
use crate::MongoResult;

/// A blocking stage that runs over a stream of documents rather than a vector.
pub enum Blocking {
    /// A sort; `top` when a `$limit` follows, so only that many need be kept.
    Sort {
        spec: SortSpec,
        top: Option<usize>,
    },
    Group(Group),
    /// A `$sample` of this many documents.
    Sample(usize),
}

/// Streaming stages with their progress (documents a `$skip` dropped or a `$limit`
/// passed so far).
pub struct Stream {
    stages: Vec<Stage>,
    seen: Vec<usize>,
    vars: Variables,
}

fn streams(stage: &Stage) -> bool {
    matches!(
        stage,
        Stage::Match(_)
            | Stage::Project(_)
            | Stage::AddFields(_)
            | Stage::Unset(_)
            | Stage::Unwind(_)
            | Stage::ReplaceRoot(_)
            | Stage::Redact(_)
            | Stage::Skip(_)
            | Stage::Limit(_)
    )
}

impl Pipeline {
    /// Splits off the leading streaming stages (run with `vars`); the rest keeps the
    /// blocking stages and `$out`/`$merge`.
    pub fn split_streaming(&self, vars: Variables) -> (Stream, Pipeline) {
        let n = self.stages.iter().take_while(|s| streams(s)).count();
        let stream = Stream {
            stages: self.stages[..n].to_vec(),
            seen: vec![0; n],
            vars,
        };
        let rest = Pipeline {
            stages: self.stages[n..].to_vec(),
            output: self.output.clone(),
            leading_match: None,
        };
        (stream, rest)
    }

    /// With a `$sort`, a `$group` or a `$sample` first: that stage, the streaming stages
    /// after it (run with `vars`) and the rest. These run outside the pipeline over a
    /// stream, within their own memory (sorts and groups spill to disk with
    /// `allowDiskUse`), and what follows them streams from their output.
    pub fn split_blocking(&self, vars: Variables) -> Option<(Blocking, Stream, Pipeline)> {
        let (blocking, skip) = match self.stages.first()? {
            Stage::Sort(keys) => (
                Blocking::Sort {
                    spec: keys.spec().clone(),
                    top: self.top_after(1),
                },
                1,
            ),
            Stage::Group(g) => (Blocking::Group((**g).clone()), 1),
            Stage::Sample(n) => (Blocking::Sample(*n), 1),
            _ => return None,
        };
        let after = Pipeline {
            stages: self.stages[skip..].to_vec(),
            output: self.output.clone(),
            leading_match: None,
        };
        let (stream, rest) = after.split_streaming(vars);
        Some((blocking, stream, rest))
    }

    /// How many documents the `$skip`s and `$limit` from stage `from` on can pass at most
    /// (MongoDB moves a `$limit` before a `$skip` to sort the top skip + limit).
    fn top_after(&self, from: usize) -> Option<usize> {
        let mut skipped = 0usize;
        for stage in &self.stages[from..] {
            match stage {
                Stage::Skip(n) => skipped = skipped.saturating_add(*n),
                Stage::Limit(n) => return Some(skipped.saturating_add(*n)),
                _ => return None,
            }
        }
        None
    }

    /// Whether the pipeline has stages that need their whole input, or an output stage.
    pub fn blocks(&self) -> bool {
        !self.stages.is_empty() || self.output.is_some()
    }

    /// The name of the first stage, for errors about its memory.
    pub fn first_stage_name(&self) -> &'static str {
        self.stages.first().map_or("$out", stage_name)
    }
}

impl Stream {
    /// The documents `doc` becomes after the streaming stages.
    pub fn push(&mut self, doc: Document) -> MongoResult<Vec<Document>> {
        let mut docs = vec![doc];
        for (stage, seen) in self.stages.iter().zip(self.seen.iter_mut()) {
            match stage {
                Stage::Skip(n) => {
                    let dropped = docs.len().min(n - *seen);
                    *seen += dropped;
                    docs.drain(..dropped);
                }
                Stage::Limit(n) => {
                    let kept = docs.len().min(n - *seen);
                    *seen += kept;
                    docs.truncate(kept);
                }
                _ => docs = run_stage(stage, docs, &NoCollections, &self.vars)?,
            }
            if docs.is_empty() {
                break;
            }
        }
        Ok(docs)
    }

    /// Whether it has no stages (documents pass unchanged).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// No document can come out any more (a `$limit` is used up).
    pub fn done(&self) -> bool {
        self.stages
            .iter()
            .zip(&self.seen)
            .any(|(s, seen)| matches!(s, Stage::Limit(n) if seen >= n))
    }
}

fn stage_name(stage: &Stage) -> &'static str {
    match stage {
        Stage::Group(_) => "$group",
        Stage::Sort(_) => "Sort",
        Stage::Lookup(_) => "$lookup",
        Stage::GraphLookup(_) => "$graphLookup",
        Stage::Facet(_) => "$facet",
        Stage::Sample(_) => "$sample",
        Stage::BucketAuto(_) => "$bucketAuto",
        Stage::UnionWith(..) => "$unionWith",
        Stage::Documents(_) => "$documents",
        _ => "the pipeline",
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn stream_of(stages: Vec<Document>) -> (Stream, Pipeline) {
        Pipeline::parse(&stages)
            .unwrap()
            .split_streaming(Variables::default())
    }

    #[test]
    fn leading_per_document_stages_stream_and_the_rest_waits() {
        let (mut s, rest) = stream_of(vec![
            doc! {"$match": {"k": {"$gte": 1}}},
            doc! {"$unwind": "$a"},
            doc! {"$skip": 1},
            doc! {"$limit": 2},
            doc! {"$group": {"_id": null, "n": {"$sum": 1}}},
        ]);
        assert_eq!(rest.first_stage_name(), "$group");
        assert!(s.push(doc! {"k": 0, "a": [1, 2]}).unwrap().is_empty());
        // Three unwound documents: the first skipped, two pass the limit.
        let out = s.push(doc! {"k": 1, "a": [1, 2, 3]}).unwrap();
        assert_eq!(out, vec![doc! {"k": 1, "a": 2}, doc! {"k": 1, "a": 3}]);
        assert!(s.done());
        assert!(s.push(doc! {"k": 2, "a": [9]}).unwrap().is_empty());
    }

    #[test]
    fn a_pipeline_of_streaming_stages_leaves_nothing_blocking() {
        let (_, rest) = stream_of(vec![doc! {"$project": {"a": 1}}, doc! {"$limit": 5}]);
        assert!(!rest.blocks());
        let (_, rest) = stream_of(vec![doc! {"$sort": {"a": 1}}, doc! {"$limit": 5}]);
        assert!(rest.blocks());
    }

    fn top_of(stages: Vec<Document>) -> Option<usize> {
        let p = Pipeline::parse(&stages).unwrap();
        match p.split_blocking(Variables::default()) {
            Some((Blocking::Sort { top, .. }, _, _)) => top,
            _ => panic!("a leading sort"),
        }
    }

    #[test]
    fn a_sort_keeps_the_top_skip_plus_limit_and_a_group_splits_off() {
        let sort = doc! {"$sort": {"a": 1}};
        let top = top_of(vec![sort.clone(), doc! {"$skip": 2}, doc! {"$limit": 3}]);
        assert_eq!(top, Some(5));
        assert_eq!(top_of(vec![sort.clone(), doc! {"$limit": 3}]), Some(3));
        let filtered = vec![sort.clone(), doc! {"$match": {"a": 1}}, doc! {"$limit": 3}];
        assert_eq!(top_of(filtered), None);
        assert_eq!(top_of(vec![sort]), None);
        let p = Pipeline::parse(&[
            doc! {"$group": {"_id": "$a"}},
            doc! {"$project": {"b": 1}},
            doc! {"$bucketAuto": {"groupBy": "$b", "buckets": 2}},
        ])
        .unwrap();
        let Some((Blocking::Group(_), _, rest)) = p.split_blocking(Variables::default()) else {
            panic!("a leading $group");
        };
        assert_eq!(rest.first_stage_name(), "$bucketAuto");
    }
}
