//! The evaluator core: the evaluation context [`Cx`], field paths and variables, and
//! dispatch of operators to their families.

use bson::{Bson, Document};

use crate::{ErrorCode, MongoError, MongoResult};

use super::array::{named_first_last_n, named_sort_array, named_zip};
use super::control::{ev_filter, ev_let, ev_map, ev_reduce, ev_switch};
use super::convert::named_convert;
use super::date::{
    date_from_parts, named_date_add, named_date_diff, named_date_from_string, named_date_part,
    named_date_to_parts, named_date_to_string, named_date_trunc,
};
use super::object::{named_get_field, named_set_field};
use super::ops::{Family, Op};
use super::regex::eval_regex;
use super::string::{named_replace, named_trim};
use super::{err, is_nullish, truthy, Expr, Node, Variables, MISSING};

pub(super) struct Cx<'r, 'e> {
    pub(super) root: &'r Document,
    pub(super) vars: &'r Variables,
    /// Variables bound by `$let`, `$map`, `$filter`, `$reduce` (innermost last).
    pub(super) locals: Vec<(&'e str, Bson)>,
}

impl<'r, 'e> Cx<'r, 'e> {
    pub(super) fn local(&self, name: &str) -> Option<&Bson> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    pub(super) fn field(&self, path: &[String]) -> Bson {
        if !self.locals.is_empty() {
            if let Some(cur) = self.local("CURRENT") {
                return get_path(cur, path);
            }
        }
        get_path_doc(self.root, path)
    }

    fn var(&self, name: &str, path: &[String]) -> MongoResult<Bson> {
        if let Some(v) = self.local(name) {
            return Ok(get_path(v, path));
        }
        match name {
            "ROOT" => Ok(if path.is_empty() {
                Bson::Document(self.root.clone())
            } else {
                get_path_doc(self.root, path)
            }),
            "CURRENT" => Ok(if path.is_empty() {
                Bson::Document(self.root.clone())
            } else {
                get_path_doc(self.root, path)
            }),
            "REMOVE" => Ok(MISSING),
            "NOW" => Ok(get_path(&Bson::DateTime(self.vars.now()), path)),
            "CLUSTER_TIME" => {
                let now = self.vars.now().timestamp_millis();
                Ok(Bson::Timestamp(bson::Timestamp {
                    time: (now / 1000) as u32,
                    increment: 1,
                }))
            }
            "DESCEND" | "PRUNE" | "KEEP" => Ok(Bson::String(name.to_string())),
            _ => match self.vars.get(name) {
                Some(v) => Ok(get_path(v, path)),
                None => Err(err(
                    ErrorCode::UndefinedVariable,
                    format!("Use of undefined variable: {name}"),
                )),
            },
        }
    }
}

/// Reads a dotted path from a document the way aggregation field paths do: arrays along
/// the way are traversed and yield arrays of the values found. Missing → `Bson::Undefined`.
pub fn get_path_doc(d: &Document, path: &[String]) -> Bson {
    match path.split_first() {
        None => Bson::Document(d.clone()),
        Some((head, rest)) => match d.get(head) {
            None => MISSING,
            Some(v) => get_path(v, rest),
        },
    }
}

pub(super) fn get_path(v: &Bson, path: &[String]) -> Bson {
    if path.is_empty() {
        return v.clone();
    }
    match v {
        Bson::Document(d) => get_path_doc(d, path),
        Bson::Array(a) => {
            let mut out = Vec::new();
            for e in a {
                if matches!(e, Bson::Document(_) | Bson::Array(_)) {
                    let r = get_path(e, path);
                    if !matches!(r, Bson::Undefined) {
                        out.push(r);
                    }
                }
            }
            Bson::Array(out)
        }
        _ => MISSING,
    }
}

impl Expr {
    pub(super) fn ev<'e>(&'e self, cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
        match &self.0 {
            Node::Const(v) => Ok(v.clone()),
            Node::Field(p) => Ok(cx.field(p)),
            Node::Var(name, p) => cx.var(name, p),
            Node::Object(fields) => ev_object(fields, cx),
            Node::Array(items) => ev_array(items, cx),
            Node::Cond(c) => {
                if truthy(&c.0.ev(cx)?) {
                    c.1.ev(cx)
                } else {
                    c.2.ev(cx)
                }
            }
            Node::Switch(branches, default) => ev_switch(branches, default, cx),
            Node::Let(vars, body) => ev_let(vars, body, cx),
            Node::Filter {
                input,
                name,
                cond,
                limit,
            } => ev_filter(input, name, cond, limit, cx),
            Node::Map { input, name, body } => ev_map(input, name, body, cx),
            Node::Reduce {
                input,
                initial,
                body,
            } => ev_reduce(input, initial, body, cx),
            Node::Regex { op, input, regex } => eval_regex(*op, input, regex, cx),
            Node::Op(op, args) => self.eval_op(*op, args, cx),
            Node::Named(op, slots) => eval_named(*op, slots, cx),
        }
    }

    fn eval_op<'e>(&'e self, op: Op, args: &'e [Expr], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
        // Short-circuiting operators first; they must not evaluate every argument.
        match op {
            Op::And => {
                for a in args {
                    if !truthy(&a.ev(cx)?) {
                        return Ok(Bson::Boolean(false));
                    }
                }
                return Ok(Bson::Boolean(true));
            }
            Op::Or => {
                for a in args {
                    if truthy(&a.ev(cx)?) {
                        return Ok(Bson::Boolean(true));
                    }
                }
                return Ok(Bson::Boolean(false));
            }
            Op::IfNull => {
                let (last, rest) = args.split_last().unwrap();
                for a in rest {
                    let v = a.ev(cx)?;
                    if !is_nullish(&v) {
                        return Ok(v);
                    }
                }
                return last.ev(cx);
            }
            _ => {}
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(a.ev(cx)?);
        }
        eval_simple(op, vals)
    }
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_object<'e>(fields: &'e [(String, Expr)], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    let mut out = Document::new();
    for (k, e) in fields {
        let v = e.ev(cx)?;
        if !matches!(v, Bson::Undefined) {
            out.insert(k.clone(), v);
        }
    }
    Ok(Bson::Document(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_array<'e>(items: &'e [Expr], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    let mut out = Vec::with_capacity(items.len());
    for e in items {
        match e.ev(cx)? {
            Bson::Undefined => out.push(Bson::Null),
            v => out.push(v),
        }
    }
    Ok(Bson::Array(out))
}

/// Evaluates a positional operator on its evaluated arguments, in its family's file.
#[inline(never)]
fn eval_simple(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    match op.family() {
        Family::Arith => super::arith::eval(op, v),
        Family::Compare => super::compare::eval(op, &v),
        Family::String => super::string::eval(op, v),
        Family::Array => super::array::eval(op, v),
        Family::Set => super::set::eval(op, v),
        Family::Convert => super::convert::eval(op, v),
        Family::Object => super::object::eval(op, v),
        Family::Accumulator => super::accumulators::eval(op, v),
        Family::Control | Family::Regex | Family::Date | Family::DatePart => Err(misrouted(op)),
    }
}

/// An operator reached an evaluator that does not handle it (parsing routes every
/// operator to its positional or named form).
#[cold]
#[inline(never)]
pub(super) fn misrouted(op: Op) -> MongoError {
    MongoError::internal(format!("operator {} evaluated positionally", op.name()))
}

// ---------------------------------------------------------------------------------------
// Named-argument operators

fn eval_named<'e>(op: Op, slots: &'e [Option<Expr>], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    // One small function per operator: expressions nest (up to the document depth
    // limit) through here, so this frame and theirs must stay small.
    let a = &mut Args { op, slots, cx };
    match op {
        Op::Trim | Op::LTrim | Op::RTrim => named_trim(a),
        Op::ReplaceOne | Op::ReplaceAll => named_replace(a),
        Op::Zip => named_zip(a),
        Op::SortArray => named_sort_array(a),
        Op::FirstN | Op::LastN | Op::MaxN | Op::MinN => named_first_last_n(a),
        Op::Convert => named_convert(a),
        Op::DateToString => named_date_to_string(a),
        Op::DateFromString => named_date_from_string(a),
        Op::DateToParts => named_date_to_parts(a),
        Op::DateFromParts => date_from_parts(a),
        Op::DateAdd | Op::DateSubtract => named_date_add(a),
        Op::DateDiff => named_date_diff(a),
        Op::DateTrunc => named_date_trunc(a),
        Op::GetField => named_get_field(a),
        Op::SetField | Op::UnsetField => named_set_field(a),
        _ if op.is_date_part() => named_date_part(a),
        _ => Err(MongoError::internal(format!(
            "operator {} has no named form",
            op.name()
        ))),
    }
}

/// A named-argument operator's arguments: its slots (in `Op::named_params` order),
/// evaluated on demand in `cx`.
pub(super) struct Args<'a, 'r, 'e> {
    pub(super) op: Op,
    slots: &'e [Option<Expr>],
    pub(super) cx: &'a mut Cx<'r, 'e>,
}

impl<'e> Args<'_, '_, 'e> {
    /// The operator's canonical name (for error messages).
    pub(super) fn name(&self) -> &'static str {
        self.op.name()
    }

    /// The unevaluated argument in slot `i`, if given.
    pub(super) fn expr(&self, i: usize) -> Option<&'e Expr> {
        self.slots.get(i).and_then(Option::as_ref)
    }

    /// Evaluates an optional argument; absent → None.
    pub(super) fn arg(&mut self, i: usize) -> MongoResult<Option<Bson>> {
        match self.expr(i) {
            Some(e) => Ok(Some(e.ev(self.cx)?)),
            None => Ok(None),
        }
    }

    /// Evaluates a required argument (parsing guarantees it is present).
    pub(super) fn req(&mut self, i: usize) -> MongoResult<Bson> {
        self.arg(i)?
            .ok_or_else(|| MongoError::internal("missing required argument"))
    }

    /// The `onNull` argument in slot `i` (null when not given).
    pub(super) fn on_null(&mut self, i: usize) -> MongoResult<Bson> {
        Ok(self.arg(i)?.unwrap_or(Bson::Null))
    }

    /// The `onError` argument in slot `i` in place of `error`, or `error` when not given.
    pub(super) fn on_error(&mut self, i: usize, error: MongoError) -> MongoResult<Bson> {
        match self.expr(i) {
            Some(_) => self.req(i),
            None => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::{bson, doc, DateTime};
    #[test]
    fn paths_literals_and_variables() {
        check(vec![
            (bson!("$a"), bson!(5)),
            (bson!("$nested.k.v"), bson!(42)),
            (bson!("$docs.x"), bson!([1, 2])),
            (bson!("$docs.y"), bson!(["p", "q"])),
            (bson!("$missing"), Bson::Undefined),
            (bson!("$a.b"), Bson::Undefined),
            (bson!("$$CURRENT.a"), bson!(5)),
            (bson!("$$ROOT.nested.k"), bson!({"v": 42})),
            (bson!("$$REMOVE"), Bson::Undefined),
            (bson!({"$literal": "$a"}), bson!("$a")),
            (bson!(7), bson!(7)),
            (
                bson!({"x": "$a", "y": {"z": "$missing"}, "w": "$$REMOVE"}),
                bson!({"x": 5, "y": {}}),
            ),
            (bson!(["$a", "$missing", 1]), bson!([5, null, 1])),
            (
                bson!({"$let": {"vars": {"x": "$a", "y": 2}, "in": {"$multiply": ["$$x", "$$y"]}}}),
                bson!(10),
            ),
            (
                bson!({"$let": {"vars": {"o": "$nested"}, "in": "$$o.k.v"}}),
                bson!(42),
            ),
        ]);
        let vars = Variables::new()
            .with("who", bson!("me"))
            .with_now(DateTime::from_millis(5));
        let e = Expr::parse(&bson!(["$$who", "$$NOW"])).unwrap();
        assert_eq!(
            e.eval(&doc! {}, &vars).unwrap(),
            bson!(["me", DateTime::from_millis(5)])
        );
        assert_eq!(
            Expr::parse(&bson!("$$ROOT"))
                .unwrap()
                .eval(&doc! {"q": 1}, &vars)
                .unwrap(),
            bson!({"q": 1})
        );
        assert_eq!(
            Expr::parse(&bson!("$missing"))
                .unwrap()
                .eval_opt(&doc! {}, &vars)
                .unwrap(),
            None
        );
        check_err(vec![
            (bson!("$$nope"), 17276),
            (bson!({"$foo": 1}), 168),
            (bson!({"$add": 1, "$sub": 2}), 15983),
            (bson!("$"), 16872),
            (bson!("$a..b"), 15998),
            (bson!({"$let": {"vars": {"Bad": 1}, "in": 1}}), 16867),
            (bson!({"$let": {"in": 1}}), 16876),
        ]);
        let e = ev(bson!({"$foo": 1})).unwrap_err();
        assert_eq!(e.message, "Unrecognized expression '$foo'");
        assert_eq!(e.code_name, "InvalidPipelineOperator");
    }
}
