//! Transactions too large for one log entry, split over several as MongoDB splits a
//! transaction over 16 MB over several oplog entries, and still applied at once.
//!
//! A primary committing or preparing a transaction whose writes take more than the set's
//! `txn_entry_kb` replicates all but the last slice of them first, each slice as a row of
//! the `_txn_parts` table (an ordinary write, so a restart's log replay and a snapshot
//! carry it like any row). The transaction's final entry (its commit, or its Prepare)
//! deletes those rows; applying it, every member reads them back and applies their writes
//! in the same storage transaction as its own ([`with_parts`]), so no reader ever sees a part
//! of the transaction. Before the final entry, the primary checks the parts' keys against
//! prepared transactions with the entry's own (`Prepared::admit`).
//!
//! A row's key starts with the term of the primary that wrote it. Rows of an earlier term
//! are orphans once the primary of a later term can write: its earlier entries are
//! applied by then, so a final entry that committed has deleted its rows, and one that did
//! not will never commit. The primary deletes them ([`sweep`]).

use storage::{Engine, KeyRange, StorageError, WriteBatch, WriteOp, WriteOpRef};

use super::entry::{op_size, ops_size, put_ops, OplogEntry, Reader};
use super::{with_scope, ProposeError, Replica, WriteScope};

/// The rows of transactions split over entries whose final entry has not applied yet.
pub const PARTS_TABLE: &str = "_txn_parts";

/// The slices of a transaction's writes that earlier entries carry, as replicated.
#[derive(Default)]
pub struct Parts {
    keys: Vec<Vec<u8>>,
    slices: Vec<WriteBatch>,
}

impl Parts {
    /// Every write the parts carry, to check with the final entry's own.
    pub fn ops(&self) -> Vec<WriteOpRef<'_>> {
        self.slices
            .iter()
            .flat_map(|s| s.ops.iter().map(WriteOp::as_ref))
            .collect()
    }

    /// What the final entry writes to remove the parts (and to name them).
    pub fn deletes(&self) -> impl Iterator<Item = WriteOp> + '_ {
        self.keys.iter().map(|k| WriteOp::Delete {
            table: PARTS_TABLE.to_string(),
            key: k.clone(),
        })
    }
}

/// A part row's key: the writing primary's term, the transaction and the slice's place.
pub(super) fn part_key(term: u64, (session, number): (&[u8], i64), seq: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(20 + session.len());
    k.extend_from_slice(&term.to_be_bytes());
    k.extend_from_slice(&number.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k.extend_from_slice(session);
    k
}

/// The row under `key` that carries `slice`.
pub(super) fn part_row(key: Vec<u8>, slice: &WriteBatch) -> WriteOp {
    let mut value = Vec::new();
    put_ops(&mut value, slice);
    WriteOp::Put {
        table: PARTS_TABLE.to_string(),
        key,
        value,
    }
}

/// Whether `ops` (a Write entry's) are a transaction's commit, which may name parts: it
/// writes the session's record. Other entries that delete part rows (`discard`, `sweep`)
/// only delete them.
pub fn is_commit(ops: &[WriteOpRef<'_>]) -> bool {
    ops.iter()
        .any(|o| o.table() == crate::sessions::retry::TXN_TABLE)
}

fn term_of(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.get(..8)?.try_into().ok()?))
}

/// Cuts `batch` into slices whose ops take at most `limit` bytes in an entry (an op
/// larger than that is a slice of its own), in order.
pub fn slice(batch: WriteBatch, limit: usize) -> Vec<WriteBatch> {
    let mut slices = vec![WriteBatch::new()];
    let mut size = 0;
    for op in batch.ops {
        let one = op_size(&op);
        let last = slices.last_mut().expect("never empty");
        if size + one > limit && !last.ops.is_empty() {
            slices.push(WriteBatch::new());
            size = 0;
        }
        size += one;
        slices.last_mut().expect("never empty").ops.push(op);
    }
    slices
}

/// Replicates, as `_txn_parts` rows, all but the last slice of the writes of the
/// session's transaction `number` when they take more than the set's `txn_entry_kb`;
/// returns the writes left for the final entry, and the parts. The parts wait for a
/// majority whatever the command's `wtimeout` (a primary that loses its majority steps
/// down, which ends the wait): only the final entry's wait says whether it committed.
/// On failure, the parts written are deleted if this primary still can.
pub fn split_off(
    replica: &Replica,
    txn: (&[u8], i64),
    mut batch: WriteBatch,
) -> Result<(WriteBatch, Parts), ProposeError> {
    let limit = replica.config.txn_entry_kb as usize * 1024;
    if ops_size(&batch) <= limit {
        return Ok((batch, Parts::default()));
    }
    // The events ride in the final entry, which is what makes them happen.
    let events = std::mem::take(&mut batch.events);
    let mut slices = slice(batch, limit);
    let mut rest = slices.pop().unwrap_or_default();
    rest.events = events;
    let scope = super::scope();
    let term = scope.term.unwrap_or_else(|| replica.status().term);
    let majority = WriteScope {
        wtimeout: None,
        w: 0,
        ..scope
    };
    let mut parts = Parts::default();
    let written = with_scope(majority, || {
        for (seq, slice) in slices.into_iter().enumerate() {
            let key = part_key(term, txn, seq as u32);
            let write = WriteBatch::of(vec![part_row(key.clone(), &slice)]);
            replica.replicate(OplogEntry::Write(write))?;
            parts.keys.push(key);
            parts.slices.push(slice);
        }
        Ok(())
    });
    match written {
        Ok(()) => {
            tracing::info!(
                parts = parts.keys.len(),
                "a transaction's writes are split over several log entries"
            );
            Ok((rest, parts))
        }
        Err(e) => {
            discard(replica, &parts);
            Err(e)
        }
    }
}

/// Proposes `entry`, the final entry of a transaction whose other writes `parts` carry,
/// and waits as `Replica::replicate` does. A final entry refused before it was proposed
/// will never apply: its parts are discarded. One that was proposed may still apply
/// whatever its proposer heard (past `wtimeout`, across a change of primary), so its
/// parts stay: it deletes them, or the next primary's [`sweep`] does.
pub fn replicate_final(
    replica: &Replica,
    entry: &OplogEntry,
    parts: &Parts,
) -> Result<(), ProposeError> {
    let result = replica.replicate_parted(entry, &parts.ops());
    if let Err(ProposeError::NotPrimary | ProposeError::PrepareConflict(_)) = &result {
        discard(replica, parts);
    }
    result
}

/// Deletes the rows of `parts`, whose final entry will not be proposed. What this
/// primary cannot delete now, the next primary's [`sweep`] does.
pub fn discard(replica: &Replica, parts: &Parts) {
    if parts.keys.is_empty() {
        return;
    }
    let batch = WriteBatch::of(parts.deletes().collect());
    if let Err(e) = replica.replicate(OplogEntry::Write(batch)) {
        tracing::warn!(error = %e, "deleting the parts of a transaction that did not commit");
    }
}

/// The rows of the parts that `ops` (a final entry's) delete, in order. A final entry
/// applies right after its parts on every member, so a part that is missing means a
/// corrupt log or table, and stops the member.
pub fn load(engine: &dyn Engine, ops: &[WriteOpRef<'_>]) -> Result<Vec<Vec<u8>>, StorageError> {
    ops.iter()
        .filter(|o| matches!(o, WriteOpRef::Delete { table, .. } if *table == PARTS_TABLE))
        .map(|o| {
            engine.get(PARTS_TABLE, o.key())?.ok_or_else(|| {
                StorageError::Other(format!(
                    "a transaction's final entry names a part that is not in {PARTS_TABLE} \
                     (key {:02x?})",
                    o.key()
                ))
            })
        })
        .collect()
}

/// `own` (a final entry's writes) after the writes its parts' `rows` carry.
pub fn with_parts<'a>(
    rows: &'a [Vec<u8>],
    own: Vec<WriteOpRef<'a>>,
) -> Result<Vec<WriteOpRef<'a>>, StorageError> {
    if rows.is_empty() {
        return Ok(own);
    }
    let mut ops = expand(rows)?;
    ops.extend(own);
    Ok(ops)
}

/// The writes that `rows` (from [`load`]) carry, in order.
fn expand(rows: &[Vec<u8>]) -> Result<Vec<WriteOpRef<'_>>, StorageError> {
    let mut ops = Vec::new();
    for row in rows {
        let mut r = Reader(row);
        match r.ops() {
            Some(slice) if r.0.is_empty() => ops.extend(slice),
            _ => {
                return Err(StorageError::Other(format!(
                    "undecodable row in {PARTS_TABLE}"
                )))
            }
        }
    }
    Ok(ops)
}

/// On a primary that can write: deletes the rows of earlier terms (orphans: see the
/// module's note), which it reads from `engine`. Returns how many.
pub fn sweep(replica: &Replica, engine: &dyn Engine) -> wire::MongoResult<usize> {
    let status = replica.status();
    if !status.writable {
        return Ok(0);
    }
    let rows = engine
        .scan(PARTS_TABLE, &KeyRange::all(), false, usize::MAX)
        .map_err(crate::error::storage_to_mongo)?;
    let stale: Vec<WriteOp> = rows
        .into_iter()
        .filter(|(k, _)| term_of(k).is_some_and(|t| t < status.term))
        .map(|(key, _)| WriteOp::Delete {
            table: PARTS_TABLE.to_string(),
            key,
        })
        .collect();
    let n = stale.len();
    if n > 0 {
        let term = WriteScope {
            term: Some(status.term),
            ..WriteScope::default()
        };
        with_scope(term, || {
            replica.replicate(OplogEntry::Write(WriteBatch::of(stale)))
        })?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::MemoryEngine;

    fn batch(n: usize, value: usize) -> WriteBatch {
        let mut b = WriteBatch::new();
        for i in 0..n {
            b.put("t", vec![i as u8], vec![7; value]);
        }
        b
    }

    #[test]
    fn slices_keep_order_and_stay_under_the_limit() {
        let slices = slice(batch(10, 100), 350);
        let flat: Vec<WriteOp> = slices.iter().flat_map(|s| s.ops.clone()).collect();
        assert_eq!(flat, batch(10, 100).ops);
        assert!(slices.len() > 3, "{}", slices.len());
        for s in &slices {
            assert!(ops_size(s) <= 350 + 4, "{}", ops_size(s));
        }
        // An op larger than the limit is a slice of its own.
        let big = slice(batch(3, 1000), 100);
        assert_eq!(big.len(), 3);
    }

    #[test]
    fn a_final_entry_reads_back_its_parts_in_order() {
        let engine = MemoryEngine::new();
        engine.create_table(PARTS_TABLE).unwrap();
        let txn = (&b"session"[..], 4);
        let slices = slice(batch(6, 10), 40);
        let mut deletes = Vec::new();
        for (seq, s) in slices.iter().enumerate() {
            let key = part_key(3, txn, seq as u32);
            let w = WriteBatch::of(vec![part_row(key.clone(), s)]);
            engine.write(&w).unwrap();
            deletes.push(WriteOp::Delete {
                table: PARTS_TABLE.into(),
                key,
            });
        }
        let refs: Vec<WriteOpRef<'_>> = deletes.iter().map(WriteOp::as_ref).collect();
        let rows = load(&engine, &refs).unwrap();
        let ops: Vec<WriteOp> = expand(&rows)
            .unwrap()
            .iter()
            .map(WriteOpRef::to_owned)
            .collect();
        assert_eq!(ops, batch(6, 10).ops);
        assert_eq!(term_of(&part_key(3, txn, 0)), Some(3));
        let missing = [WriteOpRef::Delete {
            table: PARTS_TABLE,
            key: b"nothing here",
        }];
        assert!(load(&engine, &missing).is_err());
        assert!(expand(&[vec![1, 2, 3]]).is_err());
    }
}
