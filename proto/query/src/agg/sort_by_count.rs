//! `$sortByCount`: documents grouped by a value, counted, most first; parsed as the
//! `$group` and `$sort` it stands for.

use bson::{Bson, Document};

use super::err;
use crate::{ErrorCode, MongoResult};

pub(super) fn desugar(arg: &Bson) -> MongoResult<Vec<Document>> {
    let ok = match arg {
        Bson::String(s) => s.starts_with('$'),
        Bson::Document(d) => d.keys().next().is_some_and(|k| k.starts_with('$')) && d.len() == 1,
        _ => false,
    };
    if !ok {
        return Err(err(
            ErrorCode::SortByCountInvalid,
            "the sortByCount field must be defined as a $-prefixed path or an expression",
        ));
    }
    Ok(vec![
        bson::doc! {"$group": {"_id": arg.clone(), "count": {"$sum": 1}}},
        bson::doc! {"$sort": {"count": -1}},
    ])
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![(bson!([{"$sortByCount": "item"}]), 40148)]);
    }

    #[test]
    fn most_first() {
        check(
            bson!([{"$sortByCount": "$cust"}]),
            vec![doc! {"cust": "a"}, doc! {"cust": "b"}, doc! {"cust": "b"}],
            vec![doc! {"_id": "b", "count": 2}, doc! {"_id": "a", "count": 1}],
        );
    }
}
