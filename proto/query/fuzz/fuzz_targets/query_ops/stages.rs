//! Aggregation pipelines: every stage the server knows (and unknown ones), each stage
//! document built at the depth it has inside its pipeline.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::exprs::Ex;
use crate::filters::Filter;
use crate::group_stages::AccArg;
use crate::paths::Path;
use crate::projections::Proj;
use crate::scalars::{Key, Num, Str};
use crate::sorts::Sort;
use crate::tables::{pick, STAGES, STAGE_KEYS};
use crate::values::{single, Cx, Val};

#[derive(Arbitrary, Debug)]
pub enum Stage {
    Limit(Num),
    Skip(Num),
    Match(Filter),
    Project(Proj),
    AddFields(bool, Vec<(Path, Ex)>),
    Unset(Vec<Path>),
    UnsetOne(Path),
    ReplaceWith(Ex),
    ReplaceRoot(Ex),
    Group(Ex, Vec<(Key, u8, AccArg)>),
    Sort(Sort),
    Unwind {
        path: Path,
        index: Option<Str>,
        preserve: Option<Val>,
    },
    UnwindStr(Path),
    Count(Str),
    SortByCount(Ex),
    Bucket {
        group_by: Ex,
        boundaries: Vec<Val>,
        default: Option<Val>,
        output: Vec<(Key, u8, AccArg)>,
    },
    BucketAuto {
        group_by: Ex,
        buckets: Num,
        output: Vec<(Key, u8, AccArg)>,
    },
    Facet(Vec<(Key, Vec<Stage>)>),
    Redact(Ex),
    Sample(Num),
    Documents(Ex),
    Lookup {
        local: Path,
        foreign: Path,
        as_: Path,
        pipeline: Option<Vec<Stage>>,
    },
    UnionWith(Vec<Stage>),
    GraphLookup {
        start_with: Ex,
        from_field: Path,
        to_field: Path,
        as_: Path,
        max_depth: Option<Num>,
        depth_field: Option<Path>,
    },
    Raw(u8, Vec<(u8, Val)>),
    RawVal(u8, Val),
}

impl Cx {
    /// A pipeline array; `d` levels may nest below it.
    pub fn pipeline(&mut self, stages: &[Stage], d: usize) -> Bson {
        if d == 0 {
            return Bson::Array(vec![]);
        }
        Bson::Array(
            stages
                .iter()
                .map(|s| Bson::Document(self.stage(s, d - 1)))
                .collect(),
        )
    }

    pub fn stages(&mut self, stages: &[Stage], d: usize) -> Vec<Document> {
        stages.iter().map(|s| self.stage(s, d)).collect()
    }

    /// One stage document; `d` levels may nest below it. Out of budget or depth, it is
    /// `{$limit: 1}`; a stage whose argument needs more levels than are left is `{}`.
    fn stage(&mut self, s: &Stage, d: usize) -> Document {
        let mut out = Document::new();
        if !self.spend(1) || d == 0 {
            out.insert("$limit", 1);
            return out;
        }
        if let Some((name, arg)) = self.stage_arg(s, d - 1) {
            out.insert(name, arg);
        }
        out
    }

    /// A stage's name and argument; `e` levels may nest below the argument.
    fn stage_arg(&mut self, s: &Stage, e: usize) -> Option<(&'static str, Bson)> {
        Some(match s {
            Stage::Limit(n) => ("$limit", n.build()),
            Stage::Skip(n) => ("$skip", n.build()),
            Stage::Match(f) => ("$match", Bson::Document(self.filter(f, e))),
            Stage::Project(p) => ("$project", Bson::Document(self.proj(p, e))),
            Stage::AddFields(set, fields) => {
                let name = if *set { "$set" } else { "$addFields" };
                (name, Bson::Document(self.add_fields(fields, e)))
            }
            Stage::Unset(ps) => {
                let paths = ps.iter().map(|p| Bson::String(p.build())).collect();
                ("$unset", Bson::Array(paths))
            }
            Stage::UnsetOne(p) => ("$unset", Bson::String(p.build())),
            Stage::ReplaceWith(x) => ("$replaceWith", self.expr(x, e)),
            Stage::ReplaceRoot(x) if e > 0 => {
                let root = self.expr(x, e - 1);
                ("$replaceRoot", Bson::Document(single("newRoot", root)))
            }
            Stage::Group(id, accs) => ("$group", Bson::Document(self.group(id, accs, e))),
            Stage::Sort(s) => ("$sort", Bson::Document(self.sort(s, e))),
            Stage::Unwind {
                path,
                index,
                preserve,
            } => {
                let o = self.unwind(path, index.as_ref(), preserve.as_ref(), e);
                ("$unwind", Bson::Document(o))
            }
            Stage::UnwindStr(p) => ("$unwind", Bson::String(format!("${}", p.build()))),
            Stage::Count(s) => ("$count", Bson::String(s.build())),
            Stage::SortByCount(x) => ("$sortByCount", self.expr(x, e)),
            Stage::Bucket {
                group_by,
                boundaries,
                default,
                output,
            } if e > 1 => {
                let o = self.bucket(group_by, boundaries, default.as_ref(), output, e);
                ("$bucket", Bson::Document(o))
            }
            Stage::BucketAuto {
                group_by,
                buckets,
                output,
            } if e > 1 => {
                let o = self.bucket_auto(group_by, buckets, output, e);
                ("$bucketAuto", Bson::Document(o))
            }
            Stage::Facet(facets) => ("$facet", Bson::Document(self.facet(facets, e))),
            Stage::Redact(x) => ("$redact", self.expr(x, e)),
            Stage::Sample(n) => ("$sample", Bson::Document(single("size", n.build()))),
            Stage::Documents(x) => ("$documents", self.expr(x, e)),
            Stage::Lookup {
                local,
                foreign,
                as_,
                pipeline,
            } => {
                let o = self.lookup([local, foreign, as_], pipeline.as_deref(), e);
                ("$lookup", Bson::Document(o))
            }
            Stage::UnionWith(stages) => ("$unionWith", Bson::Document(self.union_with(stages, e))),
            Stage::GraphLookup {
                start_with,
                from_field,
                to_field,
                as_,
                max_depth,
                depth_field,
            } => {
                let fields = [from_field, to_field, as_];
                let o = self.graph_lookup(
                    start_with,
                    fields,
                    max_depth.as_ref(),
                    depth_field.as_ref(),
                    e,
                );
                ("$graphLookup", Bson::Document(o))
            }
            Stage::Raw(i, fields) => (pick(STAGES, *i), Bson::Document(self.raw_stage(fields, e))),
            Stage::RawVal(i, v) => (pick(STAGES, *i), self.val(v, e)),
            // Too few levels left for their argument: the stage comes out as `{}`.
            Stage::ReplaceRoot(_) | Stage::Bucket { .. } | Stage::BucketAuto { .. } => return None,
        })
    }

    /// `$addFields` / `$set`: `{path: expr, ...}`.
    fn add_fields(&mut self, fields: &[(Path, Ex)], e: usize) -> Document {
        let mut o = Document::new();
        for (p, x) in fields {
            let v = self.expr(x, e);
            o.insert(p.build(), v);
        }
        o
    }

    fn unwind(
        &mut self,
        path: &Path,
        index: Option<&Str>,
        preserve: Option<&Val>,
        e: usize,
    ) -> Document {
        let mut o = Document::new();
        o.insert("path", format!("${}", path.build()));
        if let Some(i) = index {
            o.insert("includeArrayIndex", i.build());
        }
        if let Some(p) = preserve {
            if e > 0 {
                o.insert("preserveNullAndEmptyArrays", self.val(p, e - 1));
            }
        }
        o
    }

    /// A known or unknown stage name with arguments under any stage's option names.
    fn raw_stage(&mut self, fields: &[(u8, Val)], e: usize) -> Document {
        let mut o = Document::new();
        for (k, v) in fields {
            if e == 0 {
                break;
            }
            let v = self.val(v, e - 1);
            o.insert(pick(STAGE_KEYS, *k), v);
        }
        o
    }
}
