//! Set operators, and the canonical value keys they (and `$group`) hash.

use std::collections::HashSet;

use bson::Bson;

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoResult};

use super::arith::{as_int_exact, num_f64, num_of};
use super::convert::type_name_or_missing;
use super::eval::misrouted;
use super::ops::Op;
use super::{err, is_nullish, truthy};

/// Evaluates a set operator on its evaluated arguments.
pub(super) fn eval(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    let name = op.name();
    match op {
        SetUnion | SetIntersection | SetDifference | SetEquals | SetIsSubset => set_op(op, v),
        AllElementsTrue | AnyElementTrue => match &v[0] {
            Bson::Array(a) => Ok(Bson::Boolean(if op == AllElementsTrue {
                a.iter().all(truthy)
            } else {
                a.iter().any(truthy)
            })),
            x => Err(err(
                if op == AllElementsTrue {
                    ErrorCode::AllElementsTrueNotArray
                } else {
                    ErrorCode::AnyElementTrueNotArray
                },
                format!(
                    "{name}'s argument must be an array, but is {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        _ => Err(misrouted(op)),
    }
}

/// A hashable canonical form of a value: equal values (per `$eq`, so 1 == 1.0) get equal
/// keys. Used for `$group` keys and set operators.
pub(crate) fn canonical_key(v: &Bson, out: &mut Vec<u8>) {
    match v {
        Bson::Null | Bson::Undefined => out.push(5),
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            out.push(10);
            match as_int_exact(v) {
                Some(i) => {
                    out.push(0);
                    out.extend_from_slice(&i.to_be_bytes());
                }
                None => {
                    let f = num_f64(num_of(v).unwrap());
                    let f = if f.is_nan() { f64::NAN } else { f };
                    out.push(1);
                    out.extend_from_slice(&f.to_bits().to_be_bytes());
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) => {
            out.push(15);
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Bson::Document(d) => {
            out.push(20);
            for (k, x) in d {
                out.extend_from_slice(k.as_bytes());
                out.push(0);
                canonical_key(x, out);
            }
            out.push(0xff);
        }
        Bson::Array(a) => {
            out.push(25);
            for x in a {
                canonical_key(x, out);
            }
            out.push(0xff);
        }
        other => {
            out.push(crate::order::type_rank(other));
            let s = format!("{other:?}");
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn key_of(v: &Bson) -> Vec<u8> {
    let mut k = Vec::new();
    canonical_key(v, &mut k);
    k
}

fn dedup(items: impl IntoIterator<Item = Bson>, seen: &mut HashSet<Vec<u8>>, out: &mut Vec<Bson>) {
    for x in items {
        if seen.insert(key_of(&x)) {
            out.push(x);
        }
    }
}

fn set_op(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    let name = op.name();
    match op {
        Op::SetUnion | Op::SetIntersection => {
            let mut arrays = Vec::with_capacity(v.len());
            for x in v {
                match x {
                    Bson::Array(a) => arrays.push(a),
                    x if is_nullish(&x) => return Ok(Bson::Null),
                    x => {
                        return Err(err(
                            if op == Op::SetUnion {
                                ErrorCode::SetUnionNotArray
                            } else {
                                ErrorCode::SetIntersectionNotArray
                            },
                            format!(
                            "All operands of {name} must be arrays. One argument is of type: {}",
                            type_name(&x)
                        ),
                        ))
                    }
                }
            }
            let mut out = Vec::new();
            if op == Op::SetUnion {
                let mut seen = HashSet::new();
                for a in arrays {
                    dedup(a, &mut seen, &mut out);
                }
            } else if let Some((first, rest)) = arrays.split_first() {
                let rest_keys: Vec<HashSet<Vec<u8>>> = rest
                    .iter()
                    .map(|a| a.iter().map(key_of).collect())
                    .collect();
                let mut seen = HashSet::new();
                for x in first {
                    let k = key_of(x);
                    if rest_keys.iter().all(|s| s.contains(&k)) && seen.insert(k) {
                        out.push(x.clone());
                    }
                }
            }
            Ok(Bson::Array(out))
        }
        Op::SetDifference => {
            let (a, b) = (&v[0], &v[1]);
            if is_nullish(a) || is_nullish(b) {
                return Ok(Bson::Null);
            }
            let Bson::Array(a) = a else {
                return Err(err(ErrorCode::SetDifferenceFirstNotArray, format!("both operands of $setDifference must be arrays. First argument is of type: {}", type_name(a))));
            };
            let Bson::Array(b) = b else {
                return Err(err(ErrorCode::SetDifferenceSecondNotArray, format!("both operands of $setDifference must be arrays. Second argument is of type: {}", type_name(b))));
            };
            let mut seen: HashSet<Vec<u8>> = b.iter().map(key_of).collect();
            let mut out = Vec::new();
            dedup(a.iter().cloned(), &mut seen, &mut out);
            Ok(Bson::Array(out))
        }
        Op::SetEquals => {
            let mut sets: Vec<HashSet<Vec<u8>>> = Vec::new();
            for x in &v {
                let Bson::Array(a) = x else {
                    return Err(err(
                        ErrorCode::SetEqualsNotArray,
                        format!("All operands of $setEquals must be arrays. One argument is of type: {}", type_name_or_missing(x)),
                    ));
                };
                sets.push(a.iter().map(key_of).collect());
            }
            Ok(Bson::Boolean(sets.windows(2).all(|w| w[0] == w[1])))
        }
        _ => {
            let Bson::Array(a) = &v[0] else {
                return Err(err(ErrorCode::SetIsSubsetFirstNotArray, format!("both operands of $setIsSubset must be arrays. First argument is of type: {}", type_name_or_missing(&v[0]))));
            };
            let Bson::Array(b) = &v[1] else {
                return Err(err(ErrorCode::SetIsSubsetSecondNotArray, format!("both operands of $setIsSubset must be arrays. Second argument is of type: {}", type_name_or_missing(&v[1]))));
            };
            let bs: HashSet<Vec<u8>> = b.iter().map(key_of).collect();
            Ok(Bson::Boolean(a.iter().all(|x| bs.contains(&key_of(x)))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn sets() {
        check(vec![
            (bson!({"$setUnion": [[1, 2], [2.0, 3]]}), bson!([1, 2, 3])),
            (
                bson!({"$setIntersection": [[1, 2, 3, 3], [3, 2]]}),
                bson!([2, 3]),
            ),
            (bson!({"$setDifference": [[1, 2, 3], [2]]}), bson!([1, 3])),
            (bson!({"$setEquals": [[1, 2], [2, 1, 1]]}), bson!(true)),
            (bson!({"$setEquals": [[1, 2], [2]]}), bson!(false)),
            (bson!({"$setIsSubset": [[1], [1, 2]]}), bson!(true)),
            (bson!({"$setIsSubset": [[3], [1, 2]]}), bson!(false)),
            (bson!({"$allElementsTrue": [[1, true, "x"]]}), bson!(true)),
            (bson!({"$allElementsTrue": [[1, 0]]}), bson!(false)),
            (bson!({"$anyElementTrue": [[0, null, 2]]}), bson!(true)),
            (bson!({"$anyElementTrue": [[]]}), bson!(false)),
            (bson!({"$setUnion": [[1], null]}), Bson::Null),
        ]);
        check_err(vec![
            (bson!({"$setUnion": [[1], 1]}), 17043),
            (bson!({"$setIntersection": [[1], "x"]}), 17047),
            (bson!({"$setDifference": [1, [1]]}), 17048),
            (bson!({"$setDifference": [[1], 1]}), 17049),
            (bson!({"$setEquals": [[1], 1]}), 17044),
            (bson!({"$setIsSubset": [1, [1]]}), 17046),
            (bson!({"$allElementsTrue": 1}), 17040),
        ]);
    }
}
