//! Change events: what an entry's writes mean to a change stream (namespace, operation,
//! document key and update description), carried in the same entry as the writes
//! (`entry.rs`), so that the Raft log stays the one write-ahead log.
//!
//! An event names its document by the collection's table and the document key; a stream
//! finds the full document among the entry's own ops, so an insert's document is never
//! written twice into the log. Events are appended to `WriteBatch::events`, which layers
//! that merge batches concatenate.

use std::cell::Cell;

use bson::{Document, RawDocument};
use storage::WriteBatch;

use super::entry::Reader;

/// What a change event reports, with MongoDB's `operationType` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Insert,
    Update,
    Replace,
    Delete,
    Drop,
    Rename,
    DropDatabase,
    Create,
    CreateIndexes,
    DropIndexes,
    Modify,
    ShardCollection,
}

const KINDS: [(Kind, &str); 12] = [
    (Kind::Insert, "insert"),
    (Kind::Update, "update"),
    (Kind::Replace, "replace"),
    (Kind::Delete, "delete"),
    (Kind::Drop, "drop"),
    (Kind::Rename, "rename"),
    (Kind::DropDatabase, "dropDatabase"),
    (Kind::Create, "create"),
    (Kind::CreateIndexes, "createIndexes"),
    (Kind::DropIndexes, "dropIndexes"),
    (Kind::Modify, "modify"),
    (Kind::ShardCollection, "shardCollection"),
];

impl Kind {
    pub fn name(self) -> &'static str {
        KINDS[self as usize].1
    }

    fn from_byte(b: u8) -> Option<Kind> {
        KINDS.get(b as usize).map(|(k, _)| *k)
    }

    /// Only shown to streams opened with `showExpandedEvents`.
    pub fn expanded_only(self) -> bool {
        matches!(
            self,
            Kind::Create
                | Kind::CreateIndexes
                | Kind::DropIndexes
                | Kind::Modify
                | Kind::ShardCollection
        )
    }
}

/// One event as an entry carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    pub kind: Kind,
    /// `db.coll`, or `db` for `dropDatabase`.
    pub ns: &'a str,
    /// The collection's table, where the entry's op holding the full document is.
    pub table: &'a str,
    /// The collection's UUID (16 bytes; empty for `dropDatabase`).
    pub uuid: &'a [u8],
    /// The document key (`_id`, and the shard key's fields before it), empty for DDL.
    pub key: &'a [u8],
    /// The update description or the DDL's description, empty when there is none.
    pub detail: &'a [u8],
    /// The document before an update, replace or delete, when the collection records
    /// pre-images (`changeStreamPreAndPostImages`); empty otherwise.
    pub before: &'a [u8],
}

impl Event<'_> {
    pub fn key_doc(&self) -> Option<Document> {
        bson_doc(self.key)
    }

    pub fn detail_doc(&self) -> Option<Document> {
        bson_doc(self.detail)
    }

    pub fn before_doc(&self) -> Option<Document> {
        bson_doc(self.before)
    }
}

fn bson_doc(bytes: &[u8]) -> Option<Document> {
    if bytes.is_empty() {
        return None;
    }
    RawDocument::from_bytes(bytes)
        .ok()
        .and_then(|d| Document::try_from(d).ok())
}

thread_local! {
    /// Set while a migration moves documents (MongoDB's `fromMigrate`): their writes
    /// change where documents live, not what they are.
    static SILENT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with its writes producing no events.
pub fn silent<R>(f: impl FnOnce() -> R) -> R {
    let was = SILENT.with(|s| s.replace(true));
    let out = f();
    SILENT.with(|s| s.set(was));
    out
}

/// Appends an event to `batch`, unless the thread runs [`silent`].
pub fn record(batch: &mut WriteBatch, event: &Event<'_>) {
    if SILENT.with(|s| s.get()) {
        return;
    }
    let out = &mut batch.events;
    out.push(event.kind as u8);
    for part in [event.ns.as_bytes(), event.table.as_bytes()] {
        out.extend_from_slice(&(part.len() as u16).to_le_bytes());
        out.extend_from_slice(part);
    }
    for part in [event.uuid, event.key, event.detail, event.before] {
        out.extend_from_slice(&(part.len() as u32).to_le_bytes());
        out.extend_from_slice(part);
    }
}

/// The events `record` appended; `None` for bytes it did not write.
pub fn parse(mut bytes: &[u8]) -> Option<Vec<Event<'_>>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let mut r = Reader(bytes);
        let kind = Kind::from_byte(r.u8()?)?;
        let ns = r.str()?;
        let table = r.str()?;
        let uuid = r.bytes()?;
        let key = r.bytes()?;
        let detail = r.bytes()?;
        let before = r.bytes()?;
        out.push(Event {
            kind,
            ns,
            table,
            uuid,
            key,
            detail,
            before,
        });
        bytes = r.0;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_silence_drops_them() {
        let key = bson::to_vec(&bson::doc! {"_id": 1}).unwrap();
        let mut b = WriteBatch::new();
        let ev = Event {
            kind: Kind::Update,
            ns: "db.c",
            table: "c_1",
            uuid: &[7; 16],
            key: &key,
            detail: &[],
            before: &[1, 2],
        };
        record(&mut b, &ev);
        silent(|| record(&mut b, &ev));
        let drop = Event {
            kind: Kind::DropDatabase,
            ns: "db",
            table: "",
            uuid: &[],
            key: &[],
            detail: &[],
            before: &[],
        };
        record(&mut b, &drop);
        let parsed = parse(&b.events).unwrap();
        assert_eq!(parsed, vec![ev, drop]);
        assert_eq!(parsed[0].key_doc(), Some(bson::doc! {"_id": 1}));
        assert!(parse(&b.events[..b.events.len() - 1]).is_none());
        assert!(parse(&[99]).is_none());
    }
}
