//! The storage the command layer sees on a replica-set member: reads go straight to
//! WiredTiger; every change (writes and table DDL) becomes an oplog entry, goes through
//! Raft, and returns once it is applied here, which happens only after a majority has
//! it. The command code is the same for a standalone node and a member.

use std::sync::Arc;

use storage::{Engine, KeyRange, Result, StorageError, TableStats, WriteBatch};

use super::entry::OplogEntry;
use super::{ProposeError, Replica};

pub struct ReplicatedEngine {
    pub base: Arc<dyn Engine>,
    pub replica: Arc<Replica>,
}

impl ReplicatedEngine {
    fn replicate(&self, entry: OplogEntry) -> Result<()> {
        self.replica.replicate(entry).map_err(|e| {
            if let ProposeError::KeyExists(table) = &e {
                return StorageError::KeyExists {
                    table: table.clone(),
                };
            }
            let code = e.code();
            StorageError::Replication {
                code: code as i32,
                name: code.name(),
                message: e.to_string(),
            }
        })
    }
}

impl Engine for ReplicatedEngine {
    fn create_table(&self, name: &str) -> Result<()> {
        self.replicate(OplogEntry::CreateTable(name.to_string()))
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        self.replicate(OplogEntry::DropTable(name.to_string()))
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        self.base.list_tables()
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.base.get(table, key)
    }

    fn scan(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.base.scan(table, range, reverse, limit)
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_owned(batch.clone())
    }

    fn write_owned(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.replicate(OplogEntry::Write(batch))
    }

    fn stats(&self, table: &str) -> Result<TableStats> {
        self.base.stats(table)
    }

    fn checkpoint(&self) -> Result<()> {
        self.base.checkpoint()
    }
}
