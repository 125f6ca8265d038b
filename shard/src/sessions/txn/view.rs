//! The engine a transaction's statements run on: reads as of the transaction's time with
//! its own writes over them, and writes that go to its overlay instead of replication.
//! Command code runs on it unchanged, as it runs on a replicated engine.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use storage::{
    Engine, ExportSink, KeyRange, PreparedId, Result, Rows, StorageError, TableStats, Timestamp,
    WriteBatch, WriteOpRef,
};
use wire::{ErrorCode, MongoError};

use super::{Transactions, Txn};

pub struct TxnView {
    pub below: Arc<dyn Engine>,
    pub txn: Arc<Txn>,
    /// Where the keys open transactions write are claimed.
    pub registry: Arc<Transactions>,
    /// The transaction's session key.
    pub session: Vec<u8>,
}

/// A MongoDB error carried through the storage interface.
fn refused(code: ErrorCode, message: impl Into<String>) -> StorageError {
    StorageError::Layer(Box::new(MongoError::new(code, message)))
}

fn not_in_transaction(what: &str) -> StorageError {
    refused(
        ErrorCode::OperationNotSupportedInTransaction,
        format!("Cannot {what} in a multi-document transaction"),
    )
}

impl TxnView {
    fn at(&self) -> Timestamp {
        self.txn.read_at
    }

    /// The staged writes of `table` within `range`, in key order.
    fn staged_in(&self, table: &str, range: &KeyRange) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let staged = self.txn.staged();
        let key = |b: &Bound<Vec<u8>>| match b {
            Bound::Included(k) => Bound::Included((table.to_string(), k.clone())),
            Bound::Excluded(k) => Bound::Excluded((table.to_string(), k.clone())),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (start, end) = (key(&range.start), key(&range.end));
        // Unbounded ends stop at the table's edge.
        let in_table = |(t, _): &(String, Vec<u8>)| t == table;
        let start = match start {
            Bound::Unbounded => Bound::Included((table.to_string(), Vec::new())),
            b => b,
        };
        // `BTreeMap::range` panics on a range that ends before it starts.
        let empty = match (&start, &end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
                s >= e
            }
            _ => false,
        };
        if empty {
            return Vec::new();
        }
        staged
            .writes
            .range((start, end))
            .take_while(|(k, _)| in_table(k))
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Stages `batch` atomically: an insert of a key the transaction can see fails the
    /// whole batch, as it would in storage.
    fn stage(&self, batch: &WriteBatch) -> Result<()> {
        let refs: Vec<WriteOpRef<'_>> = batch.ops.iter().map(|o| o.as_ref()).collect();
        if self.below.write_conflict(&refs, self.at())? {
            return Err(refused(
                ErrorCode::WriteConflict,
                "a document this transaction writes was written after it started",
            ));
        }
        let mut staged = self.txn.staged();
        let mut pending: BTreeMap<(String, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
        for op in &refs {
            let slot = (op.table().to_string(), op.key().to_vec());
            let value = match op {
                WriteOpRef::Insert { table, key, value } => {
                    let seen = match pending.get(&slot).or_else(|| staged.writes.get(&slot)) {
                        Some(v) => v.is_some(),
                        None => self.below.get_at(table, key, self.at())?.is_some(),
                    };
                    if seen {
                        return Err(StorageError::KeyExists {
                            table: table.to_string(),
                        });
                    }
                    Some(value.to_vec())
                }
                WriteOpRef::Put { value, .. } => Some(value.to_vec()),
                WriteOpRef::Delete { .. } => None,
            };
            pending.insert(slot, value);
        }
        // What the overlay holds once the batch is in it: a key written again counts once.
        let size = |slot: &(String, Vec<u8>), v: &Option<Vec<u8>>| {
            slot.0.len() + slot.1.len() + v.as_ref().map_or(0, Vec::len)
        };
        let bytes = pending.iter().fold(staged.bytes, |total, (slot, v)| {
            let replaced = staged.writes.get(slot).map_or(0, |old| size(slot, old));
            total + size(slot, v) - replaced
        });
        let max = self.registry.max_bytes();
        if bytes > max {
            return Err(refused(
                ErrorCode::TransactionTooLarge,
                format!("a transaction may write at most {max} bytes on this shard"),
            ));
        }
        self.registry
            .claim(&self.session, &self.txn, pending.keys())
            .and_then(|()| self.registry.account(&self.txn, staged.bytes, bytes))
            .map_err(|e| StorageError::Layer(Box::new(e)))?;
        staged.bytes = bytes;
        staged.writes.extend(pending);
        staged.events.extend_from_slice(&batch.events);
        Ok(())
    }
}

impl Engine for TxnView {
    fn create_table(&self, name: &str) -> Result<()> {
        Err(not_in_transaction(&format!("create namespace {name}")))
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        Err(not_in_transaction(&format!("drop namespace {name}")))
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        self.below.list_tables()
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let slot = (table.to_string(), key.to_vec());
        if let Some(v) = self.txn.staged().writes.get(&slot) {
            return Ok(v.clone());
        }
        self.below.get_at(table, key, self.at())
    }

    /// The rows below as of the transaction's time, with its writes over them. Below, at
    /// most one row per staged key can be replaced or removed, so reading `limit` plus
    /// that many rows below is enough; past the last row read below, only a complete read
    /// says what is there.
    fn scan(&self, table: &str, range: &KeyRange, reverse: bool, limit: usize) -> Result<Rows> {
        let staged = self.staged_in(table, range);
        if staged.is_empty() || limit == 0 {
            return self.below.scan_at(table, range, reverse, limit, self.at());
        }
        let want = limit.saturating_add(staged.len());
        let rows = self.below.scan_at(table, range, reverse, want, self.at())?;
        let edge = (rows.len() >= want).then(|| rows.last().map(|(k, _)| k.clone()));
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = rows.into_iter().collect();
        for (key, value) in staged {
            if let Some(Some(edge)) = &edge {
                if (reverse && key < *edge) || (!reverse && key > *edge) {
                    continue;
                }
            }
            match value {
                Some(v) => merged.insert(key, v),
                None => merged.remove(&key),
            };
        }
        let rows = merged.into_iter();
        Ok(if reverse {
            rows.rev().take(limit).collect()
        } else {
            rows.take(limit).collect()
        })
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.stage(batch)
    }

    fn get_at(&self, table: &str, key: &[u8], at: Timestamp) -> Result<Option<Vec<u8>>> {
        self.below.get_at(table, key, at)
    }

    fn scan_at(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Timestamp,
    ) -> Result<Rows> {
        self.below.scan_at(table, range, reverse, limit, at)
    }

    fn write_refs_at(&self, _ops: &[WriteOpRef<'_>], _commit: Timestamp) -> Result<()> {
        Err(not_in_transaction("write at a timestamp"))
    }

    fn set_timestamps(&self, _stable: Timestamp, _oldest: Timestamp) -> Result<()> {
        Err(not_in_transaction("move the storage timestamps"))
    }

    fn write_conflict(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool> {
        self.below.write_conflict(ops, at)
    }

    fn prepare(&self, _id: PreparedId, _ops: &[WriteOpRef<'_>], _at: Timestamp) -> Result<()> {
        Err(not_in_transaction("prepare a storage transaction"))
    }

    fn prepare_recovered(
        &self,
        _id: PreparedId,
        _ops: &[WriteOpRef<'_>],
        _at: Timestamp,
    ) -> Result<()> {
        Err(not_in_transaction("prepare a storage transaction"))
    }

    fn commit_prepared(
        &self,
        _id: PreparedId,
        _commit: Timestamp,
        _durable: Timestamp,
    ) -> Result<()> {
        Err(not_in_transaction("commit a prepared storage transaction"))
    }

    fn abort_prepared(&self, _id: PreparedId) -> Result<()> {
        Err(not_in_transaction("abort a prepared storage transaction"))
    }

    fn stats(&self, table: &str) -> Result<TableStats> {
        self.below.stats(table)
    }

    fn checkpoint(&self) -> Result<()> {
        Err(not_in_transaction("checkpoint"))
    }

    fn export(&self, _page_bytes: usize, _sink: &mut ExportSink<'_>) -> Result<()> {
        Err(not_in_transaction("export the data"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> TxnView {
        let below = storage::MemoryEngine::default();
        below.create_table("t").unwrap();
        let put = |key: &'static [u8], value: &'static [u8]| WriteOpRef::Put {
            table: "t",
            key,
            value,
        };
        below
            .write_refs_at(&[put(b"a", b"1"), put(b"c", b"3"), put(b"e", b"5")], 10)
            .unwrap();
        // After the transaction's time: it must not see this.
        below.write_refs_at(&[put(b"g", b"7")], 20).unwrap();
        let txn = Arc::new(Txn::new(1, 15, 1));
        let registry = Arc::new(Transactions::default());
        registry.begin(b"s1", txn.clone()).unwrap();
        TxnView {
            below: Arc::new(below),
            txn,
            registry,
            session: b"s1".to_vec(),
        }
    }

    fn keys(rows: Rows) -> Vec<u8> {
        rows.into_iter().map(|(k, _)| k[0]).collect()
    }

    #[test]
    fn reads_merge_the_overlay_over_the_snapshot_in_both_directions_and_with_limits() {
        let v = view();
        let mut b = WriteBatch::new();
        b.put("t", b"b".to_vec(), b"2".to_vec());
        b.delete("t", b"c".to_vec());
        b.put("t", b"z".to_vec(), b"26".to_vec());
        v.write(&b).unwrap();
        let all = KeyRange::all();
        assert_eq!(keys(v.scan("t", &all, false, 100).unwrap()), b"abez");
        assert_eq!(keys(v.scan("t", &all, true, 100).unwrap()), b"zeba");
        for limit in 1..=4 {
            let forward = keys(v.scan("t", &all, false, limit).unwrap());
            assert_eq!(forward, b"abez"[..limit], "forward, limit {limit}");
            let back = keys(v.scan("t", &all, true, limit).unwrap());
            assert_eq!(back, b"zeba"[..limit], "reverse, limit {limit}");
        }
        assert_eq!(v.get("t", b"c").unwrap(), None);
        assert_eq!(v.get("t", b"b").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(v.get("t", b"g").unwrap(), None, "written after its time");
        let from_c = KeyRange {
            start: Bound::Included(b"c".to_vec()),
            end: Bound::Unbounded,
        };
        assert_eq!(keys(v.scan("t", &from_c, false, 10).unwrap()), b"ez");
    }

    #[test]
    fn an_insert_of_a_visible_key_fails_the_whole_batch_and_a_newer_write_conflicts() {
        let v = view();
        let mut b = WriteBatch::new();
        b.insert("t", b"b".to_vec(), b"2".to_vec());
        b.insert("t", b"a".to_vec(), b"again".to_vec());
        assert!(matches!(v.write(&b), Err(StorageError::KeyExists { .. })));
        assert_eq!(v.get("t", b"b").unwrap(), None, "half a batch was staged");
        let mut b = WriteBatch::new();
        b.put("t", b"g".to_vec(), b"mine".to_vec());
        match v.write(&b) {
            Err(StorageError::Layer(e)) => {
                let e = e.downcast::<MongoError>().unwrap();
                assert_eq!(e.code, ErrorCode::WriteConflict as i32);
            }
            other => panic!("expected a write conflict, got {other:?}"),
        }
        assert!(v.create_table("u").is_err());
    }

    /// All overlays together stay under the member's bound, and an ended transaction
    /// gives its bytes back.
    #[test]
    fn overlays_together_are_bounded_and_give_their_bytes_back() {
        let registry = Transactions::default();
        let a = Arc::new(Txn::new(1, 15, 1));
        registry.begin(b"a", a.clone()).unwrap();
        registry
            .account(&a, 0, super::super::MAX_TOTAL_BYTES)
            .unwrap();
        let b = Arc::new(Txn::new(1, 15, 1));
        registry.begin(b"b", b.clone()).unwrap();
        assert!(registry.account(&b, 0, 1).is_err());
        registry.end(b"a", 1);
        registry.account(&b, 0, 1).unwrap();
    }

    /// Of two open transactions, the first to write a key holds it until it ends.
    #[test]
    fn the_first_writer_of_a_key_holds_it_until_its_transaction_ends() {
        let v = view();
        let other_txn = Arc::new(Txn::new(4, 15, 1));
        v.registry.begin(b"s2", other_txn.clone()).unwrap();
        let other = TxnView {
            below: v.below.clone(),
            txn: other_txn,
            registry: v.registry.clone(),
            session: b"s2".to_vec(),
        };
        let mut b = WriteBatch::new();
        b.put("t", b"a".to_vec(), b"mine".to_vec());
        v.write(&b).unwrap();
        v.write(&b).unwrap();
        let conflict = |r: Result<()>| match r {
            Err(StorageError::Layer(e)) => {
                e.downcast::<MongoError>().unwrap().code == ErrorCode::WriteConflict as i32
            }
            _ => false,
        };
        assert!(conflict(other.write(&b)), "a key another transaction wrote");
        v.registry.end(b"s1", 1);
        other.write(&b).unwrap();
    }
}
