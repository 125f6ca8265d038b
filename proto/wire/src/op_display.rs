//! How an operation in progress is shown in `currentOp`, the same on router and shard.

use bson::{Bson, Document, RawBsonRef, RawDocument};

/// Arrays larger than this are shown as their length, not copied.
const SHOWN_ARRAY_BYTES: usize = 1024;

/// `op` as mongod names it for a command.
pub fn op_kind(command: &str) -> &'static str {
    match command {
        "insert" => "insert",
        "update" => "update",
        "delete" => "remove",
        "find" => "query",
        "getMore" => "getmore",
        _ => "command",
    }
}

/// `ns` of a command: `db.collection` when its first value names one, else `db.$cmd`.
pub fn namespace(db: &str, command: &Document) -> String {
    match command.iter().next() {
        Some((_, Bson::String(coll))) => format!("{db}.{coll}"),
        _ => format!("{db}.$cmd"),
    }
}

/// An encoded command for display: large arrays (an insert's documents) are counted,
/// not copied.
pub fn summarize(command: &[u8]) -> Document {
    let Ok(raw) = RawDocument::from_bytes(command) else {
        return Document::new();
    };
    let mut d = Document::new();
    for (k, v) in raw.iter().flatten() {
        let value = match v {
            RawBsonRef::Array(a) if a.as_bytes().len() > SHOWN_ARRAY_BYTES => {
                Bson::String(format!("<{} elements>", a.into_iter().count()))
            }
            other => match other.to_raw_bson().try_into() {
                Ok(b) => b,
                Err(_) => continue,
            },
        };
        d.insert(k, value);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn large_arrays_are_counted_not_copied() {
        let docs: Vec<Document> = (0..100)
            .map(|i| doc! {"_id": i, "pad": "x".repeat(40)})
            .collect();
        let cmd = doc! {"insert": "c", "documents": docs, "ordered": true};
        let d = summarize(&bson::to_vec(&cmd).unwrap());
        assert_eq!(d.get_str("documents").unwrap(), "<100 elements>");
        assert!(d.get_bool("ordered").unwrap());
        assert_eq!(namespace("test", &d), "test.c");
        assert_eq!(namespace("admin", &doc! {"ping": 1}), "admin.$cmd");
    }
}
