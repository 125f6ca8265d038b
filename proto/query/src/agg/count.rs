//! `$count`: how many documents, in a field of one document; parsed as the `$group` and
//! `$project` it stands for.

use bson::{Bson, Document};

use super::err;
use crate::{ErrorCode, MongoResult};

pub(super) fn desugar(arg: &Bson) -> MongoResult<Vec<Document>> {
    let Bson::String(s) = arg else {
        return Err(err(
            ErrorCode::CountFieldNotString,
            "the count field must be a non-empty string",
        ));
    };
    // The first rule the name breaks decides the error.
    let rules = [
        (
            s.is_empty(),
            ErrorCode::CountFieldEmpty,
            "the count field must be a non-empty string",
        ),
        (
            s.starts_with('$'),
            ErrorCode::CountFieldDollarPrefixed,
            "the count field cannot be a $-prefixed path",
        ),
        (
            s.contains('\0'),
            ErrorCode::CountFieldNullByte,
            "the count field cannot contain a null byte",
        ),
        (
            s.contains('.'),
            ErrorCode::CountFieldDotted,
            "the count field cannot contain '.'",
        ),
        // What the `$group` it stands for says: its spec would name `_id` twice.
        (
            s == "_id",
            ErrorCode::GroupIdSpecifiedTwice,
            "a group's _id may only be specified once",
        ),
    ];
    if let Some((_, code, msg)) = rules.into_iter().find(|(broken, _, _)| *broken) {
        return Err(err(code, msg));
    }
    let mut group = bson::doc! {"_id": Bson::Null};
    group.insert(s.as_str(), bson::doc! {"$sum": 1});
    Ok(vec![
        bson::doc! {"$group": group},
        bson::doc! {"$project": {"_id": 0}},
    ])
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$count": ""}]), 40157),
            (bson!([{"$count": "$x"}]), 40158),
            (bson!([{"$count": "a.b"}]), 40160),
            (bson!([{"$count": "_id"}]), 15948),
            (bson!([{"$count": "a\u{0}b"}]), 40159),
        ]);
    }

    #[test]
    fn counts() {
        check(bson!([{"$count": "n"}]), orders(), vec![doc! {"n": 5}]);
        check(
            bson!([{"$match": {"price": 999}}, {"$count": "n"}]),
            orders(),
            vec![],
        );
    }
}
