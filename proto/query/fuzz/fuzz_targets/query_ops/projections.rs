//! Projections: inclusion/exclusion, `$slice`, `$elemMatch`, `$meta`, expressions and
//! nested projections.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::exprs::Ex;
use crate::filters::Filter;
use crate::paths::Path;
use crate::scalars::{Key, Num};
use crate::tables::{pick, META};
use crate::values::{single, Cx, Val};

#[derive(Arbitrary, Debug)]
pub struct Proj(Vec<(Path, PV)>);

#[derive(Arbitrary, Debug)]
pub enum PV {
    Incl(bool),
    Num(Num),
    Slice(Num),
    Slice2(Num, Num),
    SliceRaw(Val),
    ElemMatch(Filter),
    Meta(u8),
    Expr(Ex),
    Nested(Vec<(Key, PV)>),
    Val(Val),
}

impl Cx {
    pub fn proj(&mut self, p: &Proj, d: usize) -> Document {
        let mut out = Document::new();
        for (path, v) in &p.0 {
            let v = self.pv(v, d);
            out.insert(path.build(), v);
        }
        out
    }

    fn pv(&mut self, v: &PV, d: usize) -> Bson {
        if !self.spend(1) {
            return Bson::Int32(1);
        }
        let one = |k: &str, v: Bson| Bson::Document(single(k, v));
        match v {
            PV::Incl(b) => Bson::Boolean(*b),
            PV::Num(n) => n.build(),
            PV::Slice(n) if d > 0 => one("$slice", n.build()),
            PV::Slice2(a, b) if d > 1 => one("$slice", Bson::Array(vec![a.build(), b.build()])),
            PV::SliceRaw(v) if d > 0 => {
                let v = self.val(v, d - 1);
                one("$slice", v)
            }
            PV::ElemMatch(f) if d > 1 => {
                let f = self.filter(f, d - 2);
                one("$elemMatch", Bson::Document(f))
            }
            PV::Meta(i) if d > 0 => one("$meta", Bson::String(pick(META, *i).into())),
            PV::Expr(e) => self.expr(e, d),
            PV::Nested(fields) if d > 0 => {
                let mut o = Document::new();
                for (k, v) in fields {
                    let v = self.pv(v, d - 1);
                    o.insert(k.build(), v);
                }
                Bson::Document(o)
            }
            PV::Val(v) => self.val(v, d),
            _ => Bson::Int32(0),
        }
    }
}
