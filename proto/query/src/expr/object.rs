//! Object operators: `$mergeObjects`, `$getField`, `$setField`, `$unsetField`, and the
//! size operators `$bsonSize` and `$binarySize`.

use bson::{Bson, Document};

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoError, MongoResult};

use super::convert::type_name_or_missing;
use super::eval::{misrouted, Args};
use super::ops::Op;
use super::{err, is_nullish, MISSING};

/// Evaluates a positional object operator on its evaluated arguments.
pub(super) fn eval(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    match op {
        MergeObjects => {
            let mut out = Document::new();
            for (i, x) in v.into_iter().enumerate() {
                match x {
                    Bson::Document(d) => {
                        for (k, val) in d {
                            out.insert(k, val);
                        }
                    }
                    x if is_nullish(&x) => {}
                    x => {
                        return Err(err(
                            ErrorCode::MergeObjectsNotObject,
                            format!(
                                "$mergeObjects requires object inputs, but input {} is of type {}",
                                i,
                                type_name(&x)
                            ),
                        ))
                    }
                }
            }
            Ok(Bson::Document(out))
        }
        BsonSize => match &v[0] {
            Bson::Document(d) => {
                let mut buf = Vec::new();
                d.to_writer(&mut buf)
                    .map_err(|e| MongoError::internal(e.to_string()))?;
                Ok(Bson::Int32(buf.len() as i32))
            }
            x if is_nullish(x) => Ok(Bson::Null),
            x => Err(err(
                ErrorCode::BsonSizeNotDocument,
                format!(
                    "$bsonSize requires a document input, found: {}",
                    type_name(x)
                ),
            )),
        },
        BinarySize => match &v[0] {
            Bson::String(s) => Ok(Bson::Int32(s.len() as i32)),
            Bson::Binary(b) => Ok(Bson::Int32(b.bytes.len() as i32)),
            x if is_nullish(x) => Ok(Bson::Null),
            x => Err(err(
                ErrorCode::BinarySizeInvalidType,
                format!(
                    "$binarySize requires a string or BinData argument, found: {}",
                    type_name(x)
                ),
            )),
        },
        _ => Err(misrouted(op)),
    }
}

#[inline(never)]
pub(super) fn named_get_field(a: &mut Args) -> MongoResult<Bson> {
    let field = a.req(0)?;
    let Bson::String(field) = field else {
        return Err(err(
            ErrorCode::GetFieldFieldNotString,
            format!(
                "$getField requires 'field' to evaluate to type String, but got {}",
                type_name_or_missing(&field)
            ),
        ));
    };
    let input = match a.arg(1)? {
        Some(v) => v,
        None => a.cx.field(&[]),
    };
    match input {
        Bson::Document(d) => Ok(d.get(&field).cloned().unwrap_or(MISSING)),
        Bson::Undefined => Ok(MISSING),
        Bson::Null => Ok(Bson::Null),
        _ => Ok(MISSING),
    }
}

#[inline(never)]
pub(super) fn named_set_field(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let field = a.req(0)?;
    let Bson::String(field) = field else {
        return Err(err(
            ErrorCode::SetFieldFieldNotString,
            format!(
                "{name} requires 'field' to evaluate to type String, but got {}",
                type_name_or_missing(&field)
            ),
        ));
    };
    let input = a.req(1)?;
    let value = if a.op == Op::SetField {
        a.req(2)?
    } else {
        MISSING
    };
    let mut d = match input {
        Bson::Document(d) => d,
        x if is_nullish(&x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                ErrorCode::SetFieldInputNotObject,
                format!(
                    "{name} requires 'input' to evaluate to type Object, but got {}",
                    type_name(&x)
                ),
            ))
        }
    };
    if matches!(value, Bson::Undefined) {
        d.remove(&field);
    } else {
        d.insert(field, value);
    }
    Ok(Bson::Document(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn objects_and_accumulators() {
        check(vec![
            (
                bson!({"$mergeObjects": [{"a": 1, "b": 1}, "$missing", {"b": 2}]}),
                bson!({"a": 1, "b": 2}),
            ),
            (bson!({"$getField": "a"}), bson!(5)),
            (
                bson!({"$getField": {"field": "k", "input": "$nested"}}),
                bson!({"v": 42}),
            ),
            (
                bson!({"$getField": {"field": "a.b", "input": {"$literal": {"a.b": 3}}}}),
                bson!(3),
            ),
            (
                bson!({"$setField": {"field": "z", "input": {"a": 1}, "value": 2}}),
                bson!({"a": 1, "z": 2}),
            ),
            (
                bson!({"$setField": {"field": "a", "input": {"a": 1}, "value": "$$REMOVE"}}),
                bson!({}),
            ),
            (
                bson!({"$unsetField": {"field": "a", "input": {"a": 1, "b": 2}}}),
                bson!({"b": 2}),
            ),
            (bson!({"$sum": "$arr"}), bson!(6)),
            (bson!({"$sum": [1, 2.5, "x"]}), bson!(3.5)),
            (bson!({"$sum": "$missing"}), bson!(0)),
            (bson!({"$avg": "$arr"}), bson!(2.0)),
            (bson!({"$avg": [[]]}), Bson::Null),
            (bson!({"$min": "$arr"}), bson!(1)),
            (bson!({"$max": [1, "$a", null]}), bson!(5)),
            (bson!({"$stdDevPop": [[1, 3]]}), bson!(1.0)),
            (bson!({"$stdDevSamp": [[1]]}), Bson::Null),
        ]);
        check_err(vec![
            (bson!({"$mergeObjects": [1]}), 40400),
            (bson!({"$getField": {"field": 1}}), 3041704),
        ]);
    }
}
