//! Stages that read other collections or run sub-pipelines: `$lookup`, `$unionWith`,
//! `$graphLookup` (all from collection "c", the input documents) and `$facet`.

use bson::Document;

use crate::exprs::Ex;
use crate::paths::Path;
use crate::scalars::{Key, Num};
use crate::stages::Stage;
use crate::values::Cx;

impl Cx {
    /// `$facet`'s argument: named sub-pipelines; `e` levels may nest below it.
    pub fn facet(&mut self, facets: &[(Key, Vec<Stage>)], e: usize) -> Document {
        let mut o = Document::new();
        if e > 1 {
            for (k, stages) in facets {
                let p = self.pipeline(stages, e - 1);
                o.insert(k.build(), p);
            }
        }
        o
    }

    /// `$lookup`'s argument; `[local, foreign, as]` are its three field paths.
    pub fn lookup(&mut self, fields: [&Path; 3], pipeline: Option<&[Stage]>, e: usize) -> Document {
        let [local, foreign, as_] = fields;
        let mut o = Document::new();
        o.insert("from", "c");
        o.insert("localField", local.build());
        o.insert("foreignField", foreign.build());
        o.insert("as", as_.build());
        if let Some(p) = pipeline {
            if e > 0 {
                let p = self.pipeline(p, e - 1);
                o.insert("pipeline", p);
            }
        }
        o
    }

    /// `$unionWith`'s argument; `e` levels may nest below it.
    pub fn union_with(&mut self, stages: &[Stage], e: usize) -> Document {
        let mut o = Document::new();
        o.insert("coll", "c");
        if e > 0 {
            let p = self.pipeline(stages, e - 1);
            o.insert("pipeline", p);
        }
        o
    }

    /// `$graphLookup`'s argument; `[from, to, as]` are its connect-from, connect-to and
    /// output field paths.
    pub fn graph_lookup(
        &mut self,
        start_with: &Ex,
        fields: [&Path; 3],
        max_depth: Option<&Num>,
        depth_field: Option<&Path>,
        e: usize,
    ) -> Document {
        let [from_field, to_field, as_] = fields;
        let mut o = Document::new();
        o.insert("from", "c");
        if e > 0 {
            o.insert("startWith", self.expr(start_with, e - 1));
        }
        o.insert("connectFromField", from_field.build());
        o.insert("connectToField", to_field.build());
        o.insert("as", as_.build());
        if let Some(n) = max_depth {
            o.insert("maxDepth", n.build());
        }
        if let Some(p) = depth_field {
            o.insert("depthField", p.build());
        }
        o
    }
}
