//! Numbers and arithmetic: the [`Num`] type (int, long, double, decimal) and the
//! arithmetic operators, which widen int → long → double with decimal winning.

use bson::{Bson, DateTime};

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoError, MongoResult};

use super::decimal::{Dec, Rounding};
use super::eval::misrouted;
use super::ops::Op;
use super::{err, is_nullish};

#[derive(Clone, Copy, Debug)]
pub(crate) enum Num {
    I(i32),
    L(i64),
    D(f64),
    M(Dec),
}

pub(crate) fn num_of(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(Num::I(*i)),
        Bson::Int64(i) => Some(Num::L(*i)),
        Bson::Double(d) => Some(Num::D(*d)),
        Bson::Decimal128(d) => Some(Num::M(Dec::from_d128(d))),
        _ => None,
    }
}

pub(crate) fn num_to_bson(n: Num) -> Bson {
    match n {
        Num::I(i) => Bson::Int32(i),
        Num::L(i) => Bson::Int64(i),
        Num::D(d) => Bson::Double(d),
        Num::M(d) => Bson::Decimal128(d.to_d128()),
    }
}

pub(crate) fn num_f64(n: Num) -> f64 {
    match n {
        Num::I(i) => i as f64,
        Num::L(i) => i as f64,
        Num::D(d) => d,
        Num::M(d) => d.to_f64(),
    }
}

fn num_dec(n: Num) -> Dec {
    match n {
        Num::I(i) => Dec::from_i64(i as i64),
        Num::L(i) => Dec::from_i64(i),
        Num::D(d) => Dec::from_f64(d),
        Num::M(d) => d,
    }
}

fn num_i64(n: Num) -> Option<i64> {
    match n {
        Num::I(i) => Some(i as i64),
        Num::L(i) => Some(i),
        _ => None,
    }
}

/// The integer value of a numeric that holds one exactly (2.0 yes, 2.5 no).
pub(crate) fn as_int_exact(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        Bson::Decimal128(d) => Dec::from_d128(d).to_i64_exact(),
        _ => None,
    }
}

pub(crate) fn num_add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::M(_), _) | (_, Num::M(_)) => Num::M(num_dec(a).add(&num_dec(b))),
        (Num::D(_), _) | (_, Num::D(_)) => Num::D(num_f64(a) + num_f64(b)),
        (Num::I(x), Num::I(y)) => match x.checked_add(y) {
            Some(s) => Num::I(s),
            None => Num::L(x as i64 + y as i64),
        },
        _ => {
            let (x, y) = (num_i64(a).unwrap(), num_i64(b).unwrap());
            match x.checked_add(y) {
                Some(s) => Num::L(s),
                None => Num::D(x as f64 + y as f64),
            }
        }
    }
}

fn num_sub(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::M(_), _) | (_, Num::M(_)) => Num::M(num_dec(a).sub(&num_dec(b))),
        (Num::D(_), _) | (_, Num::D(_)) => Num::D(num_f64(a) - num_f64(b)),
        (Num::I(x), Num::I(y)) => match x.checked_sub(y) {
            Some(s) => Num::I(s),
            None => Num::L(x as i64 - y as i64),
        },
        _ => {
            let (x, y) = (num_i64(a).unwrap(), num_i64(b).unwrap());
            match x.checked_sub(y) {
                Some(s) => Num::L(s),
                None => Num::D(x as f64 - y as f64),
            }
        }
    }
}

pub(crate) fn num_mul(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::M(_), _) | (_, Num::M(_)) => Num::M(num_dec(a).mul(&num_dec(b))),
        (Num::D(_), _) | (_, Num::D(_)) => Num::D(num_f64(a) * num_f64(b)),
        (Num::I(x), Num::I(y)) => match x.checked_mul(y) {
            Some(s) => Num::I(s),
            None => Num::L(x as i64 * y as i64),
        },
        _ => {
            let (x, y) = (num_i64(a).unwrap(), num_i64(b).unwrap());
            match x.checked_mul(y) {
                Some(s) => Num::L(s),
                None => Num::D(x as f64 * y as f64),
            }
        }
    }
}

fn arith_add(v: &[Bson]) -> MongoResult<Bson> {
    let mut acc = Num::I(0);
    let mut date: Option<i64> = None;
    let mut saw_null = false;
    for x in v {
        match x {
            Bson::DateTime(d) => {
                if date.is_some() {
                    return Err(err(
                        ErrorCode::AddMultipleDates,
                        "only one date allowed in an $add expression",
                    ));
                }
                date = Some(d.timestamp_millis());
            }
            x if is_nullish(x) => saw_null = true,
            x => match num_of(x) {
                Some(n) => acc = num_add(acc, n),
                None => {
                    return Err(err(
                        ErrorCode::AddNotNumericOrDate,
                        format!(
                            "$add only supports numeric or date types, not {}",
                            type_name(x)
                        ),
                    ))
                }
            },
        }
    }
    if saw_null {
        return Ok(Bson::Null);
    }
    match date {
        Some(ms) => {
            let delta = match acc {
                Num::I(i) => i as i64,
                Num::L(l) => l,
                n => num_f64(n).round() as i64,
            };
            Ok(Bson::DateTime(DateTime::from_millis(
                ms.wrapping_add(delta),
            )))
        }
        None => Ok(num_to_bson(acc)),
    }
}

fn arith_subtract(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    match (a, b) {
        (Bson::DateTime(x), Bson::DateTime(y)) => Ok(Bson::Int64(
            x.timestamp_millis().wrapping_sub(y.timestamp_millis()),
        )),
        (Bson::DateTime(x), n) if num_of(n).is_some() => {
            let delta = match num_of(n).unwrap() {
                Num::I(i) => i as i64,
                Num::L(l) => l,
                n => num_f64(n).round() as i64,
            };
            Ok(Bson::DateTime(DateTime::from_millis(
                x.timestamp_millis().wrapping_sub(delta),
            )))
        }
        _ => match (num_of(a), num_of(b)) {
            (Some(x), Some(y)) => Ok(num_to_bson(num_sub(x, y))),
            _ => Err(err(
                ErrorCode::SubtractInvalidTypes,
                format!("can't $subtract {} from {}", type_name(b), type_name(a)),
            )),
        },
    }
}

fn arith_multiply(v: &[Bson]) -> MongoResult<Bson> {
    let mut acc = Num::I(1);
    let mut saw_null = false;
    for x in v {
        if is_nullish(x) {
            saw_null = true;
            continue;
        }
        match num_of(x) {
            Some(n) => acc = num_mul(acc, n),
            None => {
                return Err(err(
                    ErrorCode::MultiplyNotNumeric,
                    format!(
                        "$multiply only supports numeric types, not {}",
                        type_name(x)
                    ),
                ))
            }
        }
    }
    Ok(if saw_null {
        Bson::Null
    } else {
        num_to_bson(acc)
    })
}

fn arith_divide(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let (Some(x), Some(y)) = (num_of(a), num_of(b)) else {
        return Err(err(
            ErrorCode::DivideNotNumeric,
            format!(
                "$divide only supports numeric types, not {} and {}",
                type_name(a),
                type_name(b)
            ),
        ));
    };
    let zero = match y {
        Num::M(d) => d.is_zero(),
        n => num_f64(n) == 0.0,
    };
    if zero {
        return Err(MongoError::bad_value("can't $divide by zero"));
    }
    Ok(match (x, y) {
        (Num::M(_), _) | (_, Num::M(_)) => Bson::Decimal128(num_dec(x).div(&num_dec(y)).to_d128()),
        _ => Bson::Double(num_f64(x) / num_f64(y)),
    })
}

fn arith_mod(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let (Some(x), Some(y)) = (num_of(a), num_of(b)) else {
        return Err(err(
            ErrorCode::ModNotNumeric,
            format!(
                "$mod only supports numeric types, not {} and {}",
                type_name(a),
                type_name(b)
            ),
        ));
    };
    let zero = match y {
        Num::M(d) => d.is_zero(),
        n => num_f64(n) == 0.0,
    };
    if zero && !matches!((x, y), (Num::D(_), _) | (_, Num::D(_))) {
        return Err(err(ErrorCode::ModByZero, "can't $mod by zero"));
    }
    Ok(match (x, y) {
        (Num::M(_), _) | (_, Num::M(_)) => Bson::Decimal128(num_dec(x).rem(&num_dec(y)).to_d128()),
        (Num::D(_), _) | (_, Num::D(_)) => Bson::Double(num_f64(x) % num_f64(y)),
        (Num::I(p), Num::I(q)) => Bson::Int32(p.checked_rem(q).unwrap_or(0)),
        _ => Bson::Int64(
            num_i64(x)
                .unwrap()
                .checked_rem(num_i64(y).unwrap())
                .unwrap_or(0),
        ),
    })
}

fn unary_math(op: Op, v: &Bson) -> MongoResult<Bson> {
    if is_nullish(v) {
        return Ok(Bson::Null);
    }
    let name = op.name();
    let Some(n) = num_of(v) else {
        return Err(err(
            ErrorCode::MathNotNumeric,
            format!("{name} only supports numeric types, not {}", type_name(v)),
        ));
    };
    let is_nan = matches!(n, Num::D(d) if d.is_nan()) || matches!(n, Num::M(d) if d.is_nan());
    if is_nan && !matches!(op, Op::Abs | Op::Ceil | Op::Floor) {
        return Ok(num_to_bson(n));
    }
    let positive_check = |code: ErrorCode, allow_zero: bool| -> MongoResult<()> {
        let f = num_f64(n);
        if f < 0.0 || (!allow_zero && f == 0.0) {
            let what = if allow_zero {
                "greater than or equal to 0"
            } else {
                "a positive number"
            };
            return Err(err(
                code,
                format!(
                    "{name}'s argument must be {what}, but is {}",
                    num_to_bson(n)
                ),
            ));
        }
        Ok(())
    };
    Ok(match op {
        Op::Abs => match n {
            Num::I(i) => match i.checked_abs() {
                Some(a) => Bson::Int32(a),
                None => Bson::Int64((i as i64).abs()),
            },
            Num::L(l) => match l.checked_abs() {
                Some(a) => Bson::Int64(a),
                None => {
                    return Err(err(
                        ErrorCode::AbsOfLongMin,
                        "can't take $abs of long long min",
                    ))
                }
            },
            Num::D(d) => Bson::Double(d.abs()),
            Num::M(d) => Bson::Decimal128(d.abs().to_d128()),
        },
        Op::Ceil | Op::Floor => match n {
            Num::I(_) | Num::L(_) => num_to_bson(n),
            Num::D(d) => Bson::Double(if op == Op::Ceil { d.ceil() } else { d.floor() }),
            Num::M(d) => {
                let mode = if op == Op::Ceil {
                    Rounding::Ceil
                } else {
                    Rounding::Floor
                };
                Bson::Decimal128(d.round(0, mode).to_d128())
            }
        },
        Op::Sqrt => {
            positive_check(ErrorCode::SqrtNegative, true)?;
            float_result(n, num_f64(n).sqrt())
        }
        Op::Exp => float_result(n, num_f64(n).exp()),
        Op::Ln => {
            positive_check(ErrorCode::LnNotPositive, false)?;
            float_result(n, num_f64(n).ln())
        }
        Op::Log10 => {
            positive_check(ErrorCode::Log10NotPositive, false)?;
            float_result(n, num_f64(n).log10())
        }
        _ => unreachable!(),
    })
}

fn float_result(input: Num, f: f64) -> Bson {
    match input {
        Num::M(_) => Bson::Decimal128(Dec::from_f64(f).to_d128()),
        _ => Bson::Double(f),
    }
}

fn arith_log(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let Some(x) = num_of(a) else {
        return Err(err(
            ErrorCode::LogArgumentNotNumeric,
            format!("$log's argument must be numeric, not {}", type_name(a)),
        ));
    };
    let Some(base) = num_of(b) else {
        return Err(err(
            ErrorCode::LogBaseNotNumeric,
            format!("$log's base must be numeric, not {}", type_name(b)),
        ));
    };
    let (xf, bf) = (num_f64(x), num_f64(base));
    if xf <= 0.0 {
        return Err(err(
            ErrorCode::LogArgumentNotPositive,
            format!(
                "$log's argument must be a positive number, but is {}",
                num_to_bson(x)
            ),
        ));
    }
    if bf <= 0.0 || bf == 1.0 {
        return Err(err(
            ErrorCode::LogBaseInvalid,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                num_to_bson(base)
            ),
        ));
    }
    let r = xf.ln() / bf.ln();
    Ok(match (x, base) {
        (Num::M(_), _) | (_, Num::M(_)) => Bson::Decimal128(Dec::from_f64(r).to_d128()),
        _ => Bson::Double(r),
    })
}

fn arith_pow(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let Some(x) = num_of(a) else {
        return Err(err(
            ErrorCode::PowBaseNotNumeric,
            format!("$pow's base must be numeric, not {}", type_name(a)),
        ));
    };
    let Some(y) = num_of(b) else {
        return Err(err(
            ErrorCode::PowExponentNotNumeric,
            format!("$pow's exponent must be numeric, not {}", type_name(b)),
        ));
    };
    let (xf, yf) = (num_f64(x), num_f64(y));
    if xf == 0.0 && yf < 0.0 {
        return Err(err(
            ErrorCode::PowZeroToNegative,
            "$pow cannot take a base of 0 and a negative exponent",
        ));
    }
    match (x, y) {
        (Num::M(_), _) | (_, Num::M(_)) => {
            Ok(Bson::Decimal128(Dec::from_f64(xf.powf(yf)).to_d128()))
        }
        (Num::D(_), _) | (_, Num::D(_)) => Ok(Bson::Double(xf.powf(yf))),
        _ => {
            let (base, exp) = (num_i64(x).unwrap(), num_i64(y).unwrap());
            let both_int = matches!((x, y), (Num::I(_), Num::I(_)));
            if exp < 0 {
                return Ok(match base {
                    1 => num_to_bson(if both_int { Num::I(1) } else { Num::L(1) }),
                    -1 => {
                        let r = if exp % 2 == 0 { 1 } else { -1 };
                        num_to_bson(if both_int {
                            Num::I(r)
                        } else {
                            Num::L(r as i64)
                        })
                    }
                    _ => Bson::Double(xf.powf(yf)),
                });
            }
            let r = u32::try_from(exp).ok().and_then(|e| base.checked_pow(e));
            Ok(match r {
                Some(r) if both_int && i32::try_from(r).is_ok() => Bson::Int32(r as i32),
                Some(r) => Bson::Int64(r),
                None => Bson::Double(xf.powf(yf)),
            })
        }
    }
}

fn round_trunc(op: Op, v: &Bson, place: Option<&Bson>) -> MongoResult<Bson> {
    let name = op.name();
    if is_nullish(v) || place.is_some_and(is_nullish) {
        return Ok(Bson::Null);
    }
    let place = match place {
        None => 0,
        Some(p) => match as_int_exact(p) {
            Some(p) if (-20..=100).contains(&p) => p as i32,
            _ => {
                return Err(err(
                    ErrorCode::RoundPrecisionOutOfRange,
                    format!(
                        "cannot apply {name} with precision value {p} value must be in [-20, 100]"
                    ),
                ))
            }
        },
    };
    let Some(n) = num_of(v) else {
        return Err(err(
            ErrorCode::RoundNotNumeric,
            format!("{name} only supports numeric types, not {}", type_name(v)),
        ));
    };
    let mode = if op == Op::Round {
        Rounding::HalfEven
    } else {
        Rounding::Trunc
    };
    Ok(match n {
        Num::I(_) | Num::L(_) if place >= 0 => num_to_bson(n),
        Num::I(i) => {
            let r = Dec::from_i64(i as i64)
                .round(place, mode)
                .to_i64_exact()
                .unwrap_or(0);
            match i32::try_from(r) {
                Ok(r) => Bson::Int32(r),
                Err(_) => Bson::Int64(r),
            }
        }
        Num::L(l) => match Dec::from_i64(l).round(place, mode).to_i64_exact() {
            Some(r) => Bson::Int64(r),
            None => {
                return Err(err(
                    ErrorCode::RoundDecimalConversion,
                    format!("invalid conversion from Decimal128 result in {name}"),
                ))
            }
        },
        Num::D(d) => {
            if !d.is_finite() {
                Bson::Double(d)
            } else {
                Bson::Double(Dec::from_f64(d).round(place, mode).to_f64())
            }
        }
        Num::M(d) => Bson::Decimal128(d.round(place, mode).to_d128()),
    })
}

/// `$divide` on two evaluated values (shared with `$avg` on decimals).
pub(crate) fn eval_divide(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    arith_divide(a, b)
}
/// Evaluates a positional arithmetic operator on its evaluated arguments.
pub(super) fn eval(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    match op {
        Add => arith_add(&v),
        Subtract => arith_subtract(&v[0], &v[1]),
        Multiply => arith_multiply(&v),
        Divide => arith_divide(&v[0], &v[1]),
        Mod => arith_mod(&v[0], &v[1]),
        Abs | Ceil | Floor | Sqrt | Exp | Ln | Log10 => unary_math(op, &v[0]),
        Round | Trunc => round_trunc(op, &v[0], v.get(1)),
        Pow => arith_pow(&v[0], &v[1]),
        Log => arith_log(&v[0], &v[1]),
        Rand => Ok(Bson::Double(rand::random::<f64>())),
        _ => Err(misrouted(op)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn arithmetic() {
        check(vec![
            (bson!({"$add": [1, 2]}), bson!(3)),
            (bson!({"$add": [1, 2i64]}), bson!(3i64)),
            (bson!({"$add": [1, 2.5]}), bson!(3.5)),
            (
                bson!({"$add": ["$big", 1]}),
                Bson::Int64(i32::MAX as i64 + 1),
            ),
            (
                bson!({"$add": [i64::MAX, 1i64]}),
                Bson::Double(i64::MAX as f64 + 1.0),
            ),
            (bson!({"$add": [1, "$n"]}), Bson::Null),
            (bson!({"$add": [1, "$missing"]}), Bson::Null),
            (
                bson!({"$add": ["$d", 1000]}),
                Bson::DateTime(DateTime::from_millis(1_700_000_001_123)),
            ),
            (bson!({"$add": [dec("1.5"), 1]}), dec("2.5")),
            (bson!({"$subtract": [5, 7]}), bson!(-2)),
            (
                bson!({"$subtract": ["$d", DateTime::from_millis(1_700_000_000_000)]}),
                bson!(123i64),
            ),
            (
                bson!({"$subtract": ["$d", 123]}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_000)),
            ),
            (bson!({"$multiply": [3, 4, 0.5]}), bson!(6.0)),
            (
                bson!({"$multiply": ["$big", 2]}),
                Bson::Int64(i32::MAX as i64 * 2),
            ),
            (bson!({"$divide": [7, 2]}), bson!(3.5)),
            (
                bson!({"$divide": [dec("1"), dec("3")]}),
                dec("0.3333333333333333333333333333333333"),
            ),
            (bson!({"$divide": [dec("10"), 4]}), dec("2.5")),
            (bson!({"$mod": [7, 3]}), bson!(1)),
            (bson!({"$mod": [-7, 3]}), bson!(-1)),
            (bson!({"$mod": [7.5, 2]}), bson!(1.5)),
            (bson!({"$mod": [7i64, 3]}), bson!(1i64)),
            (bson!({"$abs": -3}), bson!(3)),
            (bson!({"$abs": i32::MIN}), Bson::Int64(2147483648)),
            (bson!({"$abs": null}), Bson::Null),
            (bson!({"$ceil": 1.2}), bson!(2.0)),
            (bson!({"$floor": -1.2}), bson!(-2.0)),
            (bson!({"$floor": 3}), bson!(3)),
            (bson!({"$ceil": dec("1.2")}), dec("2")),
            (bson!({"$round": 2.5}), bson!(2.0)),
            (bson!({"$round": 3.5}), bson!(4.0)),
            (bson!({"$round": [1.2345, 2]}), bson!(1.23)),
            (bson!({"$round": [1234, -2]}), bson!(1200)),
            (bson!({"$round": [dec("1.25"), 1]}), dec("1.2")),
            (bson!({"$trunc": [-1.789, 1]}), bson!(-1.7)),
            (bson!({"$trunc": 7.9}), bson!(7.0)),
            (bson!({"$sqrt": 16}), bson!(4.0)),
            (bson!({"$pow": [2, 10]}), bson!(1024)),
            (bson!({"$pow": [2, 40]}), bson!(1099511627776i64)),
            (bson!({"$pow": [2, -1]}), bson!(0.5)),
            (bson!({"$pow": [2.0, 2]}), bson!(4.0)),
            (bson!({"$exp": 0}), bson!(1.0)),
            (bson!({"$ln": 1}), bson!(0.0)),
            (bson!({"$log10": 1000}), bson!(3.0)),
            (bson!({"$log": [8, 2]}), bson!(3.0)),
        ]);
        check_err(vec![
            (bson!({"$divide": [1, 0]}), 2),
            (bson!({"$divide": [1, 0.0]}), 2),
            (bson!({"$divide": ["x", 1]}), 16609),
            (bson!({"$mod": [1, 0]}), 16610),
            (bson!({"$add": ["x", 1]}), 16554),
            (bson!({"$add": ["$d", "$d"]}), 16612),
            (bson!({"$subtract": [1, "$d"]}), 16556),
            (bson!({"$multiply": [1, "x"]}), 16555),
            (bson!({"$subtract": [1]}), 16020),
            (bson!({"$abs": i64::MIN}), 28680),
            (bson!({"$sqrt": -1}), 28714),
            (bson!({"$ln": 0}), 28766),
            (bson!({"$log10": -1}), 28761),
            (bson!({"$log": [8, 1]}), 28759),
            (bson!({"$pow": [0, -1]}), 28764),
            (bson!({"$round": [1, 101]}), 51083),
            (bson!({"$abs": "x"}), 28765),
        ]);
        assert_eq!(
            ev(bson!({"$divide": [1, 0]})).unwrap_err().message,
            "can't $divide by zero"
        );
    }
}
