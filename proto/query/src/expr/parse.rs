//! Parsing a BSON expression specification into the [`Node`] tree.

use bson::{Bson, Document};

use crate::{ErrorCode, MongoError, MongoResult};

use super::array::validate_sort_by;
use super::control::{parse_cond, parse_filter, parse_let, parse_map, parse_reduce, parse_switch};
use super::ops::Op;
use super::regex::parse_regex;
use super::{err, Expr, Node};

pub(super) fn parse_node(spec: &Bson) -> MongoResult<Node> {
    match spec {
        Bson::String(s) if s.starts_with('$') => parse_path_string(s),
        Bson::Document(d) => parse_doc(d),
        Bson::Array(a) => {
            let items = a.iter().map(Expr::parse).collect::<MongoResult<Vec<_>>>()?;
            if items.iter().all(|e| matches!(e.0, Node::Const(_))) {
                let vals = items
                    .into_iter()
                    .map(|e| match e.0 {
                        Node::Const(Bson::Undefined) => Bson::Null,
                        Node::Const(v) => v,
                        _ => unreachable!(),
                    })
                    .collect();
                return Ok(Node::Const(Bson::Array(vals)));
            }
            Ok(Node::Array(items))
        }
        other => Ok(Node::Const(other.clone())),
    }
}

fn parse_path_string(s: &str) -> MongoResult<Node> {
    crate::depth::check_path(s)?;
    if let Some(var) = s.strip_prefix("$$") {
        let mut parts = var.split('.');
        let name = parts.next().unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(err(ErrorCode::VariableNameEmpty, "empty variable name"));
        }
        let path: Vec<String> = parts.map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(err(
                ErrorCode::FieldPathEmptyComponent,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if !is_system_var(&name) {
            validate_var_name(&name)?;
        }
        if name == "CURRENT" && path.is_empty() {
            return Ok(Node::Var(name, path));
        }
        if name == "CURRENT" {
            return Ok(Node::Field(path));
        }
        return Ok(Node::Var(name, path));
    }
    let path = &s[1..];
    if path.is_empty() {
        return Err(err(
            ErrorCode::FieldPathDollarOnly,
            "'$' by itself is not a valid FieldPath",
        ));
    }
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(err(
            ErrorCode::FieldPathEmptyComponent,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if parts.iter().any(|p| p.starts_with('$')) {
        return Err(err(
            ErrorCode::FieldPathDollarPrefix,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    Ok(Node::Field(parts))
}

fn is_system_var(name: &str) -> bool {
    matches!(
        name,
        "ROOT"
            | "CURRENT"
            | "REMOVE"
            | "NOW"
            | "CLUSTER_TIME"
            | "DESCEND"
            | "PRUNE"
            | "KEEP"
            | "SEARCH_META"
            | "USER_ROLES"
    )
}

pub(super) fn validate_var_name(name: &str) -> MongoResult<()> {
    let first = name.chars().next();
    let ok_first = matches!(first, Some(c) if c.is_ascii_lowercase() || !c.is_ascii());
    if !ok_first {
        return Err(err(
            ErrorCode::VariableNameInvalidStart,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    if name
        .chars()
        .any(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(err(
            ErrorCode::VariableNameInvalidCharacter,
            format!("'{name}' contains an invalid character for a variable name"),
        ));
    }
    Ok(())
}

pub(super) fn parse_doc(d: &Document) -> MongoResult<Node> {
    if let Some((first, _)) = d.iter().next() {
        if first.starts_with('$') {
            if d.len() != 1 {
                return Err(doc_error(ErrorCode::ExpressionNotOneField, d, ""));
            }
            if let Some((name, arg)) = d.iter().next() {
                return parse_operator(name, arg);
            }
        }
    }
    let mut fields = Vec::with_capacity(d.len());
    for (k, v) in d {
        if k.starts_with('$') {
            return Err(doc_error(ErrorCode::ExpressionObjectDollarField, d, k));
        }
        if k.contains('.') {
            return Err(doc_error(ErrorCode::ExpressionObjectDottedField, d, k));
        }
        fields.push((k.clone(), Expr::parse(v)?));
    }
    if fields
        .iter()
        .all(|(_, e)| matches!(&e.0, Node::Const(v) if !matches!(v, Bson::Undefined)))
    {
        let mut out = Document::new();
        for (k, e) in fields {
            if let Node::Const(v) = e.0 {
                out.insert(k, v);
            }
        }
        return Ok(Node::Const(Bson::Document(out)));
    }
    Ok(Node::Object(fields))
}

#[cold]
#[inline(never)]
fn doc_error(code: ErrorCode, d: &Document, k: &str) -> MongoError {
    match code {
        ErrorCode::ExpressionNotOneField => err(
            code,
            format!(
                "an expression specification must contain exactly one field, the name of the expression. Found {} fields in {}",
                d.len(),
                d
            ),
        ),
        ErrorCode::ExpressionObjectDollarField => err(
            code,
            format!("FieldPath field names may not start with '$'. Found '{k}'"),
        ),
        _ => err(
            code,
            format!("FieldPath field names may not contain '.'. Found '{k}'"),
        ),
    }
}

pub(super) fn args_of(arg: &Bson) -> MongoResult<Vec<Expr>> {
    match arg {
        Bson::Array(a) => a.iter().map(Expr::parse).collect(),
        other => Ok(vec![Expr::parse(other)?]),
    }
}

pub(super) fn boxed(e: Expr) -> Box<Expr> {
    Box::new(e)
}

// Parsing recurses once per level of expression nesting (up to the document depth
// limit), through `parse_node`, `parse_doc` and `parse_operator`: their frames are kept
// small by building error messages in cold functions and splitting the named and
// positional argument forms out.
fn parse_operator(name: &str, arg: &Bson) -> MongoResult<Node> {
    match name {
        "$literal" => return Ok(Node::Const(arg.clone())),
        "$cond" => return parse_cond(arg),
        "$switch" => return parse_switch(arg),
        "$let" => return parse_let(arg),
        "$filter" => return parse_filter(arg),
        "$map" => return parse_map(arg),
        "$reduce" => return parse_reduce(arg),
        "$expr" => return parse_node(arg),
        _ => {}
    }
    let Some(op) = Op::from_name(name) else {
        return Err(unknown_expression(name));
    };
    match op {
        Op::RegexMatch | Op::RegexFind | Op::RegexFindAll => return parse_regex(op, arg),
        Op::GetField => {
            if let Bson::String(s) = arg {
                if !s.starts_with('$') {
                    return Ok(Node::Named(
                        op,
                        vec![Some(Expr::constant(arg.clone())), None],
                    ));
                }
            }
        }
        _ => {}
    }
    let (all, _) = op.named_params();
    let named_form = match arg {
        Bson::Document(d) => {
            !all.is_empty()
                && (op.arity().is_none() || d.keys().next().is_some_and(|k| !k.starts_with('$')))
        }
        _ => false,
    };
    if named_form || (op.arity().is_none() && !all.is_empty()) {
        parse_named(op, arg)
    } else {
        parse_positional(op, arg)
    }
}

#[cold]
#[inline(never)]
fn unknown_expression(name: &str) -> MongoError {
    MongoError::new(
        ErrorCode::InvalidPipelineOperator,
        format!("Unrecognized expression '{name}'"),
    )
}

#[cold]
#[inline(never)]
fn named_arg_error(code: ErrorCode, op: Op, what: &str) -> MongoError {
    err(code, format!("{} {what}", op.name()))
}

#[inline(never)]
fn parse_named(op: Op, arg: &Bson) -> MongoResult<Node> {
    let (all, required) = op.named_params();
    let (not_object, unknown, missing) = op.named_arg_codes();
    let Bson::Document(d) = arg else {
        return Err(named_arg_error(
            not_object,
            op,
            "only supports an object as its argument",
        ));
    };
    let mut slots: Vec<Option<Expr>> = vec![None; all.len()];
    for (k, v) in d {
        let Some(i) = all.iter().position(|p| p == k) else {
            return Err(named_arg_error(
                unknown,
                op,
                &format!("found an unknown argument: {k}"),
            ));
        };
        slots[i] = Some(match (op, k.as_str()) {
            (Op::SortArray, "sortBy") => Expr::constant(v.clone()),
            _ => Expr::parse(v)?,
        });
    }
    for (i, p) in all.iter().enumerate() {
        if required.contains(p) && slots[i].is_none() {
            return Err(named_arg_error(
                missing,
                op,
                &format!("requires '{p}' to be specified"),
            ));
        }
    }
    if op == Op::SortArray {
        let spec = slots
            .get(1)
            .and_then(Option::as_ref)
            .and_then(Expr::as_constant)
            .cloned()
            .unwrap_or(Bson::Null);
        validate_sort_by(&spec)?;
    }
    Ok(Node::Named(op, slots))
}

#[cold]
#[inline(never)]
fn arity_error(op: Op, min: usize, max: usize, n: usize) -> MongoError {
    let msg = if min == max {
        format!(
            "Expression {} takes exactly {} arguments. {} were passed in.",
            op.name(),
            min,
            n
        )
    } else if max == usize::MAX {
        format!(
            "Expression {} takes at least {} arguments, and {} were passed in.",
            op.name(),
            min,
            n
        )
    } else {
        format!(
            "Expression {} takes at least {} arguments, and at most {}, but {} were passed in.",
            op.name(),
            min,
            max,
            n
        )
    };
    err(ErrorCode::ExpressionArgumentCount, msg)
}

#[inline(never)]
fn parse_positional(op: Op, arg: &Bson) -> MongoResult<Node> {
    // `{$rand: {}}` is MongoDB's documented spelling of a zero-argument call.
    let args = match (op, arg) {
        (Op::Rand, Bson::Document(d)) if d.is_empty() => Vec::new(),
        _ => args_of(arg)?,
    };
    let (min, max) = op.arity().unwrap_or((1, 1));
    if args.len() < min || args.len() > max {
        return Err(arity_error(op, min, max, args.len()));
    }
    if op.is_date_part() {
        // `{$year: "$d"}` and `{$year: ["$d"]}` both mean {date: ...}.
        let mut it = args.into_iter();
        return Ok(Node::Named(op, vec![it.next(), None]));
    }
    Ok(Node::Op(op, args))
}
