//! What a pipeline does to collections besides its source: which it reads, replaces or
//! merges into, at any depth, so that authorization checks what the shard will run.

use super::{Pipeline, Stage};

impl Pipeline {
    /// Names of collections that `$lookup`/`$graphLookup`/`$unionWith` read, including
    /// nested pipelines (for loading them ahead of time).
    pub fn referenced_collections(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .accesses()
            .into_iter()
            .filter(|a| a.access == Access::Read)
            .map(|a| a.coll)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every collection the pipeline touches besides its source, at any depth
    /// (`$facet`, `$lookup` and `$unionWith` sub-pipelines), and how: what authorization
    /// checks, so that it sees exactly what the shard will run.
    pub fn accesses(&self) -> Vec<CollectionAccess> {
        let mut out = Vec::new();
        self.collect_accesses(&mut out);
        if let Some(output) = &self.output {
            out.push(output.access());
        }
        out
    }

    fn collect_accesses(&self, out: &mut Vec<CollectionAccess>) {
        for s in &self.stages {
            match s {
                Stage::Lookup(l) => {
                    if let Some(c) = &l.from {
                        out.push(CollectionAccess::read(c));
                    }
                    if let Some(p) = &l.pipeline {
                        p.collect_accesses(out);
                    }
                }
                Stage::GraphLookup(g) => out.push(CollectionAccess::read(&g.from)),
                Stage::UnionWith(u) => {
                    out.push(CollectionAccess::read(&u.coll));
                    if let Some(p) = &u.pipeline {
                        p.collect_accesses(out);
                    }
                }
                Stage::Facet(f) => {
                    for p in f.pipelines() {
                        p.collect_accesses(out);
                    }
                }
                _ => {}
            }
        }
    }
}

/// A collection a pipeline touches besides its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionAccess {
    /// `None`: the aggregation's own database.
    pub db: Option<String>,
    pub coll: String,
    pub access: Access,
}

impl CollectionAccess {
    fn read(coll: &str) -> CollectionAccess {
        CollectionAccess {
            db: None,
            coll: coll.to_string(),
            access: Access::Read,
        }
    }
}

/// How a pipeline uses a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `$lookup`, `$graphLookup`, `$unionWith`.
    Read,
    /// `$out`: the collection is replaced.
    Replace,
    /// `$merge`: documents may be inserted (`whenNotMatched: "insert"`) and matched ones
    /// written (any `whenMatched` but `fail`: MongoDB performs even `keepExisting` as an
    /// update, an upsert, so it needs the update privilege too).
    Merge { inserts: bool, updates: bool },
}
