//! Aggregation expressions (owner: aggregation helper).
//!
//! An expression is parsed once into an [`Expr`] tree and evaluated many times against
//! documents. Evaluation follows MongoDB's aggregation semantics: field paths traverse
//! arrays, arithmetic widens int → long → double (decimal wins over everything), and a
//! missing value is distinct from null.
//!
//! "Missing" has no BSON representation, so [`Expr::eval`] reports it as
//! `Bson::Undefined` (the deprecated undefined type, which MongoDB itself treats like a
//! missing value in aggregation). [`Expr::eval_opt`] returns `None` instead.
//!
//! Layout: `parse` turns BSON into the [`Node`] tree, `eval` walks it, and `ops` is the
//! one table of operators. Each operator family has its own file: `arith` (with the
//! [`Num`] type) and `decimal` (Decimal128), `compare`, `control` (`$cond`, `$let`,
//! `$map`...), `string`, `regex`, `array`, `set`, `object`, `convert`, `accumulators`,
//! and `date` over `calendar` (days, time zones, date formats).

mod accumulators;
mod arith;
mod array;
mod calendar;
mod compare;
mod control;
mod convert;
mod date;
mod decimal;
mod eval;
mod object;
mod ops;
mod parse;
mod regex;
mod set;
mod string;
#[cfg(test)]
mod test_support;

use std::cmp::Ordering;

use ::regex::Regex;
use bson::{Bson, DateTime, Document};

use crate::{ErrorCode, MongoError, MongoResult};

use self::eval::Cx;
use self::ops::Op;
use self::parse::{parse_doc, parse_node, validate_var_name};

pub use self::eval::get_path_doc;
pub use self::regex::compile_regex;
pub use crate::bson_types::type_name;

pub(crate) use self::arith::{
    as_int_exact, eval_divide, num_add, num_f64, num_mul, num_of, num_to_bson, Num,
};
pub(crate) use self::convert::type_name_or_missing;
pub(crate) use self::decimal::Dec;
pub(crate) use self::set::canonical_key;

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr(Node);

/// Variables visible to an expression: `$$NOW`, `let` variables and any user variable.
/// `$$ROOT` and `$$CURRENT` are the document being evaluated; `$$REMOVE` is missing.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    vars: Vec<(String, Bson)>,
    now: Option<DateTime>,
}

impl Variables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns these variables plus `name` bound to `value` (rebinding replaces).
    pub fn with(mut self, name: impl Into<String>, value: Bson) -> Self {
        self.set(name, value);
        self
    }

    pub fn set(&mut self, name: impl Into<String>, value: Bson) {
        let name = name.into();
        match self.vars.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name, value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Bson> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Fixes `$$NOW` for the whole operation (MongoDB evaluates it once per command).
    pub fn with_now(mut self, now: DateTime) -> Self {
        self.now = Some(now);
        self
    }

    /// `$$NOW`: the fixed time if one was set, otherwise the current time.
    pub fn now(&self) -> DateTime {
        self.now.unwrap_or_else(DateTime::now)
    }

    /// Pins `$$NOW` if it is not pinned yet.
    pub fn pin_now(&mut self) {
        if self.now.is_none() {
            self.now = Some(DateTime::now());
        }
    }

    /// Evaluates a `let` document (`{name: expr, ...}`) against `root` and binds each
    /// result. Names must start with a lowercase letter or a non-ASCII character.
    pub fn bind_let(&mut self, spec: &Document, root: &Document) -> MongoResult<()> {
        let mut bound = Vec::with_capacity(spec.len());
        for (name, value) in spec {
            validate_var_name(name)?;
            let v = Expr::parse(value)?.eval(root, self)?;
            bound.push((name.clone(), v));
        }
        for (n, v) in bound {
            self.set(n, v);
        }
        Ok(())
    }
}

/// MongoDB's truthiness: false, null, missing/undefined and numeric zero are false.
pub fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !Dec::from_d128(d).is_zero(),
        _ => true,
    }
}

/// Compares two values in MongoDB's order with "missing" (`Bson::Undefined`) sorting
/// below null, as aggregation comparison expressions do.
pub fn compare_values(a: &Bson, b: &Bson) -> Ordering {
    match (a, b) {
        (Bson::Undefined, Bson::Undefined) => Ordering::Equal,
        (Bson::Undefined, Bson::MinKey) => Ordering::Greater,
        (Bson::MinKey, Bson::Undefined) => Ordering::Less,
        (Bson::Undefined, _) => Ordering::Less,
        (_, Bson::Undefined) => Ordering::Greater,
        _ => crate::order::compare(a, b),
    }
}

fn values_eq(a: &Bson, b: &Bson) -> bool {
    compare_values(a, b) == Ordering::Equal
}

impl Expr {
    /// Parses an expression: a field path (`"$a.b"`), a variable (`"$$x.y"`), an operator
    /// document (`{$add: [...]}`), an object or array expression, or a literal.
    pub fn parse(spec: &Bson) -> MongoResult<Expr> {
        Ok(Expr(parse_node(spec)?))
    }

    /// A literal expression that evaluates to `value`.
    pub fn constant(value: Bson) -> Expr {
        Expr(Node::Const(value))
    }

    /// Parses a document as an object expression, even if it is a single `$op` key.
    pub fn parse_object(spec: &Document) -> MongoResult<Expr> {
        Ok(Expr(parse_doc(spec)?))
    }

    /// The constant this expression evaluates to, if it does not depend on its input.
    pub fn as_constant(&self) -> Option<&Bson> {
        match &self.0 {
            Node::Const(v) => Some(v),
            _ => None,
        }
    }

    /// The dotted path if this expression is a plain field path (`"$a.b"` → `"a.b"`).
    pub fn as_field_path(&self) -> Option<String> {
        match &self.0 {
            Node::Field(p) => Some(p.join(".")),
            _ => None,
        }
    }

    /// Evaluates against `root` (which is `$$ROOT` and `$$CURRENT`). A missing result is
    /// `Bson::Undefined`.
    ///
    /// A result nested deeper than [`crate::depth::MAX_VALUE_DEPTH`] is Overflow (15): a
    /// pipeline could otherwise deepen a document a little more at every stage.
    pub fn eval(&self, root: &Document, vars: &Variables) -> MongoResult<Bson> {
        let mut cx = Cx {
            root,
            vars,
            locals: Vec::new(),
        };
        let v = self.ev(&mut cx)?;
        crate::depth::check_value_depth(&v)?;
        Ok(v)
    }

    /// Evaluates with `$$CURRENT` (and so plain field paths) bound to `current` while
    /// `$$ROOT` stays `root` (`$redact` descending into sub-documents).
    pub fn eval_with_current(
        &self,
        root: &Document,
        current: &Document,
        vars: &Variables,
    ) -> MongoResult<Bson> {
        let mut cx = Cx {
            root,
            vars,
            locals: vec![("CURRENT", Bson::Document(current.clone()))],
        };
        let v = self.ev(&mut cx)?;
        crate::depth::check_value_depth(&v)?;
        Ok(v)
    }

    /// Like [`Expr::eval`], with a missing result as `None`.
    pub fn eval_opt(&self, root: &Document, vars: &Variables) -> MongoResult<Option<Bson>> {
        Ok(match self.eval(root, vars)? {
            Bson::Undefined => None,
            v => Some(v),
        })
    }

    /// Evaluates and applies MongoDB truthiness (for `$expr`, `$cond`, `$filter`...).
    pub fn eval_bool(&self, root: &Document, vars: &Variables) -> MongoResult<bool> {
        Ok(truthy(&self.eval(root, vars)?))
    }
}

#[derive(Debug, Clone)]
enum Node {
    Const(Bson),
    /// Path relative to `$$CURRENT`.
    Field(Vec<String>),
    /// `$$name.path...`
    Var(String, Vec<String>),
    Object(Vec<(String, Expr)>),
    Array(Vec<Expr>),
    Op(Op, Vec<Expr>),
    /// Operators with named arguments; the slots follow `Op::named_params`.
    Named(Op, Vec<Option<Expr>>),
    Cond(Box<(Expr, Expr, Expr)>),
    Switch(Vec<(Expr, Expr)>, Option<Box<Expr>>),
    Let(Vec<(String, Expr)>, Box<Expr>),
    Filter {
        input: Box<Expr>,
        name: String,
        cond: Box<Expr>,
        limit: Option<Box<Expr>>,
    },
    Map {
        input: Box<Expr>,
        name: String,
        body: Box<Expr>,
    },
    Reduce {
        input: Box<Expr>,
        initial: Box<Expr>,
        body: Box<Expr>,
    },
    Regex {
        op: Op,
        input: Box<Expr>,
        regex: RegexArg,
    },
}

#[derive(Debug, Clone)]
enum RegexArg {
    Compiled(Box<Regex>),
    Dynamic(Box<Expr>, Option<Box<Expr>>),
}

fn err(code: ErrorCode, msg: impl Into<String>) -> MongoError {
    MongoError::new(code, msg)
}

const MISSING: Bson = Bson::Undefined;

fn is_nullish(v: &Bson) -> bool {
    matches!(v, Bson::Null | Bson::Undefined)
}

#[cfg(test)]
mod tests {
    use super::convert::fmt_double;
    use super::*;
    use crate::expr::test_support::*;
    use bson::{bson, doc};
    #[test]
    fn truthiness_and_helpers() {
        assert!(!truthy(&Bson::Undefined));
        assert!(!truthy(&dec("0")));
        assert!(truthy(&bson!([])));
        assert!(truthy(&bson!("")));
        assert_eq!(fmt_double(1e21), "1e+21");
        assert_eq!(fmt_double(0.000001), "1e-06");
        assert_eq!(fmt_double(-2.5), "-2.5");
        let e = Expr::parse(&bson!({"$gt": ["$a", 1]})).unwrap();
        assert!(e.eval_bool(&doc! {"a": 2}, &Variables::default()).unwrap());
        assert_eq!(
            Expr::parse(&bson!("$a.b"))
                .unwrap()
                .as_field_path()
                .as_deref(),
            Some("a.b")
        );
        // constant folding keeps literal object/array expressions cheap
        assert!(Expr::parse(&bson!({"x": [1, 2], "y": "lit"}))
            .unwrap()
            .as_constant()
            .is_some());
    }
}
