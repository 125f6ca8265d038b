//! Number operators: `$inc` and `$mul` under mongod's SafeNum promotion rules, and `$bit`.

use bson::{Bson, Decimal128};

use crate::expr::{type_name, Dec};
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

#[derive(Debug, Clone, Copy)]
pub(super) enum Num {
    I32(i32),
    I64(i64),
    F64(f64),
    Dec(Decimal128),
}

impl Num {
    pub(super) fn of(v: &Bson) -> Option<Num> {
        match v {
            Bson::Int32(i) => Some(Num::I32(*i)),
            Bson::Int64(i) => Some(Num::I64(*i)),
            Bson::Double(d) => Some(Num::F64(*d)),
            Bson::Decimal128(d) => Some(Num::Dec(*d)),
            _ => None,
        }
    }

    pub(super) fn zero_like(self) -> Bson {
        match self {
            Num::I32(_) => Bson::Int32(0),
            Num::I64(_) => Bson::Int64(0),
            Num::F64(_) => Bson::Double(0.0),
            Num::Dec(_) => Bson::Decimal128("0".parse().expect("valid decimal")),
        }
    }

    pub(super) fn to_f64(self) -> Option<f64> {
        Some(match self {
            Num::I32(i) => i as f64,
            Num::I64(i) => i as f64,
            Num::F64(d) => d,
            Num::Dec(d) => d.to_string().parse().ok()?,
        })
    }

    /// Decimal arithmetic is shared with the aggregation expressions (`crate::expr::Dec`).
    fn to_dec(self) -> Dec {
        match self {
            Num::I32(i) => Dec::from_i64(i64::from(i)),
            Num::I64(i) => Dec::from_i64(i),
            Num::F64(d) => Dec::from_f64(d),
            Num::Dec(d) => Dec::from_d128(&d),
        }
    }

    /// None when a 64-bit integer result overflows (mongod reports an error there).
    pub(super) fn add(self, o: Num) -> Option<Bson> {
        use Num::*;
        Some(match (self, o) {
            (Dec(_), _) | (_, Dec(_)) => Bson::Decimal128(self.to_dec().add(&o.to_dec()).to_d128()),
            (F64(_), _) | (_, F64(_)) => Bson::Double(self.to_f64()? + o.to_f64()?),
            (I32(a), I32(b)) => match a.checked_add(b) {
                Some(r) => Bson::Int32(r),
                None => Bson::Int64(a as i64 + b as i64),
            },
            (a, b) => Bson::Int64(a.as_i64()?.checked_add(b.as_i64()?)?),
        })
    }

    pub(super) fn mul(self, o: Num) -> Option<Bson> {
        use Num::*;
        Some(match (self, o) {
            (Dec(_), _) | (_, Dec(_)) => Bson::Decimal128(self.to_dec().mul(&o.to_dec()).to_d128()),
            (F64(_), _) | (_, F64(_)) => Bson::Double(self.to_f64()? * o.to_f64()?),
            (I32(a), I32(b)) => match a.checked_mul(b) {
                Some(r) => Bson::Int32(r),
                None => Bson::Int64(a as i64 * b as i64),
            },
            (a, b) => Bson::Int64(a.as_i64()?.checked_mul(b.as_i64()?)?),
        })
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            Num::I32(i) => Some(i as i64),
            Num::I64(i) => Some(i),
            _ => None,
        }
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
            let (x, y) = (Num::of(&dec(a)).unwrap(), Num::of(&dec(b)).unwrap());
            assert_eq!(x.add(y).unwrap(), dec(sum), "{a} + {b}");
            assert_eq!(x.mul(y).unwrap(), dec(prod), "{a} * {b}");
        }
        // A double joins decimal arithmetic rounded to 15 significant digits.
        assert_eq!(
            Num::of(&dec("1")).unwrap().add(Num::F64(0.1)).unwrap(),
            dec("1.100000000000000")
        );
    }
}
