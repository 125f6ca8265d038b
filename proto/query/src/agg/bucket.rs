//! `$bucket`: documents grouped into ranges between given boundaries; parsed as the
//! `$group` and `$sort` it stands for.

use bson::{Bson, Document};

use super::accumulator::Accumulator;
use super::err;
use crate::expr::compare_values;
use crate::{ErrorCode, MongoResult};

/// The `output` of `$bucket` and `$bucketAuto`: accumulators, by default a count.
pub(super) fn parse_output(
    v: Option<&Bson>,
    stage: &str,
) -> MongoResult<Vec<(String, Accumulator)>> {
    match v {
        None => Ok(vec![("count".to_string(), Accumulator::count())]),
        Some(Bson::Document(d)) => {
            let mut out = Vec::new();
            for (k, spec) in d {
                out.push((k.clone(), Accumulator::parse(k, spec)?));
            }
            Ok(out)
        }
        Some(_) => Err(err(
            ErrorCode::BucketOutputNotObject,
            format!("The $bucket 'output' field must be an object, but found type: {stage}"),
        )),
    }
}

pub(super) fn desugar(arg: &Bson) -> MongoResult<Vec<Document>> {
    let Bson::Document(d) = arg else {
        return Err(err(
            ErrorCode::BucketNotObject,
            "Argument to $bucket stage must be an object",
        ));
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "groupBy" | "boundaries" | "default" | "output") {
            return Err(err(
                ErrorCode::BucketUnknownOption,
                format!("Unrecognized option to $bucket: {k}."),
            ));
        }
    }
    let group_by = d.get("groupBy").ok_or_else(|| {
        err(
            ErrorCode::BucketMissingArgument,
            "$bucket requires 'groupBy' and 'boundaries' to be specified.",
        )
    })?;
    let ok_group = match group_by {
        Bson::String(s) => s.starts_with('$'),
        Bson::Document(_) => true,
        _ => false,
    };
    if !ok_group {
        return Err(err(
            ErrorCode::BucketGroupByInvalid,
            "The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression",
        ));
    }
    let Some(b) = d.get("boundaries") else {
        return Err(err(
            ErrorCode::BucketMissingArgument,
            "$bucket requires 'groupBy' and 'boundaries' to be specified.",
        ));
    };
    let Bson::Array(boundaries) = b else {
        return Err(err(
            ErrorCode::BucketBoundariesNotArray,
            "The $bucket 'boundaries' field must be an array",
        ));
    };
    if boundaries.len() < 2 {
        return Err(err(ErrorCode::BucketTooFewBoundaries, format!("The $bucket 'boundaries' field must have at least 2 values, but found {} value(s).", boundaries.len())));
    }
    for w in boundaries.windows(2) {
        if crate::order::type_rank(&w[0]) != crate::order::type_rank(&w[1]) {
            return Err(err(
                ErrorCode::BucketBoundariesMixedTypes,
                "All values in the the 'boundaries' option to $bucket must have the same type.",
            ));
        }
        if compare_values(&w[0], &w[1]) != std::cmp::Ordering::Less {
            return Err(err(
                ErrorCode::BucketBoundariesUnsorted,
                "The 'boundaries' option to $bucket must be sorted in ascending order.",
            ));
        }
    }
    let default = d.get("default").cloned();
    if let Some(def) = &default {
        let lo = &boundaries[0];
        let hi = boundaries.last().unwrap();
        if crate::order::type_rank(def) == crate::order::type_rank(lo)
            && compare_values(def, lo) != std::cmp::Ordering::Less
            && compare_values(def, hi) == std::cmp::Ordering::Less
        {
            return Err(err(ErrorCode::BucketDefaultInRange, "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to the highest boundary."));
        }
    }
    let bound = |v: &Bson| bson::doc! {"$literal": v.clone()};
    let branches: Vec<Bson> = boundaries
        .windows(2)
        .map(|w| {
            let case = bson::doc! {"$and": [
                {"$gte": [group_by.clone(), bound(&w[0])]},
                {"$lt": [group_by.clone(), bound(&w[1])]},
            ]};
            Bson::Document(bson::doc! {"case": case, "then": bound(&w[0])})
        })
        .collect();
    let mut switch = bson::doc! {"branches": branches};
    if let Some(def) = &default {
        switch.insert("default", bound(def));
    }
    // Checked as `$bucket` does, with its error codes; the `$group` then holds the same.
    parse_output(d.get("output"), "$bucket")?;
    let mut group = bson::doc! {"_id": {"$switch": switch}};
    match d.get("output") {
        Some(Bson::Document(output)) if output.contains_key("_id") => {
            // What the `$group` it stands for says: its spec would name `_id` twice.
            return Err(err(
                ErrorCode::GroupIdSpecifiedTwice,
                "a group's _id may only be specified once",
            ));
        }
        Some(Bson::Document(output)) => group.extend(output.clone()),
        _ => {
            group.insert("count", bson::doc! {"$sum": 1});
        }
    }
    Ok(vec![
        bson::doc! {"$group": group},
        bson::doc! {"$sort": {"_id": 1}},
    ])
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (
                bson!([{"$bucket": {"groupBy": "$a", "boundaries": [0, 1], "output": {"_id": {"$sum": 1}}}}]),
                15948,
            ),
            (
                bson!([{"$bucket": {"groupBy": "$price", "boundaries": [10, 5]}}]),
                40194,
            ),
            (
                bson!([{"$bucket": {"groupBy": "$price", "boundaries": [1]}}]),
                40192,
            ),
            (
                bson!([{"$bucket": {"groupBy": "$price", "boundaries": [0, 10], "default": 5}}]),
                40199,
            ),
        ]);
    }

    #[test]
    fn ranges_and_default() {
        check(
            bson!([{"$bucket": {"groupBy": "$price", "boundaries": [0, 10, 20], "default": "other",
                "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}]),
            orders(),
            vec![
                doc! {"_id": 0, "n": 2, "ids": [4, 5]},
                doc! {"_id": 10, "n": 2, "ids": [1, 3]},
                doc! {"_id": "other", "n": 1, "ids": [2]},
            ],
        );
        let e = run(
            bson!([{"$bucket": {"groupBy": "$price", "boundaries": [0, 10]}}]),
            orders(),
        )
        .unwrap_err();
        assert_eq!(e.code, 40066);
        // A $group and a $sort on _id, as MongoDB runs it: a default below the boundaries
        // comes first, and boundaries are values, never field paths.
        check(
            bson!([{"$bucket": {"groupBy": "$s", "boundaries": ["$a", "$m"], "default": "$"}}]),
            vec![doc! {"s": "$b"}, doc! {"s": "$x"}, doc! {"s": "$c"}],
            vec![
                doc! {"_id": "$", "count": 1},
                doc! {"_id": "$a", "count": 2},
            ],
        );
    }
}
