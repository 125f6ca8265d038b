//! Types and conversion: `$type`, `$isNumber`, `$convert` and the `$toX` shorthands.

use std::fmt::Display;

use bson::{oid::ObjectId, spec::ElementType, Bson, DateTime};

use crate::bson_types::{self, type_name};
use crate::{ErrorCode, MongoError, MongoResult};

use super::arith::{as_int_exact, num_of};
use super::calendar::parse_date_string;
use super::decimal::Dec;
use super::eval::{misrouted, Args};
use super::ops::Op;
use super::string::coerce_to_string;
use super::{err, is_nullish, truthy};

pub(crate) fn type_name_or_missing(v: &Bson) -> &'static str {
    match v {
        Bson::Undefined => "missing",
        v => type_name(v),
    }
}

/// An operator's argument of the wrong type: error `code`, `msg` followed by the type of `v`.
pub(super) fn type_error(code: ErrorCode, msg: impl Display, v: &Bson) -> MongoError {
    err(code, format!("{msg}{}", type_name(v)))
}

/// An operator's argument that must be of one type: what `pick` takes from `v`, `None` for
/// null or missing (the operator's result is then null), else [`type_error`].
pub(super) fn typed_or_null<'v, T>(
    v: &'v Bson,
    pick: impl FnOnce(&'v Bson) -> Option<T>,
    code: ErrorCode,
    msg: impl Display,
) -> MongoResult<Option<T>> {
    match pick(v) {
        Some(t) => Ok(Some(t)),
        None if is_nullish(v) => Ok(None),
        None => Err(type_error(code, msg, v)),
    }
}

/// [`typed_or_null`] for an array argument the operator consumes.
pub(super) fn array_or_null(
    v: Bson,
    code: ErrorCode,
    msg: impl Display,
) -> MongoResult<Option<Vec<Bson>>> {
    match v {
        Bson::Array(a) => Ok(Some(a)),
        v if is_nullish(&v) => Ok(None),
        v => Err(type_error(code, msg, &v)),
    }
}

/// Formats a double the way MongoDB's `$toString` does (shortest round-trip form).
pub(crate) fn fmt_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let a = d.abs();
    if !(1e-5..1e21).contains(&a) {
        let s = format!("{:e}", d);
        // Rust prints "1e21" / "1.5e-7"; MongoDB prints "1e+21" / "1.5e-07".
        if let Some((m, e)) = s.split_once('e') {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(x) => ('-', x),
                None => ('+', e),
            };
            let digits = if digits.len() < 2 {
                format!("0{digits}")
            } else {
                digits.to_string()
            };
            return format!("{m}e{sign}{digits}");
        }
        return s;
    }
    format!("{}", d)
}

pub(super) fn conversion_failure(msg: impl Into<String>) -> MongoError {
    MongoError::new(ErrorCode::ConversionFailure, msg)
}

/// The targets `$convert` takes by alias and names in its errors.
const TARGETS: [ElementType; 12] = [
    ElementType::Double,
    ElementType::String,
    ElementType::ObjectId,
    ElementType::Boolean,
    ElementType::DateTime,
    ElementType::Int32,
    ElementType::Int64,
    ElementType::Decimal128,
    ElementType::EmbeddedDocument,
    ElementType::Array,
    ElementType::Binary,
    ElementType::Null,
];

/// Targets it takes by alias too but calls "unknown" in its errors; only a value of the
/// type converts to one.
const SAME_TYPE_TARGETS: [ElementType; 4] = [
    ElementType::RegularExpression,
    ElementType::Timestamp,
    ElementType::MinKey,
    ElementType::MaxKey,
];

fn target_type(v: &Bson) -> MongoResult<ElementType> {
    let t = match v {
        Bson::String(s) => match bson_types::by_alias(s).map(|t| t.element) {
            Some(t) if TARGETS.contains(&t) || SAME_TYPE_TARGETS.contains(&t) => t,
            _ => return Err(MongoError::bad_value(format!("Unknown type name: {s}"))),
        },
        // A number is the element's type byte, not `$type`'s number: minKey is 255 here.
        v => match as_int_exact(v)
            .and_then(|n| u8::try_from(n).ok())
            .and_then(ElementType::from)
        {
            Some(t) => t,
            None => {
                return Err(MongoError::bad_value(format!(
                    "In $convert, numeric 'to' argument is not a valid type: {v}"
                )))
            }
        },
    };
    Ok(t)
}

fn element_type_name(t: ElementType) -> &'static str {
    if TARGETS.contains(&t) {
        bson_types::by_element(t).alias
    } else {
        "unknown"
    }
}

fn parse_int_str(s: &str) -> Result<i64, String> {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Failed to parse number '{s}' in $convert with no onError value: Did not consume whole string."));
    }
    s.parse::<i64>().map_err(|_| {
        format!("Failed to parse number '{s}' in $convert with no onError value: Out of range")
    })
}

fn parse_double_str(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    match lower.trim_start_matches(['-', '+']) {
        "infinity" | "inf" => {
            return Some(if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            })
        }
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if s.is_empty() || s.contains(|c: char| c.is_whitespace()) || s.starts_with("0x") {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Converts as `$convert` does; errors are ConversionFailure (241).
pub(super) fn convert(v: Bson, to: ElementType) -> MongoResult<Bson> {
    let unsupported = |v: &Bson| {
        conversion_failure(format!(
            "Unsupported conversion from {} to {} in $convert with no onError value",
            type_name(v),
            element_type_name(to)
        ))
    };
    let overflow = |v: &Bson| {
        conversion_failure(format!(
            "Conversion would overflow target type in $convert with no onError value: {v}"
        ))
    };
    let from_float = |f: f64, lo: f64, hi: f64, v: &Bson| -> MongoResult<i64> {
        if f.is_nan() {
            return Err(conversion_failure(
                "Attempt to convert NaN value to integer type in $convert with no onError value",
            ));
        }
        if f.is_infinite() {
            return Err(conversion_failure(
                "Attempt to convert infinity value to integer type in $convert with no onError value",
            ));
        }
        let t = f.trunc();
        if t < lo || t > hi {
            return Err(overflow(v));
        }
        Ok(t as i64)
    };
    match to {
        ElementType::Double => Ok(Bson::Double(match &v {
            Bson::Double(d) => *d,
            Bson::Int32(i) => *i as f64,
            Bson::Int64(i) => *i as f64,
            Bson::Decimal128(d) => {
                let f = Dec::from_d128(d).to_f64();
                if f.is_infinite() && Dec::from_d128(d).special == 0 {
                    return Err(overflow(&v));
                }
                f
            }
            Bson::Boolean(b) => *b as i32 as f64,
            Bson::DateTime(d) => d.timestamp_millis() as f64,
            Bson::String(s) => parse_double_str(s).ok_or_else(|| {
                conversion_failure(format!("Failed to parse number '{s}' in $convert with no onError value: Did not consume whole string."))
            })?,
            _ => return Err(unsupported(&v)),
        })),
        ElementType::Int32 | ElementType::Int64 => {
            let (lo, hi) =
                if to == ElementType::Int32 { (i32::MIN as f64, i32::MAX as f64) } else { (i64::MIN as f64, 9.223372036854775e18) };
            let n: i64 = match &v {
                Bson::Int32(i) => *i as i64,
                Bson::Int64(i) => *i,
                Bson::Double(d) => from_float(*d, lo, hi, &v)?,
                Bson::Decimal128(d) => {
                    let dec = Dec::from_d128(d);
                    if dec.special == 2 {
                        return Err(conversion_failure(
                            "Attempt to convert NaN value to integer type in $convert with no onError value",
                        ));
                    }
                    if dec.special == 1 {
                        return Err(conversion_failure(
                            "Attempt to convert infinity value to integer type in $convert with no onError value",
                        ));
                    }
                    dec.to_i64_trunc().ok_or_else(|| overflow(&v))?
                }
                Bson::Boolean(b) => *b as i64,
                Bson::DateTime(d) if to == ElementType::Int64 => d.timestamp_millis(),
                Bson::String(s) => parse_int_str(s).map_err(conversion_failure)?,
                _ => return Err(unsupported(&v)),
            };
            if to == ElementType::Int32 {
                i32::try_from(n).map(Bson::Int32).map_err(|_| overflow(&v))
            } else {
                Ok(Bson::Int64(n))
            }
        }
        ElementType::Decimal128 => Ok(Bson::Decimal128(match &v {
            Bson::Decimal128(d) => *d,
            Bson::Int32(i) => Dec::from_i64(*i as i64).to_d128(),
            Bson::Int64(i) => Dec::from_i64(*i).to_d128(),
            Bson::Double(d) => Dec::from_f64(*d).to_d128(),
            Bson::Boolean(b) => Dec::from_i64(*b as i64).to_d128(),
            Bson::DateTime(d) => Dec::from_i64(d.timestamp_millis()).to_d128(),
            Bson::String(s) => Dec::parse(s).map(|d| d.to_d128()).ok_or_else(|| {
                conversion_failure(format!("Failed to parse number '{s}' in $convert with no onError value: Failed to parse string to decimal"))
            })?,
            _ => return Err(unsupported(&v)),
        })),
        ElementType::Boolean => Ok(Bson::Boolean(match &v {
            Bson::Boolean(b) => *b,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => truthy(&v),
            Bson::MinKey | Bson::MaxKey => return Err(unsupported(&v)),
            _ => true,
        })),
        ElementType::String => Ok(Bson::String(match &v {
            Bson::ObjectId(o) => o.to_hex(),
            Bson::Boolean(b) => b.to_string(),
            Bson::String(s) => s.clone(),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) | Bson::DateTime(_) => {
                coerce_to_string("$convert", &v)?
            }
            Bson::Symbol(s) => s.clone(),
            Bson::JavaScriptCode(s) => s.clone(),
            _ => return Err(unsupported(&v)),
        })),
        ElementType::ObjectId => match &v {
            Bson::ObjectId(_) => Ok(v),
            Bson::String(s) => ObjectId::parse_str(s).map(Bson::ObjectId).map_err(|_| {
                conversion_failure(format!(
                    "Failed to parse objectId '{s}' in $convert with no onError value: Invalid string length for parsing to OID, expected 24 but found {}",
                    s.len()
                ))
            }),
            _ => Err(unsupported(&v)),
        },
        ElementType::DateTime => match &v {
            Bson::DateTime(_) => Ok(v),
            Bson::Int64(i) => Ok(Bson::DateTime(DateTime::from_millis(*i))),
            Bson::Double(d) => Ok(Bson::DateTime(DateTime::from_millis(from_float(*d, i64::MIN as f64, 9.2e18, &v)?))),
            Bson::Decimal128(d) => Ok(Bson::DateTime(DateTime::from_millis(
                Dec::from_d128(d).to_i64_trunc().ok_or_else(|| overflow(&v))?,
            ))),
            Bson::ObjectId(o) => Ok(Bson::DateTime(o.timestamp())),
            Bson::Timestamp(t) => Ok(Bson::DateTime(DateTime::from_millis(t.time as i64 * 1000))),
            Bson::String(s) => parse_date_string(s, None, 0).map(Bson::DateTime).map_err(conversion_failure),
            _ => Err(unsupported(&v)),
        },
        ElementType::Null => Ok(Bson::Null),
        _ if v.element_type() == to => Ok(v),
        _ => Err(unsupported(&v)),
    }
}
/// Evaluates `$type`, `$isNumber` or a `$toX` shorthand on its evaluated argument.
pub(super) fn eval(op: Op, mut v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    match op {
        Type => Ok(Bson::String(type_name_or_missing(&v[0]).to_string())),
        ToString | ToInt | ToLong | ToDouble | ToDecimal | ToBool | ToObjectId | ToDate => {
            let target = match op {
                ToString => ElementType::String,
                ToInt => ElementType::Int32,
                ToLong => ElementType::Int64,
                ToDouble => ElementType::Double,
                ToDecimal => ElementType::Decimal128,
                ToBool => ElementType::Boolean,
                ToObjectId => ElementType::ObjectId,
                _ => ElementType::DateTime,
            };
            let x = v.pop().unwrap();
            if is_nullish(&x) {
                return Ok(Bson::Null);
            }
            convert(x, target)
        }
        IsNumber => Ok(Bson::Boolean(num_of(&v[0]).is_some())),
        _ => Err(misrouted(op)),
    }
}

#[inline(never)]
pub(super) fn named_convert(a: &mut Args) -> MongoResult<Bson> {
    let input = a.req(0)?;
    if is_nullish(&input) {
        return a.on_null(3);
    }
    let to = a.req(1)?;
    if is_nullish(&to) {
        return Ok(Bson::Null);
    }
    let to = target_type(&to)?;
    match convert(input, to) {
        Ok(v) => Ok(v),
        Err(e) if e.code == ErrorCode::ConversionFailure as i32 => a.on_error(2, e),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn types_and_conversion() {
        let oid = ObjectId::parse_str("5f1d7f9b8e1b2c3d4e5f6a7b").unwrap();
        check(vec![
            (bson!({"$type": "$a"}), bson!("int")),
            (bson!({"$type": "$l"}), bson!("long")),
            (bson!({"$type": "$b"}), bson!("double")),
            (bson!({"$type": "$missing"}), bson!("missing")),
            (bson!({"$type": "$n"}), bson!("null")),
            (bson!({"$type": "$arr"}), bson!("array")),
            (bson!({"$type": "$nested"}), bson!("object")),
            (bson!({"$type": "$d"}), bson!("date")),
            (bson!({"$isNumber": "$b"}), bson!(true)),
            (bson!({"$isNumber": "$s"}), bson!(false)),
            (bson!({"$toString": 1.5}), bson!("1.5")),
            (bson!({"$toString": 2.0}), bson!("2")),
            (bson!({"$toString": 12i64}), bson!("12")),
            (bson!({"$toString": true}), bson!("true")),
            (
                bson!({"$toString": "$d"}),
                bson!("2023-11-14T22:13:20.123Z"),
            ),
            (bson!({"$toString": oid}), bson!("5f1d7f9b8e1b2c3d4e5f6a7b")),
            (bson!({"$toString": dec("1.50")}), bson!("1.50")),
            (bson!({"$toString": "$missing"}), Bson::Null),
            (bson!({"$toInt": "42"}), bson!(42)),
            (bson!({"$toInt": 4.9}), bson!(4)),
            (bson!({"$toInt": true}), bson!(1)),
            (bson!({"$toLong": "$d"}), bson!(1_700_000_000_123i64)),
            (bson!({"$toLong": "-7"}), bson!(-7i64)),
            (bson!({"$toDouble": "2.5"}), bson!(2.5)),
            (bson!({"$toDouble": 3}), bson!(3.0)),
            (bson!({"$toDouble": dec("0.25")}), bson!(0.25)),
            (bson!({"$toDecimal": 3}), dec("3")),
            (bson!({"$toDecimal": "1.25"}), dec("1.25")),
            (bson!({"$toDecimal": 2.5}), dec("2.50000000000000")),
            (bson!({"$toBool": 0}), bson!(false)),
            (bson!({"$toBool": ""}), bson!(true)),
            (
                bson!({"$toObjectId": "5f1d7f9b8e1b2c3d4e5f6a7b"}),
                Bson::ObjectId(oid),
            ),
            (
                bson!({"$toDate": 86_400_000i64}),
                Bson::DateTime(DateTime::from_millis(86_400_000)),
            ),
            (
                bson!({"$toDate": "1970-01-02T00:00:00Z"}),
                Bson::DateTime(DateTime::from_millis(86_400_000)),
            ),
            (bson!({"$toDate": oid}), Bson::DateTime(oid.timestamp())),
            (
                bson!({"$convert": {"input": "x", "to": "int", "onError": -1}}),
                bson!(-1),
            ),
            (
                bson!({"$convert": {"input": null, "to": "int", "onNull": 0}}),
                bson!(0),
            ),
            (bson!({"$convert": {"input": "5", "to": 16}}), bson!(5)),
            (
                bson!({"$convert": {"input": 5, "to": "string"}}),
                bson!("5"),
            ),
            (bson!({"$convert": {"input": 1, "to": "bool"}}), bson!(true)),
        ]);
        check_err(vec![
            (bson!({"$toInt": "x"}), 241),
            (bson!({"$toInt": "1.5"}), 241),
            (bson!({"$toInt": 3e10}), 241),
            (bson!({"$toInt": f64::NAN}), 241),
            (bson!({"$toObjectId": "zz"}), 241),
            (bson!({"$toDate": true}), 241),
            (bson!({"$convert": {"input": 1, "to": "nope"}}), 2),
            (bson!({"$convert": {"input": 1}}), 34469),
            (bson!({"$convert": {"input": [1], "to": "int"}}), 241),
        ]);
        assert_eq!(
            ev(bson!({"$toInt": "x"})).unwrap_err().code_name,
            "ConversionFailure"
        );
    }
}
