//! MongoDB's total order over BSON values (owner: query-core helper).
//!
//! The order follows mongo's `canonicalizeBSONType` + `compareElementValues`:
//! MinKey < undefined < null < numbers < string/symbol < object < array < binData <
//! ObjectId < bool < date < timestamp < regex < dbPointer < code < codeWithScope < MaxKey.
//!
//! Numbers of every type are compared by value. Int32/Int64/Double compare exactly
//! (an Int64 that a double cannot represent still orders correctly against doubles).
//! Decimal128 is compared through a numeric key: integral decimals that fit an i64 are
//! exact, every other decimal is approximated by the nearest f64 (parsed from its
//! decimal digits). Two decimals that differ only beyond f64 precision therefore compare
//! equal; this keeps the order total and transitive and identical to the keystring
//! encoding in [`crate::keystring`].
// MongoError is the shared, deliberately rich error type; boxing it is a crate-wide decision.
use std::cmp::Ordering;

use bson::{Bson, Decimal128, Document};

/// Canonical type ranks (mongo's `canonicalizeBSONType`, shifted so MinKey is 0).
pub mod rank {
    pub const MIN_KEY: u8 = 0;
    pub const UNDEFINED: u8 = 1;
    pub const NULL: u8 = 5;
    pub const NUMBER: u8 = 10;
    pub const STRING: u8 = 15;
    pub const DOCUMENT: u8 = 20;
    pub const ARRAY: u8 = 25;
    pub const BINARY: u8 = 30;
    pub const OBJECT_ID: u8 = 35;
    pub const BOOLEAN: u8 = 40;
    pub const DATE: u8 = 45;
    pub const TIMESTAMP: u8 = 47;
    pub const REGEX: u8 = 50;
    pub const DB_POINTER: u8 = 55;
    pub const CODE: u8 = 60;
    pub const CODE_W_SCOPE: u8 = 65;
    pub const MAX_KEY: u8 = 127;
}

/// The canonical type rank of a value: values of different ranks order by rank alone.
/// All numeric types share one rank, as do string and symbol.
pub fn type_rank(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => rank::MIN_KEY,
        Bson::Undefined => rank::UNDEFINED,
        Bson::Null => rank::NULL,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => rank::NUMBER,
        Bson::String(_) | Bson::Symbol(_) => rank::STRING,
        Bson::Document(_) => rank::DOCUMENT,
        Bson::Array(_) => rank::ARRAY,
        Bson::Binary(_) => rank::BINARY,
        Bson::ObjectId(_) => rank::OBJECT_ID,
        Bson::Boolean(_) => rank::BOOLEAN,
        Bson::DateTime(_) => rank::DATE,
        Bson::Timestamp(_) => rank::TIMESTAMP,
        Bson::RegularExpression(_) => rank::REGEX,
        Bson::DbPointer(_) => rank::DB_POINTER,
        Bson::JavaScriptCode(_) => rank::CODE,
        Bson::JavaScriptCodeWithScope(_) => rank::CODE_W_SCOPE,
        Bson::MaxKey => rank::MAX_KEY,
    }
}

/// True for Int32, Int64, Double and Decimal128.
pub fn is_number(v: &Bson) -> bool {
    type_rank(v) == rank::NUMBER
}

/// A comparable numeric key: the value is exactly `approx + residual`, where `approx` is
/// the nearest f64 (never NaN, never -0.0) and `residual` corrects Int64 values that a
/// double cannot represent. Ordering by `(approx, residual)` equals numeric ordering.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NumKey {
    /// NaN (double or decimal); smaller than every other number, equal to itself.
    NaN,
    Val {
        approx: f64,
        residual: i64,
    },
}

impl NumKey {
    pub fn from_f64(d: f64) -> NumKey {
        if d.is_nan() {
            NumKey::NaN
        } else if d == 0.0 {
            NumKey::Val {
                approx: 0.0,
                residual: 0,
            }
        } else {
            NumKey::Val {
                approx: d,
                residual: 0,
            }
        }
    }

    pub fn from_i64(i: i64) -> NumKey {
        let approx = i as f64;
        let residual = (i as i128 - approx as i128) as i64;
        NumKey::Val {
            approx: if approx == 0.0 { 0.0 } else { approx },
            residual,
        }
    }

    pub fn total_cmp(&self, other: &NumKey) -> Ordering {
        match (self, other) {
            (NumKey::NaN, NumKey::NaN) => Ordering::Equal,
            (NumKey::NaN, _) => Ordering::Less,
            (_, NumKey::NaN) => Ordering::Greater,
            (
                NumKey::Val {
                    approx: a,
                    residual: ra,
                },
                NumKey::Val {
                    approx: b,
                    residual: rb,
                },
            ) => a.partial_cmp(b).unwrap_or(Ordering::Equal).then(ra.cmp(rb)),
        }
    }

    /// The value as an f64 (residual folded in, so possibly rounded).
    pub fn to_f64(&self) -> f64 {
        match self {
            NumKey::NaN => f64::NAN,
            NumKey::Val { approx, residual } => approx + *residual as f64,
        }
    }
}

/// The numeric key of a number, `None` for non-numbers.
pub fn num_key(v: &Bson) -> Option<NumKey> {
    match v {
        Bson::Int32(i) => Some(NumKey::from_i64(*i as i64)),
        Bson::Int64(i) => Some(NumKey::from_i64(*i)),
        Bson::Double(d) => Some(NumKey::from_f64(*d)),
        Bson::Decimal128(d) => Some(decimal_key(d)),
        _ => None,
    }
}

/// The value of a number as f64 (Int64 and Decimal128 may round). `None` for non-numbers.
pub fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(*i as f64),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        Bson::Decimal128(d) => Some(decimal_to_f64(d)),
        _ => None,
    }
}

/// The value of a number as i64 if it is integral and in range (doubles like 3.0 count).
pub fn as_i64_exact(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) => {
            if d.fract() == 0.0 && *d >= -9.223_372_036_854_776e18 && *d < 9.223_372_036_854_776e18
            {
                Some(*d as i64)
            } else {
                None
            }
        }
        Bson::Decimal128(d) => match decode_decimal(d) {
            DecimalParts::Finite { neg, coef, exp } => decimal_integral_i64(neg, coef, exp),
            _ => None,
        },
        _ => None,
    }
}

/// The decoded fields of a Decimal128 (IEEE 754-2008 BID encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalParts {
    NaN,
    Infinity {
        neg: bool,
    },
    /// value = (-1)^neg * coef * 10^exp
    Finite {
        neg: bool,
        coef: u128,
        exp: i32,
    },
}

/// Decodes a Decimal128's sign, coefficient and exponent.
pub fn decode_decimal(d: &Decimal128) -> DecimalParts {
    let bits = u128::from_le_bytes(d.bytes());
    let neg = bits >> 127 == 1;
    let comb = (bits >> 122) & 0x1f; // the 5 bits after the sign
    if comb == 0x1f {
        return DecimalParts::NaN;
    }
    if comb == 0x1e {
        return DecimalParts::Infinity { neg };
    }
    let (exp_bits, coef) = if (bits >> 125) & 0b11 == 0b11 {
        // Coefficient would be >= 2^113 > 10^34: non-canonical, treated as zero.
        (((bits >> 111) & 0x3fff) as i32, 0u128)
    } else {
        (((bits >> 113) & 0x3fff) as i32, bits & ((1u128 << 113) - 1))
    };
    let coef = if coef >= 10u128.pow(34) { 0 } else { coef };
    DecimalParts::Finite {
        neg,
        coef,
        exp: exp_bits - 6176,
    }
}

// `is_multiple_of` needs Rust 1.87; the workspace MSRV is 1.85.
#[allow(clippy::manual_is_multiple_of)]
fn decimal_integral_i64(neg: bool, coef: u128, exp: i32) -> Option<i64> {
    let mut c = coef;
    if exp >= 0 {
        if exp > 38 && c != 0 {
            return None;
        }
        for _ in 0..exp.min(39) {
            c = c.checked_mul(10)?;
            if c > (1u128 << 64) {
                return None;
            }
        }
    } else {
        for _ in 0..(-exp) {
            if c == 0 {
                break;
            }
            if c % 10 > 0 {
                return None;
            }
            c /= 10;
        }
    }
    let v = if neg { -(c as i128) } else { c as i128 };
    i64::try_from(v).ok()
}

/// The nearest f64 to a Decimal128 (correctly rounded from its decimal digits).
pub fn decimal_to_f64(d: &Decimal128) -> f64 {
    match decode_decimal(d) {
        DecimalParts::NaN => f64::NAN,
        DecimalParts::Infinity { neg } => {
            if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }
        DecimalParts::Finite { neg, coef, exp } => {
            let s = format!("{}{}e{}", if neg { "-" } else { "" }, coef, exp);
            s.parse::<f64>().unwrap_or(f64::NAN)
        }
    }
}

fn decimal_key(d: &Decimal128) -> NumKey {
    if let DecimalParts::Finite { neg, coef, exp } = decode_decimal(d) {
        if let Some(i) = decimal_integral_i64(neg, coef, exp) {
            return NumKey::from_i64(i);
        }
    }
    NumKey::from_f64(decimal_to_f64(d))
}

/// Compares two numbers by value; `None` unless both are numbers.
pub fn compare_numbers(a: &Bson, b: &Bson) -> Option<Ordering> {
    Some(num_key(a)?.total_cmp(&num_key(b)?))
}

/// Compares two values in MongoDB's cross-type order: MinKey < null/undefined < numbers
/// (int, long, double, decimal compared numerically) < string/symbol < object < array <
/// binData < ObjectId < bool < date < timestamp < regex < MaxKey.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let (ra, rb) = (type_rank(a), type_rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            x.as_bytes().cmp(y.as_bytes())
        }
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => compare_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_bytes()
            .cmp(y.pattern.as_bytes())
            .then_with(|| x.options.as_bytes().cmp(y.options.as_bytes())),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .as_bytes()
            .cmp(y.code.as_bytes())
            .then_with(|| compare_documents(&x.scope, &y.scope)),
        (Bson::DbPointer(_), Bson::DbPointer(_)) => {
            let (x, y) = (db_pointer_parts(a), db_pointer_parts(b));
            x.0.len()
                .cmp(&y.0.len())
                .then_with(|| x.0.cmp(&y.0))
                .then_with(|| x.1.cmp(&y.1))
        }
        _ => {
            if ra == rank::NUMBER {
                compare_numbers(a, b).unwrap_or(Ordering::Equal)
            } else {
                // MinKey, MaxKey, null, undefined: one value per rank.
                Ordering::Equal
            }
        }
    }
}

/// (namespace, ObjectId hex) of a DBPointer (its fields are private in the bson crate).
pub(crate) fn db_pointer_parts(v: &Bson) -> (String, String) {
    let json = v.clone().into_relaxed_extjson();
    let inner = &json["$dbPointer"];
    let ns = inner["$ref"].as_str().unwrap_or_default().to_string();
    let id = inner["$id"]["$oid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (ns, id)
}

/// Field-by-field document comparison: canonical type, then field name, then value;
/// a document that is a prefix of the other is smaller.
pub fn compare_documents(a: &Document, b: &Document) -> Ordering {
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = type_rank(va)
                    .cmp(&type_rank(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| compare(va, vb));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// Element-wise array comparison; a prefix is smaller.
pub fn compare_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    for (x, y) in a.iter().zip(b.iter()) {
        let o = compare(x, y);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// Equality as `$eq` sees it (1 == 1.0, field order matters inside documents).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare(a, b) == Ordering::Equal
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, DateTime, Regex, Timestamp};
    use std::str::FromStr;

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).unwrap())
    }

    /// A list of values in strictly increasing order.
    pub(crate) fn ascending_values() -> Vec<Bson> {
        vec![
            Bson::MinKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Double(f64::NEG_INFINITY),
            Bson::Int64(i64::MIN),
            Bson::Double(-1e10),
            Bson::Int32(-5),
            dec("-4.5"),
            Bson::Double(-0.5),
            Bson::Int32(0),
            Bson::Double(0.25),
            Bson::Int32(1),
            dec("1.5"),
            Bson::Int64(2),
            Bson::Int64(9_007_199_254_740_992),
            Bson::Int64(9_007_199_254_740_993),
            Bson::Double(9_007_199_254_740_994.0),
            Bson::Int64(i64::MAX),
            Bson::Double(1e300),
            Bson::Double(f64::INFINITY),
            Bson::String(String::new()),
            Bson::String("a".into()),
            Bson::String("a\u{0}".into()),
            Bson::String("a\u{1}".into()),
            Bson::String("ab".into()),
            Bson::String("b".into()),
            Bson::String("é".into()),
            Bson::Document(doc! {}),
            Bson::Document(doc! {"a": Bson::Null}),
            Bson::Document(doc! {"a": 1}),
            Bson::Document(doc! {"a": 1, "b": 1}),
            Bson::Document(doc! {"a": 2}),
            Bson::Document(doc! {"b": 1}),
            Bson::Document(doc! {"a": "x"}),
            Bson::Array(vec![]),
            Bson::Array(vec![Bson::Null]),
            Bson::Array(vec![1.into()]),
            Bson::Array(vec![1.into(), 1.into()]),
            Bson::Array(vec![2.into()]),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![9],
            }),
            Bson::Binary(Binary {
                subtype: BinarySubtype::UserDefined(0x80),
                bytes: vec![1],
            }),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![0, 0],
            }),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::ObjectId(ObjectId::from_bytes([1; 12])),
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(-1)),
            Bson::DateTime(DateTime::from_millis(5)),
            Bson::Timestamp(Timestamp {
                time: 1,
                increment: 9,
            }),
            Bson::Timestamp(Timestamp {
                time: 2,
                increment: 0,
            }),
            Bson::RegularExpression(Regex {
                pattern: "a".into(),
                options: "".into(),
            }),
            Bson::RegularExpression(Regex {
                pattern: "a".into(),
                options: "i".into(),
            }),
            Bson::RegularExpression(Regex {
                pattern: "b".into(),
                options: "".into(),
            }),
            Bson::JavaScriptCode("f()".into()),
            Bson::MaxKey,
        ]
    }

    #[test]
    fn total_order_is_strict_and_transitive() {
        let vals = ascending_values();
        for (i, a) in vals.iter().enumerate() {
            for (j, b) in vals.iter().enumerate() {
                assert_eq!(compare(a, b), i.cmp(&j), "compare({a:?}, {b:?})");
            }
        }
    }

    #[test]
    fn equal_values_across_types() {
        let eq = [
            (Bson::Int32(1), Bson::Int64(1)),
            (Bson::Int32(1), Bson::Double(1.0)),
            (Bson::Int64(1), dec("1")),
            (Bson::Double(1.0), dec("1.000")),
            (dec("100"), dec("1E+2")),
            (Bson::Double(-0.0), Bson::Int32(0)),
            (dec("-0"), Bson::Double(0.0)),
            (Bson::Double(f64::NAN), dec("NaN")),
            (Bson::Double(f64::INFINITY), dec("Infinity")),
            (Bson::Double(0.5), dec("0.5")),
            (Bson::String("x".into()), Bson::Symbol("x".into())),
            (
                Bson::Document(doc! {"a": 1}),
                Bson::Document(doc! {"a": 1.0}),
            ),
            (
                Bson::Array(vec![1.into()]),
                Bson::Array(vec![Bson::Int64(1)]),
            ),
        ];
        for (a, b) in eq {
            assert!(values_equal(&a, &b), "{a:?} == {b:?}");
            assert!(values_equal(&b, &a), "{b:?} == {a:?}");
        }
        let ne = [
            (Bson::Null, Bson::Undefined),
            (
                Bson::Document(doc! {"a": 1, "b": 2}),
                Bson::Document(doc! {"b": 2, "a": 1}),
            ),
            (Bson::Int32(0), Bson::Boolean(false)),
            (Bson::Int32(1), Bson::String("1".into())),
            (
                Bson::Int64(9_007_199_254_740_993),
                Bson::Double(9_007_199_254_740_992.0),
            ),
        ];
        for (a, b) in ne {
            assert!(!values_equal(&a, &b), "{a:?} != {b:?}");
        }
    }

    #[test]
    fn document_field_comparison_uses_type_before_name() {
        // {b: 1} < {a: "x"} because the number rank is below the string rank.
        assert_eq!(
            compare(
                &Bson::Document(doc! {"b": 1}),
                &Bson::Document(doc! {"a": "x"})
            ),
            Ordering::Less
        );
    }

    #[test]
    fn decimal_decoding() {
        let cases = [
            (
                "1",
                DecimalParts::Finite {
                    neg: false,
                    coef: 1,
                    exp: 0,
                },
            ),
            (
                "-12.5",
                DecimalParts::Finite {
                    neg: true,
                    coef: 125,
                    exp: -1,
                },
            ),
            (
                "1E+10",
                DecimalParts::Finite {
                    neg: false,
                    coef: 1,
                    exp: 10,
                },
            ),
            ("NaN", DecimalParts::NaN),
            ("-Infinity", DecimalParts::Infinity { neg: true }),
        ];
        for (s, want) in cases {
            assert_eq!(
                decode_decimal(&Decimal128::from_str(s).unwrap()),
                want,
                "{s}"
            );
        }
        assert_eq!(as_i64_exact(&dec("1.20E+1")), Some(12));
        assert_eq!(as_i64_exact(&dec("12.5")), None);
        assert_eq!(as_i64_exact(&Bson::Double(3.0)), Some(3));
        assert_eq!(as_i64_exact(&Bson::Double(3.5)), None);
        assert_eq!(decimal_to_f64(&Decimal128::from_str("0.1").unwrap()), 0.1);
    }

    #[test]
    fn int64_vs_double_is_exact() {
        let big = Bson::Int64(i64::MAX);
        assert_eq!(compare(&big, &Bson::Double(2f64.powi(63))), Ordering::Less);
        assert_eq!(
            compare(&Bson::Int64(i64::MIN), &Bson::Double(-(2f64.powi(63)))),
            Ordering::Equal
        );
        assert!(compare_numbers(&Bson::Int32(1), &Bson::String("1".into())).is_none());
    }
}
