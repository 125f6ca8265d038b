//! The change events one applied log entry makes, with the documents they need from the
//! entry's own writes (and from its transaction's earlier entries).
//!
//! A `Write` entry's events happen with it, unless the entry was refused as it applied
//! (`applier::refused_key`). A prepared transaction's events are in its `Prepare` entry
//! and happen with the `CommitPrepared` that decides it, at that entry's time, as
//! MongoDB's events of a prepared transaction take its commit entry's time.

use bson::{Bson, Document};
use storage::{Engine, WriteOpRef};
use wire::{MongoError, MongoResult};

use super::log_reader::{history_lost, LogReader, TimedEntry};
use crate::catalog::keys::id_key;
use crate::repl::applier::refused_key;
use crate::repl::entry::{events_of, OplogEntryRef, TxnName};
use crate::repl::events::{parse, Kind};
use crate::repl::txn_parts::{self, PARTS_TABLE};
use crate::repl::REPL_TABLE;

/// An event with what the stream's documents are built from.
#[derive(Debug, Clone)]
pub struct RawEvent {
    /// Its place among its entry's events.
    pub pos: u32,
    pub kind: Kind,
    pub ns: String,
    /// The collection's table when the event was written.
    pub table: String,
    /// The collection's UUID on this shard.
    pub uuid: Option<bson::Uuid>,
    pub key: Document,
    pub detail: Option<Document>,
    /// The document after an insert, replace or update.
    pub after: Option<Document>,
    /// The document before, when the collection records pre-images (its post-images are
    /// then shown too).
    pub before: Option<Document>,
}

/// The events of `e`, in order.
pub fn of_entry(
    reader: &LogReader,
    engine: &dyn Engine,
    e: &TimedEntry,
) -> MongoResult<Vec<RawEvent>> {
    let data = &e.entry.data;
    let Some(op) = OplogEntryRef::decode(data) else {
        return Ok(Vec::new());
    };
    match op {
        OplogEntryRef::Write(ops) => {
            let events = events_of(data).unwrap_or_default();
            if events.is_empty() || refused(engine, e.index)? {
                return Ok(Vec::new());
            }
            let rows = part_rows(reader, e.index, &ops)?;
            let ops = txn_parts::with_parts(&rows, ops).map_err(corrupt)?;
            build(events, &ops)
        }
        OplogEntryRef::CommitPrepared { txn, .. } => {
            if refused(engine, e.index)? {
                return Ok(Vec::new());
            }
            prepared_events(reader, e.index, &txn)
        }
        _ => Ok(Vec::new()),
    }
}

/// The events of the Prepare entry of `txn`, which `index` commits.
fn prepared_events(reader: &LogReader, index: u64, txn: &TxnName) -> MongoResult<Vec<RawEvent>> {
    for entry in reader.before(index) {
        let entry = entry?;
        if let Some(OplogEntryRef::Prepare {
            txn: t, ops, side, ..
        }) = OplogEntryRef::decode(&entry.data)
        {
            if &t != txn {
                continue;
            }
            let events = events_of(&entry.data).unwrap_or_default();
            if events.is_empty() {
                return Ok(Vec::new());
            }
            let rows = part_rows(reader, entry.index, &side)?;
            let ops = txn_parts::with_parts(&rows, ops).map_err(corrupt)?;
            return build(events, &ops);
        }
    }
    Err(history_lost(
        index.saturating_sub(super::log_reader::LOOK_BACK),
    ))
}

fn refused(engine: &dyn Engine, index: u64) -> MongoResult<bool> {
    Ok(engine
        .get(REPL_TABLE, &refused_key(index))
        .map_err(crate::error::storage_to_mongo)?
        .is_some())
}

/// The rows of the parts a final entry at `index` deletes (`ops`), from the entries
/// before it that wrote them. Only a transaction's final entry that has events deletes
/// part rows (a sweep or a discard has none).
fn part_rows(reader: &LogReader, index: u64, ops: &[WriteOpRef<'_>]) -> MongoResult<Vec<Vec<u8>>> {
    let keys: Vec<&[u8]> = ops
        .iter()
        .filter(|o| matches!(o, WriteOpRef::Delete { table, .. } if *table == PARTS_TABLE))
        .map(|o| o.key())
        .collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut rows: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
    for entry in reader.before(index) {
        let entry = entry?;
        if let Some(OplogEntryRef::Write(written)) = OplogEntryRef::decode(&entry.data) {
            for op in written {
                if let WriteOpRef::Put { table, key, value } = op {
                    if let Some(i) = keys.iter().position(|k| *k == key) {
                        if table == PARTS_TABLE && rows[i].is_none() {
                            rows[i] = Some(value.to_vec());
                        }
                    }
                }
            }
        }
        if rows.iter().all(Option::is_some) {
            return Ok(rows.into_iter().flatten().collect());
        }
    }
    Err(history_lost(
        index.saturating_sub(super::log_reader::LOOK_BACK),
    ))
}

fn build(events: &[u8], ops: &[WriteOpRef<'_>]) -> MongoResult<Vec<RawEvent>> {
    let events = parse(events).ok_or_else(|| corrupt("undecodable change events"))?;
    let mut out = Vec::with_capacity(events.len());
    for (pos, ev) in events.iter().enumerate() {
        let key = ev.key_doc().unwrap_or_default();
        let after = match ev.kind {
            Kind::Insert | Kind::Replace | Kind::Update => {
                written_document(ops, ev.table, key.get("_id"))?
            }
            _ => None,
        };
        out.push(RawEvent {
            pos: pos as u32,
            kind: ev.kind,
            ns: ev.ns.to_string(),
            table: ev.table.to_string(),
            uuid: <[u8; 16]>::try_from(ev.uuid)
                .ok()
                .map(bson::Uuid::from_bytes),
            key,
            detail: ev.detail_doc(),
            after,
            before: ev.before_doc(),
        });
    }
    Ok(out)
}

/// The last value `ops` write for the document with `id` in `table`.
fn written_document(
    ops: &[WriteOpRef<'_>],
    table: &str,
    id: Option<&Bson>,
) -> MongoResult<Option<Document>> {
    let Some(id) = id else { return Ok(None) };
    let key = id_key(id);
    let value = ops.iter().rev().find_map(|o| match o {
        WriteOpRef::Put {
            table: t,
            key: k,
            value,
        }
        | WriteOpRef::Insert {
            table: t,
            key: k,
            value,
        } if *t == table && *k == key.as_slice() => Some(*value),
        _ => None,
    });
    value
        .map(crate::execution::write_path::decode_document)
        .transpose()
}

fn corrupt(e: impl std::fmt::Display) -> MongoError {
    MongoError::internal(format!("a log entry's change events cannot be read: {e}"))
}
