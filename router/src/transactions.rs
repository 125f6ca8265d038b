//! Multi-document transactions at the router: which shard each session's transaction
//! runs on, and the fields its statements carry there.
//!
//! A transaction runs on one shard's primary (`shard::sessions::txn`). The router
//! remembers the shard its first statement went to; `commitTransaction` and
//! `abortTransaction` go there. A statement that would reach another shard, or every
//! shard of a sharded collection, is refused: committing on several shards needs a
//! two-phase commit, which Bulwark does not have yet.
//!
//! Like mongos, the router keeps this in memory: a driver runs a transaction through one
//! router, and a transaction this router does not know is answered as the shard answers
//! it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bson::{Bson, Document};
use parking_lot::Mutex;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::session_cache::{lsid_id, SessionKey};
use crate::shard_client::ShardHandle;

/// How long the router remembers a transaction: the shards end one after 60 s
/// (`transactionLifetimeLimitSeconds`), and a commit may be sent again after that.
const REMEMBER: Duration = Duration::from_secs(180);
/// Transactions the router remembers at most.
const MAX_REMEMBERED: usize = 100_000;

/// Fields a statement of a transaction carries to its shard.
pub const FIELDS: &[&str] = &["txnNumber", "autocommit", "startTransaction", "readConcern"];

/// Commands that end a transaction.
pub const ENDS: &[&str] = &["commitTransaction", "abortTransaction"];

#[derive(Default)]
pub struct Transactions {
    open: Mutex<HashMap<SessionKey, Entry>>,
}

struct Entry {
    number: i64,
    shard: Option<ShardHandle>,
    started: Instant,
}

/// Whether `cmd` is a statement of a transaction (`autocommit: false`).
pub fn in_transaction(cmd: &Document) -> bool {
    cmd.contains_key("autocommit")
}

/// The session and `txnNumber` a statement of a transaction names.
pub fn named(cmd: &Document, uid: [u8; 32]) -> MongoResult<(SessionKey, i64)> {
    let id = cmd.get("lsid").and_then(lsid_id).ok_or_else(|| {
        MongoError::new(
            ErrorCode::InvalidOptions,
            "a transaction needs a session (lsid)",
        )
    })?;
    let number = match cmd.get("txnNumber") {
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => i64::from(*n),
        _ => {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                "a transaction needs a txnNumber",
            ))
        }
    };
    Ok((SessionKey { id, uid }, number))
}

/// Checks what a statement of a transaction may carry: the write concern belongs to its
/// commit, and it reads from the primary.
pub fn check_statement(name: &str, cmd: &Document) -> MongoResult<()> {
    if cmd.contains_key("writeConcern") && !ENDS.contains(&name) {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "Cannot set write concern after starting a transaction",
        ));
    }
    let mode = cmd
        .get_document("$readPreference")
        .ok()
        .and_then(|rp| rp.get_str("mode").ok())
        .unwrap_or("primary");
    if mode != "primary" {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("read preference in a transaction must be primary, not {mode}"),
        ));
    }
    Ok(())
}

impl Transactions {
    /// Records that statement `number` of the session goes to `shard`: the first
    /// statement of a transaction names its shard; a later one must go to the same.
    pub fn enlist(
        &self,
        key: SessionKey,
        number: i64,
        start: bool,
        shard: &ShardHandle,
    ) -> MongoResult<()> {
        let mut open = self.open.lock();
        if start {
            if open.len() >= MAX_REMEMBERED {
                open.retain(|_, e| e.started.elapsed() < REMEMBER);
            }
            open.insert(
                key,
                Entry {
                    number,
                    shard: Some(shard.clone()),
                    started: Instant::now(),
                },
            );
            return Ok(());
        }
        let Some(entry) = open.get_mut(&key).filter(|e| e.number == number) else {
            // Not started through this router: the shard knows whether it is open.
            return Ok(());
        };
        match &entry.shard {
            Some(first) if !first.same_shard(shard) => Err(MongoError::new(
                ErrorCode::IllegalOperation,
                "a transaction that reads or writes more than one shard is not supported \
                 yet: its statements must all reach the shard of its first statement",
            )),
            Some(_) => Ok(()),
            None => {
                entry.shard = Some(shard.clone());
                Ok(())
            }
        }
    }

    /// The shard transaction `number` of the session runs on, if this router knows it.
    pub fn shard_of(&self, key: &SessionKey, number: i64) -> Option<ShardHandle> {
        let open = self.open.lock();
        open.get(key)
            .filter(|e| e.number == number)
            .and_then(|e| e.shard.clone())
    }

    /// Forgets the session's transaction once it has ended (a commit may be sent again,
    /// so a committed transaction is kept until it is old or replaced).
    pub fn forget(&self, key: &SessionKey, number: i64) {
        let mut open = self.open.lock();
        if open.get(key).is_some_and(|e| e.number == number) {
            open.remove(key);
        }
    }
}

/// The error a scatter inside a transaction gets.
pub fn no_scatter() -> MongoError {
    MongoError::new(
        ErrorCode::IllegalOperation,
        "a transaction that reads or writes every shard of a sharded collection is not \
         supported yet: target one shard (include the shard key)",
    )
}
