//! Value helpers: mongod's identity of values and its way of printing them in messages.

use bson::{Bson, Document};

/// Type and value identical, field order included (mongod's `binaryEqualValues`).
/// bson's `Document` equality ignores field order, hence this.
pub(super) fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Document(x), Bson::Document(y)) => identical_docs(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

pub(super) fn identical_docs(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
}

/// Equality for immutable-field checks: identical, or equal in MongoDB's comparison (1 == 1.0).
pub(super) fn same_value(a: &Bson, b: &Bson) -> bool {
    identical(a, b) || crate::order::values_equal(a, b)
}

/// `name: value` the way mongod's `BSONElement::toString` prints it in messages.
pub(super) fn fmt_elem(name: &str, v: &Bson) -> String {
    format!("{name}: {}", fmt_value(v))
}

pub(super) fn fmt_doc(d: &Document) -> String {
    if d.is_empty() {
        return "{}".to_owned();
    }
    let fields: Vec<String> = d.iter().map(|(k, v)| fmt_elem(k, v)).collect();
    format!("{{ {} }}", fields.join(", "))
}

pub(super) fn fmt_value(v: &Bson) -> String {
    match v {
        Bson::Double(d) => {
            if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e16 {
                format!("{d:.1}")
            } else {
                format!("{d}")
            }
        }
        Bson::String(s) => format!("\"{s}\""),
        Bson::Document(d) => fmt_doc(d),
        Bson::Array(a) => {
            if a.is_empty() {
                "[]".to_owned()
            } else {
                let items: Vec<String> = a.iter().map(fmt_value).collect();
                format!("[ {} ]", items.join(", "))
            }
        }
        Bson::ObjectId(o) => format!("ObjectId('{o}')"),
        Bson::Boolean(b) => b.to_string(),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Null => "null".to_owned(),
        Bson::Undefined => "undefined".to_owned(),
        Bson::RegularExpression(r) => format!("/{}/{}", r.pattern, r.options),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => format!("NumberDecimal(\"{d}\")"),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::MinKey => "MinKey".to_owned(),
        Bson::MaxKey => "MaxKey".to_owned(),
        other => format!("{other}"),
    }
}
