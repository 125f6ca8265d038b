//! `$sum`, `$avg`, `$min`, `$max`, `$stdDevPop` and `$stdDevSamp` as expressions over
//! their arguments (or over one array argument).

use std::cmp::Ordering;

use bson::Bson;

use crate::MongoResult;

use super::arith::{num_add, num_f64, num_of, num_to_bson, Num};
use super::decimal::Dec;
use super::eval::misrouted;
use super::ops::Op;
use super::{compare_values, is_nullish};

/// Evaluates an accumulator operator on its evaluated arguments.
pub(super) fn eval(op: Op, mut v: Vec<Bson>) -> MongoResult<Bson> {
    use Op::*;
    match op {
        Sum | Avg | Min | Max | StdDevPop | StdDevSamp => {
            let items: Vec<Bson> = if v.len() == 1 {
                match v.pop().unwrap() {
                    Bson::Array(a) => a,
                    x => vec![x],
                }
            } else {
                v
            };
            accumulate_values(op, items)
        }
        _ => Err(misrouted(op)),
    }
}

/// Folds values the way `$sum`/`$avg`/`$min`/`$max`/`$stdDev*` do over an array.
fn accumulate_values(op: Op, items: Vec<Bson>) -> MongoResult<Bson> {
    match op {
        Op::Sum => {
            let mut acc = Num::I(0);
            for x in &items {
                if let Some(n) = num_of(x) {
                    acc = num_add(acc, n);
                }
            }
            Ok(num_to_bson(acc))
        }
        Op::Avg => {
            let mut acc = Num::I(0);
            let mut count = 0i64;
            for x in &items {
                if let Some(n) = num_of(x) {
                    acc = num_add(acc, n);
                    count += 1;
                }
            }
            if count == 0 {
                return Ok(Bson::Null);
            }
            Ok(match acc {
                Num::M(d) => Bson::Decimal128(d.div(&Dec::from_i64(count)).to_d128()),
                n => Bson::Double(num_f64(n) / count as f64),
            })
        }
        Op::Min | Op::Max => {
            let mut best: Option<Bson> = None;
            for x in items {
                if is_nullish(&x) {
                    continue;
                }
                best = match best {
                    None => Some(x),
                    Some(b) => {
                        let o = compare_values(&x, &b);
                        if (op == Op::Min && o == Ordering::Less)
                            || (op == Op::Max && o == Ordering::Greater)
                        {
                            Some(x)
                        } else {
                            Some(b)
                        }
                    }
                };
            }
            Ok(best.unwrap_or(Bson::Null))
        }
        _ => {
            let xs: Vec<f64> = items.iter().filter_map(num_of).map(num_f64).collect();
            Ok(std_dev(&xs, op == Op::StdDevSamp))
        }
    }
}

/// Population or sample standard deviation; null when undefined.
pub(crate) fn std_dev(xs: &[f64], sample: bool) -> Bson {
    let n = xs.len();
    if n == 0 || (sample && n < 2) {
        return Bson::Null;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let ss: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
    let denom = if sample { (n - 1) as f64 } else { n as f64 };
    Bson::Double((ss / denom).sqrt())
}
