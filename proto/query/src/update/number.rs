//! Number operators: `$inc` and `$mul` under mongod's SafeNum promotion rules, and `$bit`.

use bson::Bson;

use crate::expr::{num_add, num_mul, num_to_bson, type_name, Num};
use crate::{MongoError, MongoResult};

use super::values::{fmt_elem, fmt_value};

#[derive(Debug, Clone, Copy)]
pub(super) enum BitOp {
    And,
    Or,
    Xor,
}

pub(super) fn parse_bit(value: &Bson) -> MongoResult<Vec<(BitOp, Bson)>> {
    let Bson::Document(d) = value else {
        return Err(MongoError::bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_name(value)
        )));
    };
    if d.is_empty() {
        return Err(MongoError::bad_value(
            "You must pass in at least one bitwise operation. The format is: {$bit: {field: {and/or/xor: #}}",
        ));
    }
    let mut ops = Vec::new();
    for (k, v) in d {
        let op = match k.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            _ => {
                return Err(MongoError::bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{k}' which is an unknown operator: {{{}}}",
                    fmt_elem(k, v)
                )))
            }
        };
        if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(MongoError::bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{}}}",
                type_name(v),
                fmt_elem(k, v)
            )));
        }
        ops.push((op, v.clone()));
    }
    Ok(ops)
}

pub(super) fn apply_bit(v: &Bson, ops: &[(BitOp, Bson)]) -> Bson {
    let mut cur = v.clone();
    for (op, arg) in ops {
        cur = match (&cur, arg) {
            (Bson::Int32(a), Bson::Int32(b)) => {
                Bson::Int32(bit_op(*op, *a as i64, *b as i64) as i32)
            }
            (a, b) => {
                let a = match a {
                    Bson::Int32(i) => *i as i64,
                    Bson::Int64(i) => *i,
                    _ => 0,
                };
                let b = match b {
                    Bson::Int32(i) => *i as i64,
                    Bson::Int64(i) => *i,
                    _ => 0,
                };
                Bson::Int64(bit_op(*op, a, b))
            }
        };
    }
    cur
}

fn bit_op(op: BitOp, a: i64, b: i64) -> i64 {
    match op {
        BitOp::And => a & b,
        BitOp::Or => a | b,
        BitOp::Xor => a ^ b,
    }
}

/// What `$mul` sets a missing field to: a zero of the argument's type.
pub(super) fn zero_like(n: Num) -> Bson {
    match n {
        Num::I(_) => Bson::Int32(0),
        Num::L(_) => Bson::Int64(0),
        Num::D(_) => Bson::Double(0.0),
        Num::M(_) => Bson::Decimal128("0".parse().expect("valid decimal")),
    }
}

/// `$inc`: the sum as `$add` makes it, but None where a 64-bit integer sum overflows:
/// mongod reports an error there, `$add` a double.
pub(super) fn safe_add(a: Num, b: Num) -> Option<Bson> {
    safe(num_add(a, b), a, b)
}

/// `$mul`: the product as `$multiply` makes it, but None where a 64-bit integer product
/// overflows.
pub(super) fn safe_mul(a: Num, b: Num) -> Option<Bson> {
    safe(num_mul(a, b), a, b)
}

/// Two integers give a double only when their 64-bit result overflows.
fn safe(result: Num, a: Num, b: Num) -> Option<Bson> {
    match (result, a, b) {
        (Num::D(_), Num::I(_) | Num::L(_), Num::I(_) | Num::L(_)) => None,
        (n, _, _) => Some(num_to_bson(n)),
    }
}

/// mongod's SafeNum debug string used in overflow messages.
pub(super) fn debug_number(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => format!("(NumberInt){i}"),
        Bson::Int64(i) => format!("(NumberLong){i}"),
        Bson::Double(d) => format!("(NumberDouble){d}"),
        Bson::Decimal128(d) => format!("(NumberDecimal){d}"),
        other => fmt_value(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::num_of;

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(s.parse().unwrap())
    }

    #[test]
    fn decimal_arithmetic() {
        let cases = [
            ("1", "2", "3", "2"),
            ("0.1", "0.2", "0.3", "0.02"),
            ("-5", "3", "-2", "-15"),
            ("1E+3", "1", "1001", "1E+3"),
            (
                "9999999999999999999999999999999999",
                "1",
                "1.000000000000000000000000000000000E+34",
                "9999999999999999999999999999999999",
            ),
            ("Infinity", "1", "Infinity", "Infinity"),
            ("NaN", "1", "NaN", "NaN"),
        ];
        for (a, b, sum, prod) in cases {
            let (x, y) = (num_of(&dec(a)).unwrap(), num_of(&dec(b)).unwrap());
            assert_eq!(safe_add(x, y).unwrap(), dec(sum), "{a} + {b}");
            assert_eq!(safe_mul(x, y).unwrap(), dec(prod), "{a} * {b}");
        }
        // A double joins decimal arithmetic rounded to 15 significant digits.
        assert_eq!(
            safe_add(num_of(&dec("1")).unwrap(), Num::D(0.1)).unwrap(),
            dec("1.100000000000000")
        );
    }
}
