//! Which commands are point reads: a `find` of one `_id`, with nothing that can make it
//! wait. Such a command runs on the gRPC task itself instead of tokio's blocking pool.
//!
//! Why: a lookup's storage work is a few microseconds of in-cache B-tree search, and
//! handing it to a blocking thread and back costs two thread wake-ups, more than the
//! lookup. In an overload burst (`bulwark chaos overload`) the member spent more of its
//! CPU on those hand-offs (futexes, context switches) than in WiredTiger. mongod's
//! express path for `_id` equality (IDHACK) exists for the same reason: the common
//! lookup skips the general machinery.
//!
//! What keeps such a read from blocking the runtime: it takes no lock that anyone holds
//! for long (reads run on WiredTiger snapshots; the catalog's map is never held across a
//! replicated write, see `Catalog::writes`), the read concerns that wait
//! (`linearizable`, `afterClusterTime`) are excluded, and while a timed-out write is
//! unresolved (reads wait for its outcome) the read goes to the blocking pool
//! (`shard/src/service.rs`; `ops::blocking_wait` covers one that began just before). What it can still do is miss WiredTiger's cache and
//! read one page from disk, a bounded wait of one I/O.

use bson::spec::ElementType;
use bson::RawDocument;

/// True for `{find: <coll>, filter: {_id: <scalar>}, ...}` without a read concern that
/// waits, a transaction, a tailable cursor, or a hint, bound or collation that could make
/// it scan.
pub fn is_point_read(command: &RawDocument) -> bool {
    let mut elements = command.iter();
    let Some(Ok((name, _))) = elements.next() else {
        return false;
    };
    if name != "find" {
        return false;
    }
    let mut one_id = false;
    for element in elements {
        let Ok((key, value)) = element else {
            return false;
        };
        match key {
            "filter" => {
                let Some(filter) = value.as_document() else {
                    return false;
                };
                one_id = is_id_equality(filter);
            }
            "readConcern" => {
                let Some(rc) = value.as_document() else {
                    return false;
                };
                let level = rc.get_str("level").ok();
                if matches!(level, Some("linearizable" | "snapshot"))
                    || rc.get("afterClusterTime").ok().flatten().is_some()
                {
                    return false;
                }
            }
            // A hint (`$natural` among them), `min` or `max` can turn it into a scan, and
            // so can a collation other than the `_id` index's (mongod's `_id` fast path
            // requires the collection's own).
            "hint" | "min" | "max" | "collation" | "txnNumber" | "startTransaction"
            | "autocommit" | "tailable" | "awaitData" => return false,
            _ => {}
        }
    }
    one_id
}

/// `{_id: v}` where `v` is compared by equality: not a document (operators), an array
/// (an `$in`-like match on array values), a regular expression or code.
fn is_id_equality(filter: &RawDocument) -> bool {
    let mut elements = filter.iter();
    let (Some(Ok((key, value))), None) = (elements.next(), elements.next()) else {
        return false;
    };
    key == "_id"
        && !matches!(
            value.element_type(),
            ElementType::EmbeddedDocument
                | ElementType::Array
                | ElementType::RegularExpression
                | ElementType::JavaScriptCode
                | ElementType::JavaScriptCodeWithScope
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Document, Regex};

    fn point(cmd: Document) -> bool {
        let bytes = bson::to_vec(&cmd).unwrap();
        is_point_read(RawDocument::from_bytes(&bytes).unwrap())
    }

    #[test]
    fn an_id_lookup_is_a_point_read() {
        assert!(point(
            doc! {"find": "c", "filter": {"_id": 7}, "limit": 1, "singleBatch": true, "$db": "d"}
        ));
        assert!(point(
            doc! {"find": "c", "filter": {"_id": ObjectId::new()}}
        ));
        assert!(point(
            doc! {"find": "c", "filter": {"_id": "k"}, "readConcern": {"level": "majority"}}
        ));
    }

    #[test]
    fn anything_that_scans_or_waits_is_not() {
        let not = [
            doc! {"find": "c"},
            doc! {"find": "c", "filter": {}},
            doc! {"find": "c", "filter": {"x": 1}},
            doc! {"find": "c", "filter": {"_id": 1, "x": 1}},
            doc! {"find": "c", "filter": {"_id": {"$gt": 1}}},
            doc! {"find": "c", "filter": {"_id": [1, 2]}},
            doc! {"find": "c", "filter": {"_id": Regex { pattern: "^a".into(), options: String::new() }}},
            doc! {"find": "c", "filter": {"_id": 1}, "readConcern": {"level": "linearizable"}},
            doc! {"find": "c", "filter": {"_id": 1}, "readConcern": {"afterClusterTime": bson::Timestamp { time: 1, increment: 1 }}},
            doc! {"find": "c", "filter": {"_id": 1}, "txnNumber": 1_i64},
            doc! {"find": "c", "filter": {"_id": 1}, "tailable": true},
            doc! {"find": "c", "filter": {"_id": 1}, "hint": {"$natural": 1}},
            doc! {"find": "c", "filter": {"_id": 1}, "min": {"x": 1}},
            doc! {"find": "c", "filter": {"_id": "a"}, "collation": {"locale": "fr", "strength": 1}},
            doc! {"count": "c", "query": {"_id": 1}},
            doc! {"aggregate": "c", "pipeline": [{"$match": {"_id": 1}}]},
        ];
        for cmd in not {
            assert!(!point(cmd.clone()), "{cmd}");
        }
    }
}
