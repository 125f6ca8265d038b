//! Comparison (`$eq` … `$cmp`) and boolean (`$not`) operators; `$and` and `$or`
//! short-circuit in `eval.rs`.

use std::cmp::Ordering;

use bson::Bson;

use crate::MongoResult;

use super::eval::misrouted;
use super::ops::Op;
use super::{compare_values, truthy};

/// Evaluates a comparison or `$not` on its evaluated arguments.
pub(super) fn eval(op: Op, v: &[Bson]) -> MongoResult<Bson> {
    use Op::*;
    match op {
        Eq | Ne | Gt | Gte | Lt | Lte | Cmp => {
            let o = compare_values(&v[0], &v[1]);
            Ok(match op {
                Eq => Bson::Boolean(o == Ordering::Equal),
                Ne => Bson::Boolean(o != Ordering::Equal),
                Gt => Bson::Boolean(o == Ordering::Greater),
                Gte => Bson::Boolean(o != Ordering::Less),
                Lt => Bson::Boolean(o == Ordering::Less),
                Lte => Bson::Boolean(o != Ordering::Greater),
                _ => Bson::Int32(o as i32),
            })
        }
        Not => Ok(Bson::Boolean(!truthy(&v[0]))),
        _ => Err(misrouted(op)),
    }
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use crate::expr::test_support::*;

    #[test]
    fn comparison_and_boolean() {
        check(vec![
            (bson!({"$eq": [1, 1.0]}), bson!(true)),
            (bson!({"$eq": ["$missing", null]}), bson!(false)),
            (bson!({"$ne": [1, 2]}), bson!(true)),
            (bson!({"$gt": ["a", 1]}), bson!(true)),
            (bson!({"$gte": [2, 2]}), bson!(true)),
            (bson!({"$lt": [null, 0]}), bson!(true)),
            (bson!({"$lte": [3, 2]}), bson!(false)),
            (bson!({"$cmp": [1, 2]}), bson!(-1)),
            (bson!({"$cmp": ["b", "a"]}), bson!(1)),
            (bson!({"$and": [1, "x", true]}), bson!(true)),
            (bson!({"$and": [1, 0]}), bson!(false)),
            (bson!({"$and": []}), bson!(true)),
            (bson!({"$or": [null, "$missing", 0]}), bson!(false)),
            (bson!({"$or": [false, []]}), bson!(true)),
            (bson!({"$not": [0]}), bson!(true)),
            (bson!({"$not": "$t"}), bson!(false)),
            // $and short-circuits: the division by zero is never evaluated
            (bson!({"$and": [false, {"$divide": [1, 0]}]}), bson!(false)),
        ]);
        check_err(vec![(bson!({"$eq": [1]}), 16020)]);
    }
}
