//! `$bucketAuto`: documents sorted by a value and split into a number of buckets of
//! about the same size.

use bson::{Bson, Document};

use super::accumulator::{AccState, Accumulator};
use super::bucket::parse_output;
use super::err;
use crate::expr::{compare_values, Expr, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct BucketAuto {
    group_by: Expr,
    buckets: usize,
    output: Vec<(String, Accumulator)>,
}

impl BucketAuto {
    pub(super) fn parse(arg: &Bson) -> MongoResult<BucketAuto> {
        let Bson::Document(d) = arg else {
            return Err(err(
                ErrorCode::BucketAutoNotObject,
                "The argument to $bucketAuto must be an object",
            ));
        };
        for k in d.keys() {
            match k.as_str() {
                "groupBy" | "buckets" | "output" => {}
                "granularity" => {
                    return Err(MongoError::new(
                        ErrorCode::NotImplemented,
                        "$bucketAuto granularity is not supported",
                    ))
                }
                _ => {
                    return Err(err(
                        ErrorCode::BucketAutoUnknownOption,
                        format!("Unrecognized option to $bucketAuto: {k}."),
                    ))
                }
            }
        }
        let (Some(g), Some(b)) = (d.get("groupBy"), d.get("buckets")) else {
            return Err(err(
                ErrorCode::BucketAutoMissingArgument,
                "$bucketAuto requires 'groupBy' and 'buckets' to be specified",
            ));
        };
        let buckets = match crate::expr::as_int_exact(b) {
            Some(n) if n > 0 && n <= i32::MAX as i64 => n as usize,
            Some(_) => {
                return Err(err(
                    ErrorCode::BucketAutoBucketsNotPositive,
                    format!(
                        "The $bucketAuto 'buckets' field must be greater than 0, but found: {b}"
                    ),
                ))
            }
            None => {
                return Err(err(
                    ErrorCode::BucketAutoBucketsNotNumeric,
                    format!(
                    "The $bucketAuto 'buckets' field must be a numeric value, but found type: {}",
                    crate::expr::type_name(b)
                ),
                ))
            }
        };
        Ok(BucketAuto {
            group_by: Expr::parse(g)?,
            buckets,
            output: parse_output(d.get("output"), "$bucketAuto")?,
        })
    }

    pub(super) fn run(&self, docs: Vec<Document>, vars: &Variables) -> MongoResult<Vec<Document>> {
        let mut keyed = Vec::with_capacity(docs.len());
        for d in docs {
            let v = match self.group_by.eval(&d, vars)? {
                Bson::Undefined => Bson::Null,
                v => v,
            };
            keyed.push((v, d));
        }
        keyed.sort_by(|a, b| compare_values(&a.0, &b.0));
        let total = keyed.len();
        if total == 0 {
            return Ok(Vec::new());
        }
        let per = total.div_ceil(self.buckets).max(1);
        let mut out = Vec::new();
        let mut i = 0;
        while i < total {
            let mut j = (i + per).min(total);
            // equal values stay in one bucket
            while j < total
                && compare_values(&keyed[j].0, &keyed[j - 1].0) == std::cmp::Ordering::Equal
            {
                j += 1;
            }
            let min = keyed[i].0.clone();
            let max = if j < total {
                keyed[j].0.clone()
            } else {
                keyed[j - 1].0.clone()
            };
            let id = Bson::Document(bson::doc! {"min": min.clone(), "max": max.clone()});
            let mut states: Vec<AccState> = self
                .output
                .iter()
                .map(|(_, a)| a.start(&id, vars))
                .collect::<MongoResult<_>>()?;
            for (_, d) in &keyed[i..j] {
                for (st, (_, acc)) in states.iter_mut().zip(&self.output) {
                    acc.add(st, d, vars)?;
                }
            }
            let mut doc = bson::doc! {"_id": id};
            for (st, (name, acc)) in states.into_iter().zip(&self.output) {
                doc.insert(name.clone(), acc.finish(st)?);
            }
            out.push(doc);
            i = j;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn even_buckets() {
        check(
            bson!([{"$bucketAuto": {"groupBy": "$v", "buckets": 2}}]),
            (1..=4).map(|i| doc! {"v": i}).collect(),
            vec![
                doc! {"_id": {"min": 1, "max": 3}, "count": 2},
                doc! {"_id": {"min": 3, "max": 4}, "count": 2},
            ],
        );
    }
}
