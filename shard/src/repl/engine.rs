//! The storage the command layer sees on a replica-set member: reads go straight to
//! WiredTiger; every change (writes and table DDL) becomes an oplog entry, goes through
//! Raft, and returns once it is applied here, which happens only after a majority has
//! it. The command code is the same for a standalone node and a member.

use std::sync::Arc;

use storage::{Engine, Layer, Result, StorageError, WriteBatch};

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
            StorageError::Layer(Box::new(wire::MongoError::new(e.code(), e.to_string())))
        })
    }
}

impl Layer for ReplicatedEngine {
    fn below(&self) -> &dyn Engine {
        self.base.as_ref()
    }

    fn create_layered(&self, name: &str) -> Result<()> {
        self.replicate(OplogEntry::CreateTable(name.to_string()))
    }

    fn drop_layered(&self, name: &str) -> Result<()> {
        self.replicate(OplogEntry::DropTable(name.to_string()))
    }

    fn write_layered(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() && batch.events.is_empty() {
            return Ok(());
        }
        self.replicate(OplogEntry::Write(batch))
    }
}
