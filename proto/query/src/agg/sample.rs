//! `$sample`: n documents picked at random.

use bson::{Bson, Document};
use rand::seq::SliceRandom;

use super::err;
use crate::{ErrorCode, MongoResult};

/// `$sample: {size: n}`.
pub(super) fn parse(arg: &Bson) -> MongoResult<usize> {
    let Bson::Document(d) = arg else {
        return Err(err(
            ErrorCode::SampleNotObject,
            "the $sample stage specification must be an object",
        ));
    };
    let mut size = None;
    for (k, v) in d {
        if k != "size" {
            return Err(err(
                ErrorCode::SampleUnknownOption,
                format!("unrecognized option to $sample: {k}"),
            ));
        }
        let n = crate::expr::as_int_exact(v).ok_or_else(|| {
            err(
                ErrorCode::SampleSizeNotNumber,
                "size argument to $sample must be a number",
            )
        })?;
        if n < 0 {
            return Err(err(
                ErrorCode::SampleSizeNegative,
                "size argument to $sample must not be negative",
            ));
        }
        size = Some(n as usize);
    }
    size.ok_or_else(|| {
        err(
            ErrorCode::SampleMissingSize,
            "$sample stage must specify a size",
        )
    })
}

pub(super) fn run(mut docs: Vec<Document>, n: usize) -> Vec<Document> {
    let mut rng = rand::thread_rng();
    if n >= docs.len() {
        docs.shuffle(&mut rng);
    } else {
        let (picked, _) = docs.partial_shuffle(&mut rng, n);
        return picked.to_vec();
    }
    docs
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$sample": {"size": -1}}]), 28747),
            (bson!([{"$sample": {}}]), 28749),
        ]);
    }

    #[test]
    fn picks_distinct_documents() {
        let out = run(bson!([{"$sample": {"size": 2}}]), orders()).unwrap();
        assert_eq!(out.len(), 2);
        assert_ne!(out[0].get("_id"), out[1].get("_id"));
        assert_eq!(
            run(bson!([{"$sample": {"size": 10}}]), orders())
                .unwrap()
                .len(),
            5
        );
    }
}
