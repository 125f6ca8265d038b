//! Aggregation expressions: field paths, variables, literals, operators in positional and
//! named-argument form, `$switch` and `$let`.

use bson::{Bson, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::paths::Path;
use crate::scalars::{DateV, Key, Num, Str};
use crate::sorts::Sort;
use crate::tables::{
    named_args, pick, ARG_NAMES, EXPR_OPS, IDENTS, NAMED_OPS, TIMEZONES, UNITS, VARS,
};
use crate::values::{single, Cx, Val};

#[derive(Arbitrary, Debug)]
pub enum Ex {
    Field(Path),
    Var(u8),
    VarPath(u8, Path),
    Lit(Val),
    Literal(Val),
    Op(u8, Vec<Ex>),
    Op1(u8, Box<Ex>),
    Named(u8, Vec<(u8, NArg)>),
    Obj(Vec<(Key, Ex)>),
    Arr(Vec<Ex>),
    Switch(Vec<(Ex, Ex)>, Option<Box<Ex>>),
    Let(Vec<(u8, Ex)>, Box<Ex>),
}

#[derive(Arbitrary, Debug)]
pub enum NArg {
    Str(Str),
    E(Ex),
    N(Num),
    D(DateV),
    Unit(u8),
    Tz(u8),
    Ident(u8),
    Sort(Sort),
    List(Vec<Ex>),
}

impl Cx {
    /// An expression; `d` levels may nest below it.
    pub fn expr(&mut self, e: &Ex, d: usize) -> Bson {
        if !self.spend(1) {
            return Bson::Null;
        }
        match e {
            Ex::Field(p) => Bson::String(format!("${}", p.build())),
            Ex::Var(i) => Bson::String(pick(VARS, *i).into()),
            Ex::VarPath(i, p) => Bson::String(format!("{}.{}", pick(VARS, *i), p.build())),
            Ex::Lit(v) => self.lit(v, d),
            Ex::Literal(v) if d > 0 => Bson::Document(single("$literal", self.val(v, d - 1))),
            Ex::Op(i, args) if d > 1 => {
                let args = args.iter().map(|a| self.expr(a, d - 2)).collect::<Vec<_>>();
                Bson::Document(single(pick(EXPR_OPS, *i), args))
            }
            Ex::Op1(i, arg) if d > 0 => {
                Bson::Document(single(pick(EXPR_OPS, *i), self.expr(arg, d - 1)))
            }
            Ex::Named(i, args) if d > 1 => self.named(*i, args, d),
            Ex::Obj(fields) if d > 0 => {
                let mut o = Document::new();
                for (k, v) in fields {
                    let v = self.expr(v, d - 1);
                    o.insert(k.build(), v);
                }
                Bson::Document(o)
            }
            Ex::Arr(items) if d > 0 => {
                Bson::Array(items.iter().map(|i| self.expr(i, d - 1)).collect())
            }
            Ex::Switch(branches, default) if d > 3 => self.switch(branches, default, d),
            Ex::Let(vars, body) if d > 2 => self.let_in(vars, body, d),
            _ => Bson::Int32(1),
        }
    }

    /// `Ex::Lit`: a value as is, except that a plain document would be an expression
    /// object: documents are wrapped in `$literal`, one level up.
    fn lit(&mut self, v: &Val, d: usize) -> Bson {
        let v = self.val(v, d.saturating_sub(1));
        match v {
            Bson::Document(_) if d > 0 => Bson::Document(single("$literal", v)),
            Bson::Document(_) => Bson::Null,
            v => v,
        }
    }

    /// `{op: {name: arg, ...}}`. The high bit of a name's index picks from every argument
    /// name rather than the operator's own.
    fn named(&mut self, i: u8, args: &[(u8, NArg)], d: usize) -> Bson {
        let op = pick(NAMED_OPS, i);
        let names = named_args(op);
        let mut a = Document::new();
        for (n, arg) in args {
            let name = if n & 0x80 != 0 {
                pick(ARG_NAMES, *n)
            } else {
                pick(names, *n)
            };
            let v = self.narg(arg, d - 2);
            a.insert(name, v);
        }
        Bson::Document(single(op, a))
    }

    fn narg(&mut self, a: &NArg, d: usize) -> Bson {
        match a {
            NArg::Str(s) => Bson::String(s.build()),
            NArg::E(e) => self.expr(e, d),
            NArg::N(n) => n.build(),
            NArg::D(dt) => Bson::DateTime(dt.build()),
            NArg::Unit(i) => Bson::String(pick(UNITS, *i).into()),
            NArg::Tz(i) => Bson::String(pick(TIMEZONES, *i).into()),
            NArg::Ident(i) => Bson::String(pick(IDENTS, *i).into()),
            NArg::Sort(s) if d > 0 => Bson::Document(self.sort(s, d - 1)),
            NArg::List(es) if d > 0 => {
                Bson::Array(es.iter().map(|e| self.expr(e, d - 1)).collect())
            }
            _ => Bson::Null,
        }
    }

    /// `{$switch: {branches: [{case, then}, ...], default}}`.
    fn switch(&mut self, branches: &[(Ex, Ex)], default: &Option<Box<Ex>>, d: usize) -> Bson {
        let bs = branches
            .iter()
            .map(|(c, t)| {
                let mut b = Document::new();
                b.insert("case", self.expr(c, d - 4));
                b.insert("then", self.expr(t, d - 4));
                Bson::Document(b)
            })
            .collect::<Vec<_>>();
        let mut s = Document::new();
        s.insert("branches", bs);
        if let Some(def) = default {
            s.insert("default", self.expr(def, d - 2));
        }
        Bson::Document(single("$switch", s))
    }

    /// `{$let: {vars: {...}, in: body}}`.
    fn let_in(&mut self, vars: &[(u8, Ex)], body: &Ex, d: usize) -> Bson {
        let mut vs = Document::new();
        for (n, v) in vars {
            let v = self.expr(v, d - 3);
            vs.insert(pick(IDENTS, *n), v);
        }
        let mut l = Document::new();
        l.insert("vars", vs);
        l.insert("in", self.expr(body, d - 2));
        Bson::Document(single("$let", l))
    }
}
