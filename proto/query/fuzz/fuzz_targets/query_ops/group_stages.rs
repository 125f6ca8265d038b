//! Grouping stages (`$group`, `$bucket`, `$bucketAuto`) and their accumulators.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::exprs::Ex;
use crate::scalars::{Key, Num};
use crate::sorts::Sort;
use crate::tables::{pick, ACCUMULATORS};
use crate::values::{Cx, Val};

#[derive(Arbitrary, Debug)]
pub enum AccArg {
    E(Ex),
    N(Ex, Num),
    Sorted(Sort, Ex, Option<Num>),
    Percentile(Ex, Vec<Num>, u8),
    Raw(Val),
}

impl Cx {
    /// `$group`'s argument; `e` levels may nest below it.
    pub fn group(&mut self, id: &Ex, accs: &[(Key, u8, AccArg)], e: usize) -> Document {
        let mut o = Document::new();
        if e > 0 {
            o.insert("_id", self.expr(id, e - 1));
        }
        self.accs(&mut o, accs, e);
        o
    }

    /// `$bucket`'s argument; `e` (at least 2) levels may nest below it.
    pub fn bucket(
        &mut self,
        group_by: &Ex,
        boundaries: &[Val],
        default: Option<&Val>,
        output: &[(Key, u8, AccArg)],
        e: usize,
    ) -> Document {
        let mut o = Document::new();
        o.insert("groupBy", self.expr(group_by, e - 1));
        o.insert(
            "boundaries",
            boundaries
                .iter()
                .map(|v| self.val(v, e - 2))
                .collect::<Vec<_>>(),
        );
        if let Some(v) = default {
            o.insert("default", self.val(v, e - 1));
        }
        self.bucket_output(&mut o, output, e - 1);
        o
    }

    /// `$bucketAuto`'s argument; `e` (at least 2) levels may nest below it.
    pub fn bucket_auto(
        &mut self,
        group_by: &Ex,
        buckets: &Num,
        output: &[(Key, u8, AccArg)],
        e: usize,
    ) -> Document {
        let mut o = Document::new();
        o.insert("groupBy", self.expr(group_by, e - 1));
        o.insert("buckets", buckets.build());
        self.bucket_output(&mut o, output, e - 1);
        o
    }

    /// A bucket stage's `output` document, left out when there are no accumulators.
    fn bucket_output(&mut self, o: &mut Document, output: &[(Key, u8, AccArg)], d: usize) {
        if !output.is_empty() {
            let mut out_doc = Document::new();
            self.accs(&mut out_doc, output, d);
            o.insert("output", out_doc);
        }
    }

    fn accs(&mut self, out: &mut Document, accs: &[(Key, u8, AccArg)], d: usize) {
        for (k, i, a) in accs {
            if d < 2 {
                break;
            }
            let v = match a {
                AccArg::E(e) => self.expr(e, d - 1),
                AccArg::N(e, n) => {
                    let mut o = Document::new();
                    o.insert("input", self.expr(e, d - 2));
                    o.insert("n", n.build());
                    Bson::Document(o)
                }
                AccArg::Sorted(s, e, n) => {
                    let mut o = Document::new();
                    o.insert("sortBy", self.sort(s, d - 2));
                    o.insert("output", self.expr(e, d - 2));
                    if let Some(n) = n {
                        o.insert("n", n.build());
                    }
                    Bson::Document(o)
                }
                AccArg::Percentile(e, ps, m) => {
                    let mut o = Document::new();
                    o.insert("input", self.expr(e, d - 2));
                    if d > 2 {
                        o.insert("p", Bson::Array(ps.iter().map(Num::build).collect()));
                    }
                    o.insert("method", ["approximate", "exact", "x"][*m as usize % 3]);
                    Bson::Document(o)
                }
                AccArg::Raw(v) => self.val(v, d - 1),
            };
            let mut acc = Document::new();
            acc.insert(pick(ACCUMULATORS, *i), v);
            out.insert(k.build(), acc);
        }
    }
}
