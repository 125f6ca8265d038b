//! A shard node: storage, catalog and cursors, and the entry point that runs a command.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use storage::Engine;
use wire::{ErrorCode, MongoError};

use crate::catalog::Catalog;
use crate::commands;
use crate::cursor::{Cursors, Deadline};
use crate::error::ShardError;

/// Which storage engine a node runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineKind {
    WiredTiger { dir: PathBuf, cache_mb: usize },
    Memory,
}

pub struct Node {
    pub engine: Arc<dyn Engine>,
    pub catalog: Catalog,
    pub cursors: Arc<Cursors>,
    pub started: Instant,
}

/// What a command handler sees besides its arguments.
pub struct Ctx<'a> {
    pub node: &'a Node,
    pub db: &'a str,
    pub deadline: Deadline,
}

impl Node {
    pub fn open(kind: &EngineKind, cursor_timeout: Duration) -> Result<Arc<Node>, ShardError> {
        let engine: Arc<dyn Engine> = match kind {
            EngineKind::WiredTiger { dir, cache_mb } => {
                std::fs::create_dir_all(dir)?;
                Arc::new(storage::WiredTigerEngine::open(dir, *cache_mb)?)
            }
            EngineKind::Memory => Arc::new(storage::MemoryEngine::default()),
        };
        let catalog =
            Catalog::load(engine.as_ref()).map_err(|e| ShardError::Catalog(e.to_string()))?;
        Ok(Arc::new(Node {
            engine,
            catalog,
            cursors: Cursors::new(cursor_timeout),
            started: Instant::now(),
        }))
    }

    /// Runs one command and returns its reply document (`ok: 1` or an error document).
    /// Blocking: call it from a blocking-capable thread.
    pub fn run_command(&self, db: &str, cmd: &Document, deadline: Deadline) -> Document {
        let Some(name) = cmd.keys().next() else {
            return MongoError::failed_to_parse("empty command").to_document();
        };
        let Some(spec) = commands::lookup(name) else {
            return MongoError::new(
                ErrorCode::CommandNotFound,
                format!("no such command: '{name}'"),
            )
            .to_document();
        };
        if let Err(e) = deadline.check() {
            return e.to_document();
        }
        let ctx = Ctx {
            node: self,
            db,
            deadline,
        };
        match (spec.run)(&ctx, cmd) {
            Ok(mut reply) => {
                if !reply.contains_key("ok") {
                    reply.insert("ok", 1.0);
                }
                reply
            }
            Err(e) => e.to_document(),
        }
    }

    pub fn status(&self) -> Document {
        doc! { "open_cursors": self.cursors.len() as i64, "uptime_secs": self.started.elapsed().as_secs() as i64 }
    }
}
