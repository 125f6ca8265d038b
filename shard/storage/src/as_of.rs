//! An engine that reads as of one timestamp: a snapshot read's view of the engine under
//! it, which every read inside the command (a `$lookup`'s included) goes through.

use std::sync::Arc;

use crate::{
    Engine, ExportSink, KeyRange, PreparedId, Result, Rows, StorageError, TableStats, Timestamp,
    WriteBatch, WriteOpRef,
};

pub struct AsOf {
    below: Arc<dyn Engine>,
    at: Timestamp,
}

impl AsOf {
    pub fn new(below: Arc<dyn Engine>, at: Timestamp) -> AsOf {
        AsOf { below, at }
    }
}

/// A read at a point in time changes nothing.
fn read_only() -> StorageError {
    StorageError::Other("a read at a point in time cannot write".into())
}

impl Engine for AsOf {
    fn create_table(&self, _name: &str) -> Result<()> {
        Err(read_only())
    }

    fn drop_table(&self, _name: &str) -> Result<()> {
        Err(read_only())
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        self.below.list_tables()
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.below.get_at(table, key, self.at)
    }

    fn scan(&self, table: &str, range: &KeyRange, reverse: bool, limit: usize) -> Result<Rows> {
        self.below.scan_at(table, range, reverse, limit, self.at)
    }

    fn write(&self, _batch: &WriteBatch) -> Result<()> {
        Err(read_only())
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
        Err(read_only())
    }

    fn set_timestamps(&self, _stable: Timestamp, _oldest: Timestamp) -> Result<()> {
        Err(read_only())
    }

    fn write_conflict(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool> {
        self.below.write_conflict(ops, at)
    }

    fn prepare(&self, _id: PreparedId, _ops: &[WriteOpRef<'_>], _at: Timestamp) -> Result<()> {
        Err(read_only())
    }

    fn prepare_recovered(
        &self,
        _id: PreparedId,
        _ops: &[WriteOpRef<'_>],
        _at: Timestamp,
    ) -> Result<()> {
        Err(read_only())
    }

    fn commit_prepared(
        &self,
        _id: PreparedId,
        _commit: Timestamp,
        _durable: Timestamp,
    ) -> Result<()> {
        Err(read_only())
    }

    fn abort_prepared(&self, _id: PreparedId) -> Result<()> {
        Err(read_only())
    }

    /// The newest figures: sizes are not kept by time.
    fn stats(&self, table: &str) -> Result<TableStats> {
        self.below.stats(table)
    }

    fn checkpoint(&self) -> Result<()> {
        self.below.checkpoint()
    }

    fn export(&self, _page_bytes: usize, _sink: &mut ExportSink<'_>) -> Result<()> {
        Err(StorageError::Other(
            "an export reads the newest data, not a point in time".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryEngine;

    #[test]
    fn reads_see_the_time_and_writes_are_refused() {
        let below = Arc::new(MemoryEngine::new());
        below.create_table("t").unwrap();
        for (t, v) in [(10, b"old"), (20, b"new")] {
            let op = WriteOpRef::Put {
                table: "t",
                key: b"k",
                value: v,
            };
            below.write_refs_at(&[op], t).unwrap();
        }
        let view = AsOf::new(below, 15);
        assert_eq!(view.get("t", b"k").unwrap().as_deref(), Some(&b"old"[..]));
        let rows = view.scan("t", &KeyRange::all(), false, 10).unwrap();
        assert_eq!(rows, vec![(b"k".to_vec(), b"old".to_vec())]);
        let mut b = WriteBatch::new();
        b.put("t", b"k".to_vec(), b"x".to_vec());
        assert!(view.write(&b).is_err());
        assert!(view.drop_table("t").is_err());
    }
}
