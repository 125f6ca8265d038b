//! `$limit`: the first n documents.

use bson::{Bson, Document};

use super::err;
use crate::{ErrorCode, MongoResult};

/// `$limit: n` (positive).
pub(super) fn parse(arg: &Bson) -> MongoResult<usize> {
    let n = crate::expr::as_int_exact(arg).ok_or_else(|| {
        err(
            ErrorCode::LimitNotNumber,
            format!("the limit must be specified as a number, got {arg}"),
        )
    })?;
    if n <= 0 {
        return Err(err(
            ErrorCode::LimitNotPositive,
            "the limit must be positive",
        ));
    }
    Ok(n as usize)
}

pub(super) fn run(mut docs: Vec<Document>, n: usize) -> Vec<Document> {
    docs.truncate(n);
    docs
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$limit": 0}]), 15958),
            (bson!([{"$limit": "x"}]), 15957),
        ]);
    }

    #[test]
    fn keeps_the_first() {
        check(
            bson!([{"$limit": 2}, {"$project": {"_id": 1}}]),
            orders(),
            vec![doc! {"_id": 1}, doc! {"_id": 2}],
        );
    }
}
