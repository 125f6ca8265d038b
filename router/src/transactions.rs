//! Multi-document transactions at the router: which shards each session's transaction
//! runs on (its participants), the time it reads at, and the fields its statements
//! carry there.
//!
//! A transaction runs on each participant's primary (`shard::sessions::txn`). Its first
//! statement's shard picks the read time and answers it (`wire::command_fields::
//! TXN_READ_TIME`); a statement that reaches another shard starts the transaction there
//! at that same time (`atClusterTime`), so every participant reads one snapshot. A first
//! statement that reaches several shards at once picks the time itself, as a snapshot
//! read outside a transaction does ([`Transactions::begin_at`]), and each shard it
//! reaches joins as a later statement's would (`sharding::scatter`).
//! `commitTransaction` commits one participant directly, or runs a two-phase commit
//! across several (`commands/commit_transaction.rs`), the first participant
//! coordinating.
//!
//! Like mongos, the router keeps this in memory: a driver runs a transaction through one
//! router, and a transaction this router does not know is answered as the shard answers
//! it, or through the `recoveryToken` the driver sends with its commit.

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
    /// In the order the transaction reached them: the first coordinates its commit.
    participants: Vec<ShardHandle>,
    /// The time the first participant reads at, once it answered.
    read_at: Option<bson::Timestamp>,
    started: Instant,
}

/// How a statement joins its transaction on its shard.
#[derive(Debug, PartialEq)]
pub enum Joined {
    /// It starts the transaction (the client's `startTransaction`), or the shard already
    /// takes part.
    Already,
    /// The shard is new to the transaction: the statement starts it there, reading at
    /// this time.
    New(bson::Timestamp),
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
    /// Records that statement `number` of the session goes to `shard`, and says whether
    /// it must start the transaction there.
    pub fn enlist(
        &self,
        key: SessionKey,
        number: i64,
        start: bool,
        shard: &ShardHandle,
    ) -> MongoResult<Joined> {
        let mut open = self.open.lock();
        if start {
            remember(&mut open, key, number, vec![shard.clone()], None);
            return Ok(Joined::Already);
        }
        let Some(entry) = open.get_mut(&key).filter(|e| e.number == number) else {
            // Not started through this router: the shard knows whether it is open.
            return Ok(Joined::Already);
        };
        if entry.participants.iter().any(|p| p.same_shard(shard)) {
            return Ok(Joined::Already);
        }
        let at = entry.read_at.ok_or_else(|| {
            MongoError::new(
                ErrorCode::NoSuchTransaction,
                format!("Transaction {number} has no read time yet: its first statement failed"),
            )
        })?;
        entry.participants.push(shard.clone());
        Ok(Joined::New(at))
    }

    /// Starts transaction `number` of the session with a statement that reaches several
    /// shards at once: it reads at `at` on each, and each joins as it is reached.
    pub fn begin_at(&self, key: SessionKey, number: i64, at: bson::Timestamp) {
        remember(&mut self.open.lock(), key, number, Vec::new(), Some(at));
    }

    /// The first participant answered the time the transaction reads at.
    pub fn started(&self, key: &SessionKey, number: i64, at: bson::Timestamp) {
        let mut open = self.open.lock();
        if let Some(entry) = open.get_mut(key).filter(|e| e.number == number) {
            entry.read_at.get_or_insert(at);
        }
    }

    /// The shards transaction `number` of the session runs on, first the coordinator, if
    /// this router knows them.
    pub fn participants(&self, key: &SessionKey, number: i64) -> Vec<ShardHandle> {
        let open = self.open.lock();
        open.get(key)
            .filter(|e| e.number == number)
            .map(|e| e.participants.clone())
            .unwrap_or_default()
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

/// Remembers a new transaction of the session (forgetting old ones when there are many).
fn remember(
    open: &mut HashMap<SessionKey, Entry>,
    key: SessionKey,
    number: i64,
    participants: Vec<ShardHandle>,
    read_at: Option<bson::Timestamp>,
) {
    if open.len() >= MAX_REMEMBERED {
        open.retain(|_, e| e.started.elapsed() < REMEMBER);
    }
    open.insert(
        key,
        Entry {
            number,
            participants,
            read_at,
            started: Instant::now(),
        },
    );
}

/// Makes `cmd` a statement of the transaction on a shard as `joined` says: it starts the
/// transaction there at the transaction's read time, or continues it.
pub fn join_fields(cmd: &mut Document, joined: Joined) {
    match joined {
        Joined::New(at) => {
            cmd.insert("startTransaction", true);
            cmd.insert(
                "readConcern",
                bson::doc! {"level": "snapshot", "atClusterTime": at},
            );
        }
        Joined::Already => {
            cmd.remove("startTransaction");
            cmd.remove("readConcern");
        }
    }
}
