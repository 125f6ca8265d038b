//! `$regexMatch`, `$regexFind`, `$regexFindAll` and MongoDB regex compilation.

use bson::Bson;
use regex::Regex;

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoResult};

use super::eval::Cx;
use super::ops::Op;
use super::parse::boxed;
use super::{err, is_nullish, Expr, Node, RegexArg};

pub(super) fn parse_regex(op: Op, arg: &Bson) -> MongoResult<Node> {
    let name = op.name();
    let Bson::Document(d) = arg else {
        return Err(err(
            ErrorCode::RegexOperatorNotObject,
            format!(
                "{name} expects an object of named arguments but found: {}",
                type_name(arg)
            ),
        ));
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "input" | "regex" | "options") {
            return Err(err(
                ErrorCode::RegexOperatorUnknownArgument,
                format!("{name} found an unknown argument: {k}"),
            ));
        }
    }
    let input = d.get("input").ok_or_else(|| {
        err(
            ErrorCode::RegexOperatorMissingInput,
            format!("{name} requires 'input' parameter"),
        )
    })?;
    let regex = d.get("regex").ok_or_else(|| {
        err(
            ErrorCode::RegexOperatorMissingRegex,
            format!("{name} requires 'regex' parameter"),
        )
    })?;
    let regex_e = Expr::parse(regex)?;
    let options_e = d.get("options").map(Expr::parse).transpose()?;
    let constant = regex_e.as_constant().is_some()
        && options_e.as_ref().is_none_or(|o| o.as_constant().is_some());
    let regex = if constant {
        match build_regex(
            name,
            regex_e.as_constant().unwrap(),
            options_e.as_ref().and_then(|o| o.as_constant()),
        )? {
            Some(re) => RegexArg::Compiled(Box::new(re)),
            None => RegexArg::Dynamic(boxed(regex_e), options_e.map(boxed)),
        }
    } else {
        RegexArg::Dynamic(boxed(regex_e), options_e.map(boxed))
    };
    Ok(Node::Regex {
        op,
        input: boxed(Expr::parse(input)?),
        regex,
    })
}

/// Compiles a MongoDB regex (pattern string or BSON regex, plus options). `None` when the
/// pattern is null/missing (the operator then yields its null result).
fn build_regex(name: &str, pattern: &Bson, options: Option<&Bson>) -> MongoResult<Option<Regex>> {
    let (pat, mut flags) = match pattern {
        Bson::String(s) => (s.clone(), String::new()),
        Bson::RegularExpression(r) => (r.pattern.clone(), r.options.clone()),
        Bson::Null | Bson::Undefined => return Ok(None),
        other => {
            return Err(err(
                ErrorCode::RegexOperatorRegexInvalidType,
                format!(
                    "{name} needs 'regex' to be of type string or regex, found: {}",
                    type_name(other)
                ),
            ))
        }
    };
    match options {
        None | Some(Bson::Null) | Some(Bson::Undefined) => {}
        Some(Bson::String(o)) => {
            if !flags.is_empty() && !o.is_empty() {
                return Err(err(ErrorCode::RegexOperatorOptionsTwice, format!("{name} found regex option(s) specified in both 'regex' and 'option' fields")));
            }
            flags.push_str(o);
        }
        Some(other) => {
            return Err(err(
                ErrorCode::RegexOperatorOptionsNotString,
                format!(
                    "{name} needs 'options' to be of type string, found: {}",
                    type_name(other)
                ),
            ))
        }
    }
    compile_regex(&pat, &flags).map(Some).map_err(|e| {
        err(
            ErrorCode::RegexOperatorInvalidRegex,
            format!("Invalid Regex in {name}: {e}"),
        )
    })
}

/// Compiles a pattern with MongoDB regex option letters (i, m, s, x, u).
pub fn compile_regex(pattern: &str, options: &str) -> Result<Regex, String> {
    let mut prefix = String::new();
    for c in options.chars() {
        match c {
            'i' | 'm' | 's' | 'x' => prefix.push(c),
            'u' => {}
            other => return Err(format!("invalid flag in regex options: {other}")),
        }
    }
    let full = if prefix.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{prefix}){pattern}")
    };
    Regex::new(&full).map_err(|e| e.to_string())
}

#[inline(never)]
pub(super) fn eval_regex<'e>(
    op: Op,
    input: &'e Expr,
    regex: &'e RegexArg,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let name = op.name();
    let input = input.ev(cx)?;
    let dynamic;
    let re: Option<&Regex> = match regex {
        RegexArg::Compiled(r) => Some(r),
        RegexArg::Dynamic(p, o) => {
            let p = p.ev(cx)?;
            let o = match o {
                Some(o) => Some(o.ev(cx)?),
                None => None,
            };
            dynamic = build_regex(name, &p, o.as_ref())?;
            dynamic.as_ref()
        }
    };
    let s = match &input {
        Bson::String(s) => Some(s.as_str()),
        x if is_nullish(x) => None,
        x => {
            return Err(err(
                ErrorCode::RegexOperatorInputNotString,
                format!(
                    "{name} needs 'input' to be of type string, found: {}",
                    type_name(x)
                ),
            ))
        }
    };
    let (Some(s), Some(re)) = (s, re) else {
        return Ok(match op {
            Op::RegexMatch => Bson::Boolean(false),
            Op::RegexFind => Bson::Null,
            _ => Bson::Array(vec![]),
        });
    };
    let found = |c: regex::Captures| -> Bson {
        let m = c.get(0).unwrap();
        let idx = s[..m.start()].chars().count() as i32;
        let captures: Vec<Bson> = (1..c.len())
            .map(|i| {
                c.get(i)
                    .map_or(Bson::Null, |g| Bson::String(g.as_str().to_string()))
            })
            .collect();
        Bson::Document(bson::doc! {"match": m.as_str(), "idx": idx, "captures": captures})
    };
    Ok(match op {
        Op::RegexMatch => Bson::Boolean(re.is_match(s)),
        Op::RegexFind => re.captures(s).map_or(Bson::Null, found),
        _ => Bson::Array(re.captures_iter(s).map(found).collect()),
    })
}
