//! Sort specifications: directions as any number or value, `$meta` and `$natural`.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::paths::Path;
use crate::scalars::Num;
use crate::tables::{pick, META};
use crate::values::{Cx, Val};

#[derive(Arbitrary, Debug)]
pub struct Sort(Vec<(Path, SV)>);

#[derive(Arbitrary, Debug)]
pub enum SV {
    Asc,
    Desc,
    Num(Num),
    Meta(u8),
    Natural(Num),
    Val(Val),
}

impl Cx {
    pub fn sort(&mut self, s: &Sort, d: usize) -> Document {
        let mut out = Document::new();
        for (p, v) in &s.0 {
            let (k, v) = match v {
                SV::Asc => (p.build(), Bson::Int32(1)),
                SV::Desc => (p.build(), Bson::Int32(-1)),
                SV::Num(n) => (p.build(), n.build()),
                SV::Meta(i) if d > 0 => {
                    let mut m = Document::new();
                    m.insert("$meta", pick(META, *i));
                    (p.build(), Bson::Document(m))
                }
                SV::Natural(n) => ("$natural".into(), n.build()),
                SV::Val(v) => (p.build(), self.val(v, d)),
                _ => (p.build(), Bson::Int32(1)),
            };
            out.insert(k, v);
        }
        out
    }
}
