//! `$skip`: all but the first n documents.

use bson::{Bson, Document};

use super::err;
use crate::{ErrorCode, MongoResult};

/// `$skip: n` (not negative).
pub(super) fn parse(arg: &Bson) -> MongoResult<usize> {
    let n = crate::expr::as_int_exact(arg).ok_or_else(|| {
        err(
            ErrorCode::SkipNotNumber,
            format!("Argument to $skip must be a number, got {arg}"),
        )
    })?;
    if n < 0 {
        return Err(err(
            ErrorCode::SkipNegative,
            format!("Argument to $skip cannot be negative, got {n}"),
        ));
    }
    Ok(n as usize)
}

pub(super) fn run(docs: Vec<Document>, n: usize) -> Vec<Document> {
    docs.into_iter().skip(n).collect()
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![(bson!([{"$skip": -1}]), 15956)]);
    }

    #[test]
    fn drops_the_first() {
        check(
            bson!([{"$skip": 3}, {"$limit": 1}, {"$project": {"_id": 1}}]),
            orders(),
            vec![doc! {"_id": 4}],
        );
    }
}
