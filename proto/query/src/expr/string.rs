//! String operators (the regex ones are in `regex.rs`).

use bson::Bson;

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoResult};

use super::arith::{as_int_exact, num_f64, num_of, num_to_bson, Num};
use super::array::index_range;
use super::calendar::format_date;
use super::convert::{fmt_double, type_name_or_missing, typed_or_null};
use super::eval::{misrouted, Args};
use super::ops::Op;
use super::{err, is_nullish};

/// Evaluates a positional string operator on its evaluated arguments.
pub(super) fn eval(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    let name = op.name();
    match op {
        Concat => {
            let total = v.iter().try_fold(0usize, |n, x| match x {
                Bson::String(p) => n.checked_add(p.len()),
                _ => Some(n),
            });
            check_string_size(total)?;
            let mut s = String::new();
            for x in &v {
                match x {
                    Bson::String(p) => s.push_str(p),
                    x if is_nullish(x) => return Ok(Bson::Null),
                    x => {
                        return Err(err(
                            ErrorCode::ConcatNotString,
                            format!("$concat only supports strings, not {}", type_name(x)),
                        ))
                    }
                }
            }
            Ok(Bson::String(s))
        }
        SubstrBytes | SubstrCP => substr(op, &v[0], &v[1], &v[2]),
        ToLower | ToUpper => {
            let s = coerce_to_string(name, &v[0])?;
            Ok(Bson::String(if op == ToLower {
                s.to_ascii_lowercase()
            } else {
                s.to_ascii_uppercase()
            }))
        }
        StrLenBytes | StrLenCP => match &v[0] {
            Bson::String(s) => Ok(Bson::Int32(if op == StrLenBytes {
                s.len()
            } else {
                s.chars().count()
            } as i32)),
            x => Err(err(
                if op == StrLenBytes {
                    ErrorCode::StrLenBytesNotString
                } else {
                    ErrorCode::StrLenCPNotString
                },
                format!(
                    "{name} requires a string argument, found: {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        Split => {
            let what = "$split requires an expression that evaluates to a string as a";
            let first = format_args!("{what} first argument, found: ");
            let Some(s) =
                typed_or_null(&v[0], Bson::as_str, ErrorCode::SplitInputNotString, first)?
            else {
                return Ok(Bson::Null);
            };
            let second = format_args!("{what} second argument, found: ");
            let Some(sep) = typed_or_null(
                &v[1],
                Bson::as_str,
                ErrorCode::SplitSeparatorNotString,
                second,
            )?
            else {
                return Ok(Bson::Null);
            };
            if sep.is_empty() {
                return Err(err(
                    ErrorCode::SplitSeparatorEmpty,
                    "$split requires a non-empty separator",
                ));
            }
            Ok(Bson::Array(
                s.split(sep).map(|p| Bson::String(p.to_string())).collect(),
            ))
        }
        IndexOfBytes | IndexOfCP => index_of_str(op, &v),
        Strcasecmp => {
            let a = coerce_to_string(name, &v[0])?.to_ascii_lowercase();
            let b = coerce_to_string(name, &v[1])?.to_ascii_lowercase();
            Ok(Bson::Int32(a.cmp(&b) as i32))
        }
        _ => Err(misrouted(op)),
    }
}

pub(super) fn coerce_to_string(name: &str, v: &Bson) -> MongoResult<String> {
    Ok(match v {
        Bson::String(s) | Bson::Symbol(s) => s.clone(),
        Bson::Null | Bson::Undefined => String::new(),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(d) => fmt_double(*d),
        Bson::Decimal128(d) => d.to_string(),
        Bson::DateTime(d) => format_date("%Y-%m-%dT%H:%M:%S.%LZ", d.timestamp_millis(), 0)?,
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        other => {
            return Err(err(
                ErrorCode::StringConversionFailed,
                format!(
                    "can't convert from BSON type {} to String in {name}",
                    type_name(other)
                ),
            ))
        }
    })
}

pub(super) fn substr(op: Op, s: &Bson, start: &Bson, len: &Bson) -> MongoResult<Bson> {
    let name = op.name();
    let s = coerce_to_string(name, s)?;
    if op == Op::SubstrBytes {
        let st = substr_num(
            name,
            "starting index",
            start,
            ErrorCode::SubstrBytesStartNotNumeric,
        )?;
        let ln = substr_num(name, "length", len, ErrorCode::SubstrBytesLengthNotNumeric)?;
        let st = num_f64(st);
        if st < 0.0 {
            return Err(err(
                ErrorCode::SubstrBytesStartNegative,
                format!("{name}: starting index must be non-negative (got: {st})"),
            ));
        }
        let st = st as usize;
        let ln = num_f64(ln);
        if st >= s.len() {
            return Ok(Bson::String(String::new()));
        }
        let end = if ln < 0.0 {
            s.len()
        } else {
            st.saturating_add(ln as usize).min(s.len())
        };
        if !s.is_char_boundary(st) {
            return Err(err(
                ErrorCode::SubstrBytesStartMidCharacter,
                format!("{name}:  Invalid range, starting index is a UTF-8 continuation byte."),
            ));
        }
        if !s.is_char_boundary(end) {
            return Err(err(
                ErrorCode::SubstrBytesEndMidCharacter,
                format!(
                    "{name}:  Invalid range, ending index is in the middle of a UTF-8 character."
                ),
            ));
        }
        return Ok(Bson::String(s[st..end].to_string()));
    }
    let st = substr_int(
        name,
        "starting index",
        start,
        (
            ErrorCode::SubstrCPStartNotNumeric,
            ErrorCode::SubstrCPStartNotInt32,
        ),
    )?;
    let ln = substr_int(
        name,
        "length",
        len,
        (
            ErrorCode::SubstrCPLengthNotNumeric,
            ErrorCode::SubstrCPLengthNotInt32,
        ),
    )?;
    if st < 0 {
        return Err(err(
            ErrorCode::SubstrCPStartNegative,
            format!("{name}: the starting index must be nonnegative integer."),
        ));
    }
    if ln < 0 {
        return Err(err(
            ErrorCode::SubstrCPLengthNegative,
            format!("{name}: length must be a nonnegative integer."),
        ));
    }
    Ok(Bson::String(
        s.chars().skip(st as usize).take(ln as usize).collect(),
    ))
}

/// A `$substrBytes`/`$substrCP` index argument (`what`: "starting index" or "length") as a
/// number, else error `code`.
fn substr_num(name: &str, what: &str, v: &Bson, code: ErrorCode) -> MongoResult<Num> {
    num_of(v).ok_or_else(|| {
        err(
            code,
            format!(
                "{name}: {what} must be a numeric type (is BSON type {})",
                type_name(v)
            ),
        )
    })
}

/// A `$substrCP` index argument as a 32-bit integer; `codes`: (not a number, not one).
fn substr_int(name: &str, what: &str, v: &Bson, codes: (ErrorCode, ErrorCode)) -> MongoResult<i64> {
    let n = substr_num(name, what, v, codes.0)?;
    as_int_exact(v)
        .filter(|i| i32::try_from(*i).is_ok())
        .ok_or_else(|| {
            err(
                codes.1,
                format!(
                    "{name}: {what} cannot be represented as a 32-bit integral value: {}",
                    num_to_bson(n)
                ),
            )
        })
}

fn index_of_str(op: Op, v: &[Bson]) -> MongoResult<Bson> {
    let name = op.name();
    let first = format_args!("{name} requires a string as the first argument, found: ");
    let Some(s) = typed_or_null(
        &v[0],
        Bson::as_str,
        ErrorCode::IndexOfStringNotString,
        first,
    )?
    else {
        return Ok(Bson::Null);
    };
    let sub = match &v[1] {
        Bson::String(s) => s,
        x => {
            return Err(err(
                ErrorCode::IndexOfSubstringNotString,
                format!(
                    "{name} requires a string as the second argument, found: {}",
                    type_name_or_missing(x)
                ),
            ))
        }
    };
    if op == Op::IndexOfBytes {
        let (start, end) = index_range(name, v, s.len())?;
        return Ok(find_in(s.as_bytes(), sub.as_bytes(), start, end));
    }
    let hay: Vec<char> = s.chars().collect();
    let needle: Vec<char> = sub.chars().collect();
    let (start, end) = index_range(name, v, hay.len())?;
    Ok(find_in(&hay, &needle, start, end))
}

/// Where `needle` first stands in `hay[start..end]` (`start` for an empty needle), or -1.
fn find_in<T: PartialEq>(hay: &[T], needle: &[T], start: usize, end: usize) -> Bson {
    if start > end {
        return Bson::Int32(-1);
    }
    if needle.is_empty() {
        return Bson::Int32(start as i32);
    }
    let pos = hay[start..end]
        .windows(needle.len())
        .position(|w| w == needle);
    Bson::Int32(pos.map_or(-1, |p| (p + start) as i32))
}

const WHITESPACE: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{b}', '\u{c}', '\r', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}',
    '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}',
    '\u{200a}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
];

/// mongod's `BufferMaxSize`: a string an expression builds may not exceed it.
const MAX_STRING_BYTES: usize = 64 * 1024 * 1024;

/// mongod's BufBuilder error (13548) for a string that would outgrow [`MAX_STRING_BYTES`].
fn check_string_size(len: Option<usize>) -> MongoResult<()> {
    match len {
        Some(n) if n <= MAX_STRING_BYTES => Ok(()),
        n => Err(err(
            ErrorCode::BufBuilderTooLarge,
            format!(
                "BufBuilder attempted to grow() to {} bytes, past the 64MB limit.",
                n.map_or_else(
                    || "more than 18446744073709551615".to_string(),
                    |n| n.to_string()
                )
            ),
        )),
    }
}

#[inline(never)]
pub(super) fn named_trim(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let input = a.req(0)?;
    let chars = a.arg(1)?;
    let s = match &input {
        Bson::String(s) => s,
        x if is_nullish(x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                ErrorCode::TrimInputNotString,
                format!(
                    "{name} requires its input to be a string, got {x} (of type {}) instead.",
                    type_name(x)
                ),
            ))
        }
    };
    let set: Vec<char> = match &chars {
        None => WHITESPACE.to_vec(),
        Some(x) if is_nullish(x) => return Ok(Bson::Null),
        Some(Bson::String(c)) => c.chars().collect(),
        Some(x) => {
            return Err(err(
                ErrorCode::TrimCharsNotString,
                format!(
                    "{name} requires 'chars' to be a string, got {x} (of type {}) instead.",
                    type_name(x)
                ),
            ))
        }
    };
    let pred = |c: char| set.contains(&c);
    Ok(Bson::String(
        match a.op {
            Op::Trim => s.trim_matches(pred),
            Op::LTrim => s.trim_start_matches(pred),
            _ => s.trim_end_matches(pred),
        }
        .to_string(),
    ))
}

#[inline(never)]
pub(super) fn named_replace(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let vals = [a.req(0)?, a.req(1)?, a.req(2)?];
    let names = ["input", "find", "replacement"];
    let codes = [
        ErrorCode::ReplaceInputNotString,
        ErrorCode::ReplaceFindNotString,
        ErrorCode::ReplaceReplacementNotString,
    ];
    let mut strs: Vec<&str> = Vec::new();
    let mut null = false;
    for i in 0..3 {
        match &vals[i] {
            Bson::String(s) => strs.push(s),
            x if is_nullish(x) => {
                null = true;
                strs.push("");
            }
            x => {
                return Err(err(
                    codes[i],
                    format!(
                        "{name} requires that '{}' be a string, found: {}",
                        names[i],
                        type_name(x)
                    ),
                ))
            }
        }
    }
    if null {
        return Ok(Bson::Null);
    }
    // The result's size, before building it: a short 'find' with a long
    // 'replacement' multiplies the input.
    let (input, find, repl) = (strs[0], strs[1], strs[2]);
    let matches = if a.op == Op::ReplaceOne {
        usize::from(find.is_empty() || input.contains(find))
    } else if find.is_empty() {
        input.chars().count() + 1
    } else {
        input.matches(find).count()
    };
    check_string_size(
        matches
            .checked_mul(repl.len())
            .and_then(|n| n.checked_add(input.len())),
    )?;
    Ok(Bson::String(if a.op == Op::ReplaceOne {
        strs[0].replacen(strs[1], strs[2], 1)
    } else if strs[1].is_empty() {
        // Like MongoDB: an empty 'find' matches between every character.
        let mut out = String::from(strs[2]);
        for c in strs[0].chars() {
            out.push(c);
            out.push_str(strs[2]);
        }
        out
    } else {
        strs[0].replace(strs[1], strs[2])
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn strings() {
        check(vec![
            (bson!({"$concat": ["a", "-", "$s"]}), bson!("a-Hello World")),
            (bson!({"$concat": ["a", "$missing"]}), Bson::Null),
            (bson!({"$substr": ["$s", 0, 5]}), bson!("Hello")),
            (bson!({"$substrBytes": ["$s", 6, -1]}), bson!("World")),
            (bson!({"$substrCP": ["héllo", 1, 3]}), bson!("éll")),
            (bson!({"$toLower": "$s"}), bson!("hello world")),
            (bson!({"$toUpper": "$s"}), bson!("HELLO WORLD")),
            (bson!({"$toUpper": "$missing"}), bson!("")),
            (bson!({"$toLower": 12}), bson!("12")),
            (bson!({"$strLenBytes": "héllo"}), bson!(6)),
            (bson!({"$strLenCP": "héllo"}), bson!(5)),
            (
                bson!({"$split": ["a,b,,c", ","]}),
                bson!(["a", "b", "", "c"]),
            ),
            (bson!({"$split": [null, ","]}), Bson::Null),
            (bson!({"$trim": {"input": "  x y  "}}), bson!("x y")),
            (
                bson!({"$ltrim": {"input": "xxaxx", "chars": "x"}}),
                bson!("axx"),
            ),
            (
                bson!({"$rtrim": {"input": "xxaxx", "chars": "x"}}),
                bson!("xxa"),
            ),
            (bson!({"$indexOfBytes": ["$s", "o"]}), bson!(4)),
            (bson!({"$indexOfBytes": ["$s", "o", 5]}), bson!(7)),
            (bson!({"$indexOfBytes": ["$s", "z"]}), bson!(-1)),
            (bson!({"$indexOfCP": ["héllo", "l"]}), bson!(2)),
            (bson!({"$indexOfCP": [null, "l"]}), Bson::Null),
            (
                bson!({"$regexMatch": {"input": "$s", "regex": "^hello", "options": "i"}}),
                bson!(true),
            ),
            (
                bson!({"$regexMatch": {"input": "$s", "regex": Bson::RegularExpression(bson::Regex { pattern: "world$".into(), options: "".into() })}}),
                bson!(false),
            ),
            (
                bson!({"$regexMatch": {"input": "$missing", "regex": "a"}}),
                bson!(false),
            ),
            (
                bson!({"$regexFind": {"input": "héllo 42 and 7", "regex": "(\\d)(\\d)?"}}),
                bson!({"match": "42", "idx": 6, "captures": ["4", "2"]}),
            ),
            (
                bson!({"$regexFind": {"input": "abc", "regex": "z"}}),
                Bson::Null,
            ),
            (
                bson!({"$regexFindAll": {"input": "a1b2", "regex": "[0-9]"}}),
                bson!([{"match": "1", "idx": 1, "captures": []}, {"match": "2", "idx": 3, "captures": []}]),
            ),
            (
                bson!({"$replaceOne": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
                bson!("a-bXc"),
            ),
            (
                bson!({"$replaceAll": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
                bson!("a-b-c"),
            ),
            (
                bson!({"$replaceAll": {"input": "$n", "find": "X", "replacement": "-"}}),
                Bson::Null,
            ),
            (bson!({"$strcasecmp": ["abc", "ABC"]}), bson!(0)),
            (bson!({"$strcasecmp": ["abd", "ABC"]}), bson!(1)),
        ]);
        check_err(vec![
            (bson!({"$concat": ["a", 1]}), 16702),
            (bson!({"$strLenBytes": 1}), 34473),
            (bson!({"$strLenCP": "$missing"}), 34471),
            (bson!({"$split": ["a", ""]}), 40087),
            (bson!({"$split": [1, ","]}), 40085),
            (bson!({"$trim": {"input": 1}}), 50699),
            (bson!({"$trim": {"chars": "x"}}), 50695),
            (bson!({"$trim": {"input": "x", "bad": 1}}), 50694),
            (bson!({"$indexOfBytes": [1, "a"]}), 40091),
            (bson!({"$indexOfBytes": ["a", "a", -1]}), 40097),
            (bson!({"$regexMatch": {"input": 1, "regex": "a"}}), 51104),
            (bson!({"$regexMatch": {"input": "a", "regex": 1}}), 51105),
            (bson!({"$regexMatch": {"input": "a", "regex": "("}}), 51111),
            (
                bson!({"$replaceOne": {"input": 1, "find": "a", "replacement": "b"}}),
                51746,
            ),
            (bson!({"$substrBytes": ["héllo", 2, 1]}), 28656),
            (bson!({"$toUpper": [[1]]}), 16007),
        ]);
    }
}
