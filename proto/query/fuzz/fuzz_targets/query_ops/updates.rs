//! Updates: operator documents (every update operator, `$each` with its modifiers,
//! `$bit`, `$currentDate`, `$pull` conditions), replacements, pipelines, and array
//! filters.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::filters::{Filter, Pred};
use crate::paths::Path;
use crate::scalars::{Key, Num};
use crate::sorts::Sort;
use crate::stages::Stage;
use crate::tables::{pick, IDENTS, UPDATE_OPS};
use crate::values::{Cx, Val};

#[derive(Arbitrary, Debug)]
pub enum Update {
    Mods(Vec<(u8, Vec<(Path, UArg)>)>),
    Replace(Vec<(Key, Val)>),
    Pipeline(Vec<Stage>),
    Raw(Val),
}

#[derive(Arbitrary, Debug)]
pub enum UArg {
    N(Num),
    V(Val),
    Path(Path),
    Each {
        each: Vec<Val>,
        position: Option<Num>,
        slice: Option<Num>,
        sort: Option<SortArg>,
        extra: Option<(Key, Val)>,
    },
    Bit(u8, Num),
    Pull(Pred),
    PullFilter(Filter),
    CurrentDate(u8),
}

#[derive(Arbitrary, Debug)]
pub enum SortArg {
    Dir(Num),
    Spec(Sort),
}

#[derive(Arbitrary, Debug)]
pub enum ArrayFilter {
    Ident(u8, Option<Path>, Pred),
    Any(Filter),
}

#[derive(Arbitrary, Debug)]
pub struct UpdateCase {
    pub update: Update,
    pub array_filters: Option<Vec<ArrayFilter>>,
    pub upsert_filter: Filter,
    pub matched: Option<u8>,
    pub upsert_insert: bool,
}

impl Cx {
    /// The `u` of an update statement; `d` levels may nest below it.
    pub fn update(&mut self, u: &Update, d: usize) -> Bson {
        match u {
            Update::Mods(ops) => {
                let mut out = Document::new();
                for (op, fields) in ops {
                    if d == 0 {
                        break;
                    }
                    let mut f = Document::new();
                    for (p, a) in fields {
                        let v = self.uarg(a, d - 1);
                        f.insert(p.build(), v);
                    }
                    out.insert(pick(UPDATE_OPS, *op), f);
                }
                Bson::Document(out)
            }
            Update::Replace(fields) => Bson::Document(self.doc(fields, d)),
            Update::Pipeline(stages) => self.pipeline(stages, d),
            Update::Raw(v) => self.val(v, d),
        }
    }

    fn uarg(&mut self, a: &UArg, d: usize) -> Bson {
        if !self.spend(1) {
            return Bson::Int32(1);
        }
        match a {
            UArg::N(n) => n.build(),
            UArg::V(v) => self.val(v, d),
            UArg::Path(p) => Bson::String(p.build()),
            UArg::Each {
                each,
                position,
                slice,
                sort,
                extra,
            } if d > 1 => {
                let mut o = Document::new();
                o.insert(
                    "$each",
                    Bson::Array(each.iter().map(|v| self.val(v, d - 2)).collect()),
                );
                if let Some(n) = position {
                    o.insert("$position", n.build());
                }
                if let Some(n) = slice {
                    o.insert("$slice", n.build());
                }
                match sort {
                    Some(SortArg::Dir(n)) => {
                        o.insert("$sort", n.build());
                    }
                    Some(SortArg::Spec(s)) => {
                        let s = self.sort(s, d - 2);
                        o.insert("$sort", s);
                    }
                    None => {}
                }
                if let Some((k, v)) = extra {
                    let v = self.val(v, d - 1);
                    o.insert(k.build(), v);
                }
                Bson::Document(o)
            }
            UArg::Bit(i, n) if d > 0 => {
                let mut o = Document::new();
                o.insert(["and", "or", "xor", "nand"][*i as usize % 4], n.build());
                Bson::Document(o)
            }
            UArg::Pull(p) => self.pred(p, d),
            UArg::PullFilter(f) if d > 0 => Bson::Document(self.filter(f, d - 1)),
            UArg::CurrentDate(i) if d > 0 => {
                let mut o = Document::new();
                o.insert("$type", ["date", "timestamp", "x"][*i as usize % 3]);
                Bson::Document(o)
            }
            _ => Bson::Boolean(true),
        }
    }

    pub fn array_filter(&mut self, af: &ArrayFilter, d: usize) -> Document {
        match af {
            ArrayFilter::Ident(i, p, pred) => {
                let mut k = pick(IDENTS, *i).to_string();
                if let Some(p) = p {
                    k = format!("{k}.{}", p.build());
                }
                let v = self.pred(pred, d);
                let mut o = Document::new();
                o.insert(k, v);
                o
            }
            ArrayFilter::Any(f) => self.filter(f, d),
        }
    }
}
