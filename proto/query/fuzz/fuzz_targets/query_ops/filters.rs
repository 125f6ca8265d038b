//! Filters: field predicates, every query operator, `$and`/`$or`/`$nor`, `$expr`,
//! `$jsonSchema` and the top-level clauses (`$comment`, `$where`, `$text`, ...).

use bson::{spec::BinarySubtype, Binary, Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::exprs::Ex;
use crate::paths::Path;
use crate::scalars::{no_nul, Key, Num, Str};
use crate::schema::Schema;
use crate::tables::{pick, BIT_OPS, CMP_OPS, QUERY_OPS, REGEX_OPTS, TYPE_NAMES};
use crate::values::{Cx, Val};

#[derive(Arbitrary, Debug)]
pub struct Filter(Vec<Clause>);

#[derive(Arbitrary, Debug)]
pub enum Clause {
    Field(Path, Pred),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Nor(Vec<Filter>),
    Expr(Ex),
    Comment(Val),
    Where(Str),
    Text(Str),
    JsonSchema(Schema),
    AlwaysTrue(bool),
    Raw(Key, Val),
}

#[derive(Arbitrary, Debug)]
pub enum Pred {
    Value(Val),
    Ops(Vec<QOp>),
    Regex(Str, u8),
}

#[derive(Arbitrary, Debug)]
pub enum QOp {
    Cmp(u8, Val),
    In(bool, Vec<Val>),
    Exists(Val),
    Type(TypeArg),
    Mod(Num, Num),
    ModRaw(Val),
    Regex(Str, Option<u8>),
    Size(Val),
    All(Vec<Val>),
    AllElemMatch(Vec<Filter>),
    ElemMatch(Filter),
    ElemMatchPred(Vec<QOp>),
    Not(Box<Pred>),
    Bits(u8, BitsArg),
    Raw(u8, Val),
    Unknown(Str, Val),
}

#[derive(Arbitrary, Debug)]
pub enum TypeArg {
    Name(u8),
    Num(Num),
    List(Vec<TypeArg>),
}

#[derive(Arbitrary, Debug)]
pub enum BitsArg {
    Num(Num),
    Positions(Vec<Num>),
    Bin(Vec<u8>),
    Raw(Val),
}

impl Cx {
    /// A filter document; `d` levels may nest below it.
    pub fn filter(&mut self, f: &Filter, d: usize) -> Document {
        let mut out = Document::new();
        for c in &f.0 {
            if !self.spend(1) {
                break;
            }
            match c {
                Clause::Field(p, pred) => {
                    let v = self.pred(pred, d);
                    out.insert(p.build(), v);
                }
                Clause::And(fs) | Clause::Or(fs) | Clause::Nor(fs) => {
                    let op = match c {
                        Clause::And(_) => "$and",
                        Clause::Or(_) => "$or",
                        _ => "$nor",
                    };
                    if d < 2 {
                        continue;
                    }
                    let list = fs
                        .iter()
                        .map(|f| Bson::Document(self.filter(f, d - 2)))
                        .collect::<Vec<_>>();
                    out.insert(op, list);
                }
                Clause::Expr(e) => {
                    let v = self.expr(e, d);
                    out.insert("$expr", v);
                }
                Clause::Comment(v) => {
                    let v = self.val(v, d);
                    out.insert("$comment", v);
                }
                Clause::Where(s) => {
                    out.insert("$where", s.build());
                }
                Clause::Text(s) => {
                    if d > 0 {
                        let mut t = Document::new();
                        t.insert("$search", s.build());
                        out.insert("$text", t);
                    }
                }
                Clause::JsonSchema(s) => {
                    if d > 0 {
                        let v = self.schema(s, d - 1);
                        out.insert("$jsonSchema", v);
                    }
                }
                Clause::AlwaysTrue(b) => {
                    out.insert(if *b { "$alwaysTrue" } else { "$alwaysFalse" }, 1);
                }
                Clause::Raw(k, v) => {
                    let v = self.val(v, d);
                    out.insert(k.build(), v);
                }
            }
        }
        out
    }

    /// The value of a field in a filter: `d` levels may nest below it.
    pub fn pred(&mut self, p: &Pred, d: usize) -> Bson {
        match p {
            Pred::Value(v) => self.val(v, d),
            Pred::Regex(s, o) => Bson::RegularExpression(bson::Regex {
                pattern: no_nul(s.build()),
                options: pick(REGEX_OPTS, *o).to_string(),
            }),
            Pred::Ops(ops) => {
                if d == 0 {
                    return Bson::Null;
                }
                Bson::Document(self.ops(ops, d - 1))
            }
        }
    }

    pub fn ops(&mut self, ops: &[QOp], d: usize) -> Document {
        let mut out = Document::new();
        for op in ops {
            if !self.spend(1) {
                break;
            }
            let (k, v): (String, Bson) = match op {
                QOp::Cmp(i, v) => (pick(CMP_OPS, *i).into(), self.val(v, d)),
                QOp::In(nin, vs) => {
                    if d == 0 {
                        continue;
                    }
                    let list = vs.iter().map(|v| self.val(v, d - 1)).collect();
                    (
                        (if *nin { "$nin" } else { "$in" }).into(),
                        Bson::Array(list),
                    )
                }
                QOp::Exists(v) => ("$exists".into(), self.val(v, d)),
                QOp::Type(t) => ("$type".into(), type_arg(t, d)),
                QOp::Mod(a, b) => {
                    if d == 0 {
                        continue;
                    }
                    ("$mod".into(), Bson::Array(vec![a.build(), b.build()]))
                }
                QOp::ModRaw(v) => ("$mod".into(), self.val(v, d)),
                QOp::Regex(s, o) => {
                    if let Some(o) = o {
                        out.insert("$options", pick(REGEX_OPTS, *o));
                    }
                    ("$regex".into(), Bson::String(s.build()))
                }
                QOp::Size(v) => ("$size".into(), self.val(v, d)),
                QOp::All(vs) => {
                    if d == 0 {
                        continue;
                    }
                    let list = vs.iter().map(|v| self.val(v, d - 1)).collect();
                    ("$all".into(), Bson::Array(list))
                }
                QOp::AllElemMatch(fs) => {
                    if d < 3 {
                        continue;
                    }
                    let list = fs
                        .iter()
                        .map(|f| {
                            let mut em = Document::new();
                            em.insert("$elemMatch", self.filter(f, d - 3));
                            Bson::Document(em)
                        })
                        .collect();
                    ("$all".into(), Bson::Array(list))
                }
                QOp::ElemMatch(f) => {
                    if d == 0 {
                        continue;
                    }
                    ("$elemMatch".into(), Bson::Document(self.filter(f, d - 1)))
                }
                QOp::ElemMatchPred(ops) => {
                    if d == 0 {
                        continue;
                    }
                    ("$elemMatch".into(), Bson::Document(self.ops(ops, d - 1)))
                }
                QOp::Not(p) => ("$not".into(), self.pred(p, d)),
                QOp::Bits(i, arg) => (pick(BIT_OPS, *i).into(), self.bits(arg, d)),
                QOp::Raw(i, v) => (pick(QUERY_OPS, *i).into(), self.val(v, d)),
                QOp::Unknown(s, v) => (no_nul(s.build()), self.val(v, d)),
            };
            out.insert(k, v);
        }
        out
    }

    /// The argument of a `$bits...` operator: a mask, bit positions or raw bytes.
    fn bits(&mut self, arg: &BitsArg, d: usize) -> Bson {
        match arg {
            BitsArg::Num(n) => n.build(),
            BitsArg::Positions(ns) if d > 0 => Bson::Array(ns.iter().map(Num::build).collect()),
            BitsArg::Positions(_) => Bson::Null,
            BitsArg::Bin(b) => Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: b.clone(),
            }),
            BitsArg::Raw(v) => self.val(v, d),
        }
    }
}

pub fn type_arg(t: &TypeArg, d: usize) -> Bson {
    match t {
        TypeArg::Name(i) => Bson::String(pick(TYPE_NAMES, *i).into()),
        TypeArg::Num(n) => n.build(),
        TypeArg::List(ts) if d > 0 => Bson::Array(ts.iter().map(|t| type_arg(t, d - 1)).collect()),
        TypeArg::List(_) => Bson::Null,
    }
}
