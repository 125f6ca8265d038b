//! Operators that bind variables or choose what to evaluate: `$cond`, `$switch`, `$let`,
//! `$filter`, `$map` and `$reduce` (parsing and evaluation).

use bson::{Bson, Document};

use crate::{ErrorCode, MongoResult};

use super::arith::as_int_exact;
use super::convert::array_or_null;
use super::eval::Cx;
use super::parse::{args_of, boxed, validate_var_name};
use super::{err, is_nullish, truthy, Expr, Node};

pub(super) fn parse_cond(arg: &Bson) -> MongoResult<Node> {
    match arg {
        Bson::Document(d) => {
            let (mut i, mut t, mut e) = (None, None, None);
            for (k, v) in d {
                match k.as_str() {
                    "if" => i = Some(Expr::parse(v)?),
                    "then" => t = Some(Expr::parse(v)?),
                    "else" => e = Some(Expr::parse(v)?),
                    _ => {
                        return Err(err(
                            ErrorCode::CondUnknownArgument,
                            format!("Unrecognized parameter to $cond: {k}"),
                        ))
                    }
                }
            }
            let i =
                i.ok_or_else(|| err(ErrorCode::CondMissingIf, "Missing 'if' parameter to $cond"))?;
            let t = t.ok_or_else(|| {
                err(
                    ErrorCode::CondMissingThen,
                    "Missing 'then' parameter to $cond",
                )
            })?;
            let e = e.ok_or_else(|| {
                err(
                    ErrorCode::CondMissingElse,
                    "Missing 'else' parameter to $cond",
                )
            })?;
            Ok(Node::Cond(Box::new((i, t, e))))
        }
        _ => {
            let args = args_of(arg)?;
            if args.len() != 3 {
                return Err(err(
                    ErrorCode::ExpressionArgumentCount,
                    format!(
                        "Expression $cond takes exactly 3 arguments. {} were passed in.",
                        args.len()
                    ),
                ));
            }
            let mut it = args.into_iter();
            Ok(Node::Cond(Box::new((
                it.next().unwrap(),
                it.next().unwrap(),
                it.next().unwrap(),
            ))))
        }
    }
}

pub(super) fn parse_switch(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(
            ErrorCode::SwitchNotObject,
            "$switch requires an object as an argument",
        ));
    };
    let mut branches = Vec::new();
    let mut default = None;
    for (k, v) in d {
        match k.as_str() {
            "branches" => {
                let Bson::Array(a) = v else {
                    return Err(err(
                        ErrorCode::SwitchBranchesNotArray,
                        "$switch expected an array for 'branches'",
                    ));
                };
                for b in a {
                    let Bson::Document(bd) = b else {
                        return Err(err(
                            ErrorCode::SwitchBranchNotObject,
                            "$switch expected each branch to be an object",
                        ));
                    };
                    let (mut case, mut then) = (None, None);
                    for (bk, bv) in bd {
                        match bk.as_str() {
                            "case" => case = Some(Expr::parse(bv)?),
                            "then" => then = Some(Expr::parse(bv)?),
                            _ => {
                                return Err(err(
                                    ErrorCode::SwitchBranchUnknownArgument,
                                    format!("$switch found an unknown argument to a branch: {bk}"),
                                ))
                            }
                        }
                    }
                    let case = case.ok_or_else(|| {
                        err(
                            ErrorCode::SwitchBranchMissingCase,
                            "$switch requires each branch have a 'case' expression",
                        )
                    })?;
                    let then = then.ok_or_else(|| {
                        err(
                            ErrorCode::SwitchBranchMissingThen,
                            "$switch requires each branch have a 'then' expression.",
                        )
                    })?;
                    branches.push((case, then));
                }
            }
            "default" => default = Some(boxed(Expr::parse(v)?)),
            _ => {
                return Err(err(
                    ErrorCode::SwitchUnknownArgument,
                    format!("$switch found an unknown argument: {k}"),
                ))
            }
        }
    }
    if branches.is_empty() {
        return Err(err(
            ErrorCode::SwitchNoBranches,
            "$switch requires at least one branch.",
        ));
    }
    Ok(Node::Switch(branches, default))
}

pub(super) fn parse_let(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(
            ErrorCode::LetNotObject,
            "$let only supports an object as its argument",
        ));
    };
    let (mut vars, mut body) = (None, None);
    for (k, v) in d {
        match k.as_str() {
            "vars" => {
                let Bson::Document(vd) = v else {
                    return Err(err(
                        ErrorCode::LetVarsNotObject,
                        "invalid parameter: expected an object (vars)",
                    ));
                };
                let mut out = Vec::new();
                for (name, e) in vd {
                    validate_var_name(name)?;
                    out.push((name.clone(), Expr::parse(e)?));
                }
                vars = Some(out);
            }
            "in" => body = Some(Expr::parse(v)?),
            _ => {
                return Err(err(
                    ErrorCode::LetUnknownArgument,
                    format!("Unrecognized parameter to $let: {k}"),
                ))
            }
        }
    }
    let vars = vars.ok_or_else(|| {
        err(
            ErrorCode::LetMissingVars,
            "Missing 'vars' parameter to $let",
        )
    })?;
    let body =
        body.ok_or_else(|| err(ErrorCode::LetMissingIn, "Missing 'in' parameter to $let"))?;
    Ok(Node::Let(vars, boxed(body)))
}

fn parse_as(v: Option<&Bson>, default: &str) -> MongoResult<String> {
    match v {
        None => Ok(default.to_string()),
        Some(Bson::String(s)) => {
            validate_var_name(s)?;
            Ok(s.clone())
        }
        Some(_) => Err(err(ErrorCode::AsNotString, "'as' must be a string")),
    }
}

pub(super) fn parse_filter(arg: &Bson) -> MongoResult<Node> {
    let d = arg_object(
        arg,
        &["input", "as", "cond", "limit"],
        (
            ErrorCode::FilterNotObject,
            "$filter only supports an object as its argument",
        ),
        (
            ErrorCode::FilterUnknownArgument,
            "Unrecognized parameter to $filter: ",
        ),
    )?;
    let input = required(
        d,
        "input",
        ErrorCode::FilterMissingInput,
        "Missing 'input' parameter to $filter",
    )?;
    let cond = required(
        d,
        "cond",
        ErrorCode::FilterMissingCond,
        "Missing 'cond' parameter to $filter",
    )?;
    Ok(Node::Filter {
        input: boxed(Expr::parse(input)?),
        name: parse_as(d.get("as"), "this")?,
        cond: boxed(Expr::parse(cond)?),
        limit: d.get("limit").map(Expr::parse).transpose()?.map(boxed),
    })
}

pub(super) fn parse_map(arg: &Bson) -> MongoResult<Node> {
    let d = arg_object(
        arg,
        &["input", "as", "in"],
        (
            ErrorCode::MapNotObject,
            "$map only supports an object as its argument",
        ),
        (
            ErrorCode::MapUnknownArgument,
            "Unrecognized parameter to $map: ",
        ),
    )?;
    let input = required(
        d,
        "input",
        ErrorCode::MapMissingInput,
        "Missing 'input' parameter to $map",
    )?;
    let body = required(
        d,
        "in",
        ErrorCode::MapMissingIn,
        "Missing 'in' parameter to $map",
    )?;
    Ok(Node::Map {
        input: boxed(Expr::parse(input)?),
        name: parse_as(d.get("as"), "this")?,
        body: boxed(Expr::parse(body)?),
    })
}

pub(super) fn parse_reduce(arg: &Bson) -> MongoResult<Node> {
    let d = arg_object(
        arg,
        &["input", "initialValue", "in"],
        (
            ErrorCode::ReduceNotObject,
            "$reduce requires an object as an argument",
        ),
        (
            ErrorCode::ReduceUnknownArgument,
            "$reduce found an unknown argument: ",
        ),
    )?;
    let input = required(
        d,
        "input",
        ErrorCode::ReduceMissingInput,
        "$reduce requires 'input' to be specified",
    )?;
    let initial = required(
        d,
        "initialValue",
        ErrorCode::ReduceMissingInitialValue,
        "$reduce requires 'initialValue' to be specified",
    )?;
    let body = required(
        d,
        "in",
        ErrorCode::ReduceMissingIn,
        "$reduce requires 'in' to be specified",
    )?;
    Ok(Node::Reduce {
        input: boxed(Expr::parse(input)?),
        initial: boxed(Expr::parse(initial)?),
        body: boxed(Expr::parse(body)?),
    })
}

/// The argument object of `$filter`, `$map` or `$reduce`: the error `not_object` (code,
/// message) unless `arg` is a document, `unknown` (code, message before the key) for its
/// first key not in `known`.
fn arg_object<'a>(
    arg: &'a Bson,
    known: &[&str],
    not_object: (ErrorCode, &str),
    unknown: (ErrorCode, &str),
) -> MongoResult<&'a Document> {
    let Bson::Document(d) = arg else {
        return Err(err(not_object.0, not_object.1));
    };
    match d.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(err(unknown.0, format!("{}{k}", unknown.1))),
        None => Ok(d),
    }
}

/// The value of `key` in an argument object, or the error (`code`, `msg`) when it is absent.
fn required<'a>(d: &'a Document, key: &str, code: ErrorCode, msg: &str) -> MongoResult<&'a Bson> {
    d.get(key).ok_or_else(|| err(code, msg))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
pub(super) fn ev_switch<'e>(
    branches: &'e [(Expr, Expr)],
    default: &'e Option<Box<Expr>>,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    for (case, then) in branches {
        if truthy(&case.ev(cx)?) {
            return then.ev(cx);
        }
    }
    match default {
        Some(d) => d.ev(cx),
        None => Err(err(
            ErrorCode::SwitchNoMatchingBranch,
            "$switch could not find a matching branch for an input, and no default was specified.",
        )),
    }
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
pub(super) fn ev_let<'e>(
    vars: &'e [(String, Expr)],
    body: &'e Expr,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let mut vals = Vec::with_capacity(vars.len());
    for (n, e) in vars {
        vals.push((n.as_str(), e.ev(cx)?));
    }
    let depth = cx.locals.len();
    cx.locals.extend(vals);
    let r = body.ev(cx);
    cx.locals.truncate(depth);
    r
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
pub(super) fn ev_filter<'e>(
    input: &'e Expr,
    name: &'e str,
    cond: &'e Expr,
    limit: &'e Option<Box<Expr>>,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let input = input.ev(cx)?;
    let limit = match limit {
        None => None,
        Some(l) => match l.ev(cx)? {
            v if is_nullish(&v) => None,
            v => match as_int_exact(&v) {
                Some(n) if n >= 1 && n <= i32::MAX as i64 => Some(n as usize),
                Some(_) => {
                    return Err(err(
                        ErrorCode::FilterLimitNotPositive,
                        "$filter: limit must be greater than 0",
                    ))
                }
                None => {
                    return Err(err(
                        ErrorCode::FilterLimitNotInt32,
                        format!(
                            "$filter: limit must be represented as a 32-bit integral value: {v}"
                        ),
                    ))
                }
            },
        },
    };
    let Some(items) = array_or_null(
        input,
        ErrorCode::FilterInputNotArray,
        "input to $filter must be an array not ",
    )?
    else {
        return Ok(Bson::Null);
    };
    let mut out = Vec::new();
    let depth = cx.locals.len();
    for item in items {
        cx.locals.push((name, item));
        let keep = cond.ev(cx).map(|v| truthy(&v));
        let item = cx.locals.pop().unwrap().1;
        if keep? {
            out.push(item);
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
        }
    }
    cx.locals.truncate(depth);
    Ok(Bson::Array(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
pub(super) fn ev_map<'e>(
    input: &'e Expr,
    name: &'e str,
    body: &'e Expr,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let msg = "input to $map must be an array not ";
    let Some(items) = array_or_null(input.ev(cx)?, ErrorCode::MapInputNotArray, msg)? else {
        return Ok(Bson::Null);
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        cx.locals.push((name, item));
        let r = body.ev(cx);
        cx.locals.pop();
        out.push(match r? {
            Bson::Undefined => Bson::Null,
            v => v,
        });
    }
    Ok(Bson::Array(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
pub(super) fn ev_reduce<'e>(
    input: &'e Expr,
    initial: &'e Expr,
    body: &'e Expr,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let msg = "$reduce requires that 'input' be an array, found: ";
    let Some(items) = array_or_null(input.ev(cx)?, ErrorCode::ReduceInputNotArray, msg)? else {
        return Ok(Bson::Null);
    };
    let mut acc = initial.ev(cx)?;
    for item in items {
        cx.locals.push(("value", acc));
        cx.locals.push(("this", item));
        let r = body.ev(cx);
        cx.locals.pop();
        cx.locals.pop();
        acc = r?;
        // The accumulator feeds back into the body: without a bound,
        // `in: ["$$value"]` nests one level per element, past any stack.
        crate::depth::check_value_depth(&acc)?;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use crate::expr::test_support::*;

    #[test]
    fn conditionals() {
        check(vec![
            (bson!({"$cond": [true, 1, 2]}), bson!(1)),
            (
                bson!({"$cond": {"if": {"$gt": ["$a", 10]}, "then": "big", "else": "small"}}),
                bson!("small"),
            ),
            (
                bson!({"$ifNull": ["$missing", "$n", "dflt"]}),
                bson!("dflt"),
            ),
            (bson!({"$ifNull": ["$a", 0]}), bson!(5)),
            (
                bson!({"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": "one"}, {"case": {"$eq": ["$a", 5]}, "then": "five"}], "default": "?"}}),
                bson!("five"),
            ),
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}], "default": 2}}),
                bson!(2),
            ),
            // the branch not taken is never evaluated
            (bson!({"$cond": [false, {"$divide": [1, 0]}, 3]}), bson!(3)),
        ]);
        check_err(vec![
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}]}}),
                40066,
            ),
            (bson!({"$switch": {"branches": []}}), 40068),
            (bson!({"$cond": {"then": 1, "else": 2}}), 17080),
            (bson!({"$cond": [1, 2]}), 16020),
        ]);
    }
}
