//! Array operators.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoError, MongoResult};

use super::arith::{as_int_exact, num_of, num_to_bson};
use super::convert::{array_or_null, type_name_or_missing, typed_or_null};
use super::eval::{get_path, misrouted, Args};
use super::ops::Op;
use super::{compare_values, err, is_nullish, values_eq, Expr, MISSING};

/// Evaluates a positional array operator on its evaluated arguments.
pub(super) fn eval(op: Op, mut v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    let name = op.name();
    match op {
        ArrayElemAt => {
            let first = "$arrayElemAt's first argument must be an array, but is ";
            let Some(arr) =
                typed_or_null(&v[0], Bson::as_array, ErrorCode::ArrayElemAtNotArray, first)?
            else {
                return Ok(Bson::Null);
            };
            if is_nullish(&v[1]) {
                return Ok(Bson::Null);
            }
            let Some(num) = num_of(&v[1]) else {
                return Err(err(
                    ErrorCode::ArrayElemAtIndexNotNumeric,
                    format!(
                        "$arrayElemAt's second argument must be a numeric value, but is {}",
                        type_name(&v[1])
                    ),
                ));
            };
            let Some(i) = as_int_exact(&v[1]).filter(|i| i32::try_from(*i).is_ok()) else {
                return Err(err(
                    ErrorCode::ArrayElemAtIndexNotInt32,
                    format!("$arrayElemAt's second argument must be representable as a 32-bit integer: {}", num_to_bson(num)),
                ));
            };
            Ok(elem_at(arr, i))
        }
        First | Last => {
            let msg = format_args!("{name}'s argument must be an array, but is ");
            let Some(a) =
                typed_or_null(&v[0], Bson::as_array, ErrorCode::ArrayElemAtNotArray, msg)?
            else {
                return Ok(Bson::Null);
            };
            let e = if op == First { a.first() } else { a.last() };
            Ok(e.cloned().unwrap_or(MISSING))
        }
        Size => match &v[0] {
            Bson::Array(a) => Ok(Bson::Int32(a.len() as i32)),
            x => Err(err(
                ErrorCode::SizeNotArray,
                format!(
                    "The argument to $size must be an array. Type of argument was: {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        Slice => slice(&v),
        ConcatArrays => {
            let mut out = Vec::new();
            for x in v {
                let Some(a) = array_or_null(
                    x,
                    ErrorCode::ConcatArraysNotArray,
                    "$concatArrays only supports arrays, not ",
                )?
                else {
                    return Ok(Bson::Null);
                };
                out.extend(a);
            }
            Ok(Bson::Array(out))
        }
        In => match &v[1] {
            Bson::Array(a) => Ok(Bson::Boolean(a.iter().any(|e| values_eq(e, &v[0])))),
            x => Err(err(
                ErrorCode::InNotArray,
                format!(
                    "$in requires an array as a second argument, found: {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        IndexOfArray => index_of_array(&v),
        IsArray => Ok(Bson::Boolean(matches!(v[0], Bson::Array(_)))),
        Range => range(&v),
        ReverseArray => {
            let msg = "The argument to $reverseArray must be an array, but was of type: ";
            let Some(mut a) =
                array_or_null(v.pop().unwrap(), ErrorCode::ReverseArrayNotArray, msg)?
            else {
                return Ok(Bson::Null);
            };
            a.reverse();
            Ok(Bson::Array(a))
        }
        ArrayToObject => array_to_object(v.pop().unwrap()),
        ObjectToArray => match v.pop().unwrap() {
            Bson::Document(d) => Ok(Bson::Array(
                d.into_iter()
                    .map(|(k, val)| Bson::Document(bson::doc! {"k": k, "v": val}))
                    .collect(),
            )),
            x if is_nullish(&x) => Ok(Bson::Null),
            x => Err(err(
                ErrorCode::ObjectToArrayNotDocument,
                format!(
                    "$objectToArray requires a document input, found: {}",
                    type_name(&x)
                ),
            )),
        },
        _ => Err(misrouted(op)),
    }
}

fn elem_at(arr: &[Bson], i: i64) -> Bson {
    let idx = if i < 0 { arr.len() as i64 + i } else { i };
    if idx < 0 || idx >= arr.len() as i64 {
        MISSING
    } else {
        arr[idx as usize].clone()
    }
}

pub(super) fn slice(v: &[Bson]) -> MongoResult<Bson> {
    let arr = match &v[0] {
        Bson::Array(a) => a,
        x if is_nullish(x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                ErrorCode::SliceFirstNotArray,
                format!(
                    "First argument to $slice must be an array, but is of type: {}",
                    type_name(x)
                ),
            ))
        }
    };
    if v[1..].iter().any(is_nullish) {
        return Ok(Bson::Null);
    }
    let int_arg = |i: usize, code: ErrorCode, what: &str| -> MongoResult<i64> {
        as_int_exact(&v[i])
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| {
                err(
                    code,
                    format!(
                        "{what} argument to $slice must be numeric, but is of type: {}",
                        type_name(&v[i])
                    ),
                )
            })
    };
    let len = arr.len() as i64;
    let (start, count) = if v.len() == 2 {
        let n = int_arg(1, ErrorCode::SliceSecondNotNumeric, "Second")?;
        if n >= 0 {
            (0, n.min(len))
        } else {
            ((len + n).max(0), (-n).min(len))
        }
    } else {
        let pos = int_arg(1, ErrorCode::SliceSecondNotNumeric, "Second")?;
        let n = int_arg(2, ErrorCode::SliceThirdNotNumeric, "Third")?;
        if n <= 0 {
            return Err(err(
                ErrorCode::SliceThirdNotPositive,
                format!("Third argument to $slice must be positive: {}", v[2]),
            ));
        }
        let start = if pos < 0 {
            (len + pos).max(0)
        } else {
            pos.min(len)
        };
        (start, n.min(len - start))
    };
    Ok(Bson::Array(
        arr[start as usize..(start + count) as usize].to_vec(),
    ))
}

fn index_of_array(v: &[Bson]) -> MongoResult<Bson> {
    let msg = "$indexOfArray requires an array as a first argument, found: ";
    let Some(arr) = typed_or_null(&v[0], Bson::as_array, ErrorCode::IndexOfArrayNotArray, msg)?
    else {
        return Ok(Bson::Null);
    };
    let (start, end) = index_range("$indexOfArray", v, arr.len())?;
    for (i, e) in arr.iter().enumerate().take(end).skip(start) {
        if values_eq(e, &v[1]) {
            return Ok(Bson::Int32(i as i32));
        }
    }
    Ok(Bson::Int32(-1))
}

/// The optional start and end indexes (arguments 2 and 3) of `$indexOfArray`,
/// `$indexOfBytes` and `$indexOfCP`, over a sequence of `len` items: `(0, len)` when
/// absent, the end at most `len`.
pub(super) fn index_range(name: &str, v: &[Bson], len: usize) -> MongoResult<(usize, usize)> {
    let bound = |i: usize| -> MongoResult<Option<usize>> {
        match v.get(i) {
            None => Ok(None),
            Some(x) => match as_int_exact(x) {
                Some(n) if n >= 0 => Ok(Some(n as usize)),
                Some(_) => Err(err(ErrorCode::IndexOfStartNegative, format!("{name} requires a nonnegative start index, found: {x}"))),
                None => Err(err(
                    ErrorCode::IndexOfStartNotIntegral,
                    format!("{name} requires an integral starting index, found a value of type: {}, with value: {x}", type_name(x)),
                )),
            },
        }
    };
    let start = bound(2)?.unwrap_or(0);
    let end = bound(3)?.unwrap_or(len).min(len);
    Ok((start, end))
}

pub(super) fn range(v: &[Bson]) -> MongoResult<Bson> {
    let get = |i: usize, c_num: ErrorCode, c_int: ErrorCode, what: &str| -> MongoResult<i64> {
        let x = &v[i];
        if num_of(x).is_none() {
            return Err(err(
                c_num,
                format!(
                    "$range requires a numeric {what}, found value of type: {}",
                    type_name_or_missing(x)
                ),
            ));
        }
        as_int_exact(x)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| err(c_int, format!("$range requires a {what} that can be represented as a 32-bit integer, found value: {x}")))
    };
    let start = get(
        0,
        ErrorCode::RangeStartNotNumeric,
        ErrorCode::RangeStartNotInt32,
        "starting value",
    )?;
    let end = get(
        1,
        ErrorCode::RangeEndNotNumeric,
        ErrorCode::RangeEndNotInt32,
        "ending value",
    )?;
    let step = if v.len() > 2 {
        get(
            2,
            ErrorCode::RangeStepNotNumeric,
            ErrorCode::RangeStepNotInt32,
            "step value",
        )?
    } else {
        1
    };
    if step == 0 {
        return Err(err(
            ErrorCode::RangeStepZero,
            "$range requires a non-zero step value",
        ));
    }
    // mongod's estimate (sizeof(vector) + length * sizeof(Value)) against
    // internalQueryMaxRangeBytes: ExceededMemoryLimit (146) rather than a huge allocation.
    let steps = (end - start) / step;
    let length = if steps >= 0 { 1 + steps } else { 0 };
    let mem_needed = 24 + length * 16;
    if mem_needed >= MAX_RANGE_BYTES {
        return Err(MongoError::new(
            ErrorCode::ExceededMemoryLimit,
            format!("$range would use too much memory ({mem_needed} bytes) and cannot spill to disk. Memory limit: {MAX_RANGE_BYTES} bytes"),
        ));
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        out.push(Bson::Int32(i as i32));
        i += step;
    }
    Ok(Bson::Array(out))
}

/// mongod's `internalQueryMaxRangeBytes`.
const MAX_RANGE_BYTES: i64 = 100 * 1024 * 1024;

fn array_to_object(v: Bson) -> MongoResult<Bson> {
    let Some(arr) = array_or_null(
        v,
        ErrorCode::ArrayToObjectNotArray,
        "$arrayToObject requires an array input, found: ",
    )?
    else {
        return Ok(Bson::Null);
    };
    let mut out = Document::new();
    let first_is_array = matches!(arr.first(), Some(Bson::Array(_)));
    for e in arr {
        let (k, val) = match e {
            Bson::Array(mut pair) if first_is_array => {
                if pair.len() != 2 {
                    return Err(err(
                        ErrorCode::ArrayToObjectPairSize,
                        format!("$arrayToObject requires an array of size 2 arrays,found array of size: {}", pair.len()),
                    ));
                }
                let val = pair.pop().unwrap();
                match pair.pop().unwrap() {
                    Bson::String(k) => (k, val),
                    k => {
                        return Err(err(
                            ErrorCode::ArrayToObjectPairKeyNotString,
                            format!(
                                "$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}",
                                type_name(&k)
                            ),
                        ))
                    }
                }
            }
            Bson::Document(mut d) if !first_is_array => {
                if d.len() != 2 {
                    return Err(err(
                        ErrorCode::ArrayToObjectKeyCount,
                        format!("$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:{}", d.len()),
                    ));
                }
                let (Some(k), Some(val)) = (d.remove("k"), d.remove("v")) else {
                    return Err(err(
                        ErrorCode::ArrayToObjectMissingKOrV,
                        "$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both keys from: {}",
                    ));
                };
                match k {
                    Bson::String(k) => (k, val),
                    k => {
                        return Err(err(
                            ErrorCode::ArrayToObjectKNotString,
                            format!("$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: {}", type_name(&k)),
                        ))
                    }
                }
            }
            Bson::Array(_) | Bson::Document(_) => {
                return Err(err(
                    ErrorCode::ArrayToObjectMixedFormats,
                    "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects",
                ))
            }
            other => {
                return Err(err(ErrorCode::ArrayToObjectInvalidElement, format!("Unrecognised input type format for $arrayToObject: {}", type_name(&other))))
            }
        };
        if k.contains('\0') {
            return Err(err(
                ErrorCode::ArrayToObjectKeyNullByte,
                "Key field cannot contain an embedded null byte",
            ));
        }
        out.insert(k, val);
    }
    Ok(Bson::Document(out))
}

#[inline(never)]
pub(super) fn named_zip(a: &mut Args) -> MongoResult<Bson> {
    let inputs = a.req(0)?;
    let longest = match a.arg(1)? {
        None => false,
        Some(Bson::Boolean(b)) => b,
        Some(x) => {
            return Err(err(
                ErrorCode::ZipUseLongestLengthNotBool,
                format!("useLongestLength must be a bool, found {}", type_name(&x)),
            ))
        }
    };
    let defaults = match a.arg(2)? {
        None => None,
        Some(Bson::Array(a)) => Some(a),
        Some(x) => {
            return Err(err(
                ErrorCode::ZipDefaultsNotArray,
                format!(
                    "defaults must be an array of expressions, found {}",
                    type_name(&x)
                ),
            ))
        }
    };
    let Bson::Array(inputs) = inputs else {
        return Err(err(
            ErrorCode::ZipInputsNotArray,
            format!(
                "inputs must be an array of expressions, found {}",
                type_name(&inputs)
            ),
        ));
    };
    if defaults.is_some() && !longest {
        return Err(err(
            ErrorCode::ZipDefaultsWithoutUseLongestLength,
            "cannot specify defaults unless useLongestLength is true",
        ));
    }
    if defaults.as_ref().is_some_and(|d| d.len() != inputs.len()) {
        return Err(err(
            ErrorCode::ZipDefaultsLengthMismatch,
            "defaults and inputs must have the same length",
        ));
    }
    let mut arrays = Vec::with_capacity(inputs.len());
    for x in inputs {
        match x {
            Bson::Array(a) => arrays.push(a),
            x if is_nullish(&x) => return Ok(Bson::Null),
            x => {
                return Err(err(
                    ErrorCode::ZipInputNotArray,
                    format!("$zip found a non-array expression in input: {x}"),
                ))
            }
        }
    }
    let n = if longest {
        arrays.iter().map(Vec::len).max().unwrap_or(0)
    } else {
        arrays.iter().map(Vec::len).min().unwrap_or(0)
    };
    let out = (0..n)
        .map(|i| {
            Bson::Array(
                arrays
                    .iter()
                    .enumerate()
                    .map(|(j, a)| {
                        a.get(i).cloned().unwrap_or_else(|| {
                            defaults.as_ref().map_or(Bson::Null, |d| d[j].clone())
                        })
                    })
                    .collect(),
            )
        })
        .collect();
    Ok(Bson::Array(out))
}

#[inline(never)]
pub(super) fn named_sort_array(a: &mut Args) -> MongoResult<Bson> {
    let input = a.req(0)?;
    let spec = a.expr(1).and_then(Expr::as_constant).unwrap();
    let msg = "The input argument to $sortArray must be an array, but was of type: ";
    let Some(mut arr) = array_or_null(input, ErrorCode::SortArrayInputNotArray, msg)? else {
        return Ok(Bson::Null);
    };
    sort_values(&mut arr, spec)?;
    Ok(Bson::Array(arr))
}

#[inline(never)]
pub(super) fn named_first_last_n(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let input = a.req(0)?;
    let n = a.req(1)?;
    let n = parse_n(name, &n)?;
    let mut arr = match input {
        Bson::Array(a) => a,
        x => {
            return Err(err(
                ErrorCode::NInputNotArray,
                format!(
                    "Input must be an array, but found {}",
                    type_name_or_missing(&x)
                ),
            ))
        }
    };
    match a.op {
        Op::FirstN => arr.truncate(n),
        Op::LastN => {
            let k = arr.len().saturating_sub(n);
            arr.drain(..k);
        }
        _ => {
            arr.retain(|x| !is_nullish(x));
            if a.op == Op::MaxN {
                arr.sort_by(|a, b| compare_values(b, a));
            } else {
                arr.sort_by(compare_values);
            }
            arr.truncate(n);
        }
    }
    Ok(Bson::Array(arr))
}

fn parse_n(name: &str, n: &Bson) -> MongoResult<usize> {
    match as_int_exact(n) {
        Some(k) if k > 0 => Ok(k as usize),
        Some(_) => Err(err(
            ErrorCode::NNotPositive,
            format!("'n' must be greater than 0, found {n} for {name}"),
        )),
        None => Err(err(
            ErrorCode::NNotIntegral,
            format!("Value for 'n' must be of integral type, but found {n} for {name}"),
        )),
    }
}

/// Sorts values for `$sortArray`: `1`/`-1` compares whole values, a document sorts by fields.
pub(crate) fn sort_values(arr: &mut [Bson], spec: &Bson) -> MongoResult<()> {
    match spec {
        Bson::Document(keys) => {
            let mut fields: Vec<(Vec<String>, bool)> = Vec::new();
            for (k, v) in keys {
                let desc =
                    match as_int_exact(v) {
                        Some(1) => false,
                        Some(-1) => true,
                        _ => return Err(err(
                            ErrorCode::SortOrderInvalid,
                            "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                        )),
                    };
                crate::depth::check_path(k)?;
                fields.push((k.split('.').map(str::to_string).collect(), desc));
            }
            let key = |v: &Bson, path: &[String], desc: bool| -> Bson {
                let x = get_path(v, path);
                match x {
                    Bson::Array(a) if !a.is_empty() => {
                        let it = a.into_iter();
                        if desc {
                            it.max_by(compare_values).unwrap()
                        } else {
                            it.min_by(compare_values).unwrap()
                        }
                    }
                    Bson::Array(_) => MISSING,
                    x => x,
                }
            };
            arr.sort_by(|a, b| {
                for (p, desc) in &fields {
                    let (x, y) = (key(a, p, *desc), key(b, p, *desc));
                    let o = compare_values(&x, &y);
                    if o != Ordering::Equal {
                        return if *desc { o.reverse() } else { o };
                    }
                }
                Ordering::Equal
            });
        }
        v => {
            let desc = as_int_exact(v) == Some(-1);
            arr.sort_by(|a, b| {
                if desc {
                    compare_values(b, a)
                } else {
                    compare_values(a, b)
                }
            });
        }
    }
    Ok(())
}

pub(super) fn validate_sort_by(spec: &Bson) -> MongoResult<()> {
    match spec {
        Bson::Document(d) if !d.is_empty() => Ok(()),
        Bson::Int32(1) | Bson::Int32(-1) | Bson::Int64(1) | Bson::Int64(-1) => Ok(()),
        Bson::Double(f) if *f == 1.0 || *f == -1.0 => Ok(()),
        _ => Err(err(
            ErrorCode::SortArraySortByInvalid,
            "$sortArray sortBy must be either 1, -1, or a non-empty sort specification",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn arrays() {
        check(vec![
            (bson!({"$arrayElemAt": ["$arr", 0]}), bson!(1)),
            (bson!({"$arrayElemAt": ["$arr", -1]}), bson!(3)),
            (bson!({"$arrayElemAt": ["$arr", 5]}), Bson::Undefined),
            (bson!({"$first": "$arr"}), bson!(1)),
            (bson!({"$last": "$arr"}), bson!(3)),
            (bson!({"$first": "$e"}), Bson::Undefined),
            (bson!({"$size": "$arr"}), bson!(3)),
            (bson!({"$slice": ["$arr", 2]}), bson!([1, 2])),
            (bson!({"$slice": ["$arr", -2]}), bson!([2, 3])),
            (bson!({"$slice": ["$arr", 1, 1]}), bson!([2])),
            (bson!({"$slice": ["$arr", -5, 2]}), bson!([1, 2])),
            (
                bson!({"$concatArrays": ["$arr", [4], []]}),
                bson!([1, 2, 3, 4]),
            ),
            (bson!({"$concatArrays": ["$arr", "$missing"]}), Bson::Null),
            (bson!({"$in": [2.0, "$arr"]}), bson!(true)),
            (bson!({"$in": [9, "$arr"]}), bson!(false)),
            (bson!({"$indexOfArray": ["$arr", 2]}), bson!(1)),
            (bson!({"$indexOfArray": ["$arr", 2, 2]}), bson!(-1)),
            (bson!({"$isArray": "$arr"}), bson!(true)),
            (bson!({"$isArray": ["$a"]}), bson!(false)),
            (
                bson!({"$filter": {"input": "$arr", "as": "x", "cond": {"$gte": ["$$x", 2]}}}),
                bson!([2, 3]),
            ),
            (
                bson!({"$filter": {"input": "$arr", "cond": {"$gte": ["$$this", 2]}, "limit": 1}}),
                bson!([2]),
            ),
            (
                bson!({"$filter": {"input": "$missing", "cond": true}}),
                Bson::Null,
            ),
            (
                bson!({"$map": {"input": "$arr", "as": "x", "in": {"$add": ["$$x", "$a"]}}}),
                bson!([6, 7, 8]),
            ),
            (
                bson!({"$map": {"input": "$arr", "in": {"$multiply": ["$$this", 2]}}}),
                bson!([2, 4, 6]),
            ),
            (
                bson!({"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}}),
                bson!(6),
            ),
            (
                bson!({"$reduce": {"input": [[1], [2, 3]], "initialValue": [], "in": {"$concatArrays": ["$$value", "$$this"]}}}),
                bson!([1, 2, 3]),
            ),
            (bson!({"$range": [0, 5, 2]}), bson!([0, 2, 4])),
            (bson!({"$range": [5, 0, -2]}), bson!([5, 3, 1])),
            (bson!({"$range": [0, 3]}), bson!([0, 1, 2])),
            (bson!({"$reverseArray": "$arr"}), bson!([3, 2, 1])),
            (
                bson!({"$zip": {"inputs": [[1, 2, 3], ["a", "b"]]}}),
                bson!([[1, "a"], [2, "b"]]),
            ),
            (
                bson!({"$zip": {"inputs": [[1, 2, 3], ["a"]], "useLongestLength": true, "defaults": [0, "z"]}}),
                bson!([[1, "a"], [2, "z"], [3, "z"]]),
            ),
            (
                bson!({"$arrayToObject": [[["a", 1], ["b", 2]]]}),
                bson!({"a": 1, "b": 2}),
            ),
            (
                bson!({"$arrayToObject": [[{"k": "a", "v": 1}, {"k": "a", "v": 3}]]}),
                bson!({"a": 3}),
            ),
            (
                bson!({"$objectToArray": "$nested.k"}),
                bson!([{"k": "v", "v": 42}]),
            ),
            (
                bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": 1}}),
                bson!([1, 2, 3]),
            ),
            (
                bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": -1}}),
                bson!([3, 2, 1]),
            ),
            (
                bson!({"$sortArray": {"input": [{"v": 2}, {"v": 1}], "sortBy": {"v": 1}}}),
                bson!([{"v": 1}, {"v": 2}]),
            ),
            (
                bson!({"$firstN": {"input": [1, 2, 3], "n": 2}}),
                bson!([1, 2]),
            ),
            (
                bson!({"$lastN": {"input": [1, 2, 3], "n": 2}}),
                bson!([2, 3]),
            ),
            (
                bson!({"$maxN": {"input": [1, null, 3, 2], "n": 2}}),
                bson!([3, 2]),
            ),
            (
                bson!({"$minN": {"input": [4, 1, 3], "n": 2}}),
                bson!([1, 3]),
            ),
        ]);
        check_err(vec![
            (bson!({"$size": "$a"}), 17124),
            (bson!({"$size": "$missing"}), 17124),
            (bson!({"$arrayElemAt": ["$a", 0]}), 28689),
            (bson!({"$arrayElemAt": ["$arr", 1.5]}), 28691),
            (bson!({"$concatArrays": ["$arr", 1]}), 28664),
            (bson!({"$in": [1, "$a"]}), 40081),
            (bson!({"$filter": {"input": 1, "cond": true}}), 28651),
            (bson!({"$filter": {"input": []}}), 28650),
            (bson!({"$map": {"input": 1, "in": 1}}), 16883),
            (
                bson!({"$reduce": {"input": 1, "initialValue": 0, "in": 1}}),
                40080,
            ),
            (bson!({"$range": [0, 5, 0]}), 34449),
            (bson!({"$range": ["a", 5]}), 34443),
            (bson!({"$reverseArray": 1}), 34435),
            (bson!({"$zip": {"inputs": [1]}}), 34468),
            (bson!({"$arrayToObject": [[["a", 1, 2]]]}), 40397),
            (bson!({"$arrayToObject": [[[1, 1]]]}), 40395),
            (bson!({"$arrayToObject": 1}), 40386),
            (bson!({"$objectToArray": 1}), 40390),
            (bson!({"$slice": ["$arr", 1, 0]}), 28729),
            (bson!({"$slice": [1, 1]}), 28724),
            (bson!({"$firstN": {"input": [1], "n": 0}}), 5787908),
            (bson!({"$sortArray": {"input": [1], "sortBy": 2}}), 2942503),
        ]);
    }
}
