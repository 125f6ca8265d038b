//! Multi-document transactions on one replica set, with snapshot isolation.
//!
//! A transaction lives on the primary, in memory, per session (`lsid`) and `txnNumber`.
//! It reads as of one cluster time, the newest this member had applied when it started
//! (or the client's `atClusterTime`), and its writes wait in an overlay that its own
//! reads see ([`view::TxnView`]). No WiredTiger transaction stays open between
//! statements: an open one would hold its updates against the applier, whose writes to
//! the same keys would then be rolled back until it ended.
//!
//! Two open transactions never write the same key: the first to write it holds it until
//! it ends, and the other's write gets WriteConflict (112) at once, as in MongoDB. The
//! router labels it `TransientTransactionError`, so the driver runs that transaction
//! again. `commitTransaction` (`commands/commit_transaction.rs`) writes the overlay as one replicated entry,
//! with the session's record, once no key it writes has a version committed after its
//! read time; a write outside any transaction that got there first makes the commit a
//! WriteConflict too. Unlike MongoDB, writers outside transactions never wait for one.
//!
//! A transaction ends at commit or abort, at an error in one of its statements, after
//! [`LIFETIME`] (MongoDB's `transactionLifetimeLimitSeconds`), or when the member's term
//! changes; its next statement then gets NoSuchTransaction (251).

pub mod decisions;
pub mod view;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use storage::Timestamp;
use wire::{ErrorCode, MongoError, MongoResult};

thread_local! {
    static STAGING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a statement of a transaction) with this thread's writes staged in the
/// transaction's overlay rather than applied: see [`is_staging`].
pub fn staging<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back however `f` ends: a panic in a command is contained, and the
    /// thread goes on to run other commands.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            STAGING.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(STAGING.with(|s| s.replace(true)));
    f()
}

/// Whether this thread's writes are a transaction's, applied only if it commits: the
/// metadata a write changes (an index becoming multikey) must then not be installed in
/// the catalog before the commit applies it. Installed at once, it would outlive an
/// abort, and a later writer would skip the flag the data on disk then needs.
pub fn is_staging() -> bool {
    STAGING.with(Cell::get)
}

/// How long a transaction may run before the member aborts it.
pub const LIFETIME: Duration = Duration::from_secs(60);
/// The most a transaction may write, keys and values together (less on a member with a
/// small cache: `Transactions::for_cache`). Its writes may take
/// several log entries (`repl::txn_parts`), but every member applies them in one storage
/// transaction, which must stay well inside WiredTiger's cache (its default, 256 MiB, holds
/// it with the `_prepared` copy of a prepared one).
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// Transactions one member keeps open at most; their overlays are in memory.
pub const MAX_OPEN: usize = 10_000;
/// What all open transactions' overlays may hold together on one member.
pub const MAX_TOTAL_BYTES: usize = 1024 * 1024 * 1024;

/// The open transactions of this member, by session key (`retry::session_key`).
pub struct Transactions {
    open: Mutex<HashMap<Vec<u8>, Arc<Txn>>>,
    /// The keys open transactions have written, each with its writer (session, number).
    intents: Mutex<HashMap<Slot, Owner>>,
    /// The bytes all open transactions' overlays hold.
    bytes: std::sync::atomic::AtomicUsize,
    /// The most one transaction may write here (`MAX_BYTES`, or less for a small cache).
    max_bytes: usize,
}

impl Default for Transactions {
    fn default() -> Self {
        Transactions {
            open: Mutex::default(),
            intents: Mutex::default(),
            bytes: Default::default(),
            max_bytes: MAX_BYTES,
        }
    }
}

/// A key of a table.
pub type Slot = (String, Vec<u8>);
/// A transaction: its session key and number.
type Owner = (Vec<u8>, i64);

/// One open transaction.
pub struct Txn {
    pub number: i64,
    /// The cluster time every read of the transaction reads at.
    pub read_at: Timestamp,
    /// The member's term when the transaction started: it ends when the term changes.
    pub term: u64,
    started: Instant,
    staged: Mutex<Staged>,
    /// The keys it claimed (`Transactions::claim`), released when it ends.
    claimed: Mutex<Vec<Slot>>,
    /// The bytes of its overlay counted in `Transactions::bytes`, given back when it ends.
    counted: std::sync::atomic::AtomicUsize,
    /// Set when it ends: a cursor it opened serves nothing more (`check_open`).
    ended: std::sync::atomic::AtomicBool,
}

/// What the transaction has written so far.
#[derive(Default)]
pub struct Staged {
    /// The newest value of each key written, by (table, key); `None`: deleted.
    pub writes: BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>,
    pub bytes: usize,
    /// The collections written, whose write locks the commit takes in this order.
    pub namespaces: BTreeSet<String>,
    /// The change events of the writes, in the order they were made (`repl::events`).
    pub events: Vec<u8>,
}

impl Txn {
    pub fn new(number: i64, read_at: Timestamp, term: u64) -> Txn {
        Txn {
            number,
            read_at,
            term,
            started: Instant::now(),
            staged: Mutex::new(Staged::default()),
            claimed: Mutex::new(Vec::new()),
            counted: Default::default(),
            ended: Default::default(),
        }
    }

    pub fn staged(&self) -> parking_lot::MutexGuard<'_, Staged> {
        self.staged.lock()
    }

    fn expired(&self) -> bool {
        self.started.elapsed() > LIFETIME
    }

    /// A cursor the transaction opened serves nothing after it ends (MongoDB kills such
    /// cursors): its writes are committed or gone, and its later batches would read the
    /// snapshot without them.
    pub fn check_open(&self) -> MongoResult<()> {
        if self.ended.load(std::sync::atomic::Ordering::Acquire) {
            return Err(no_such(
                self.number,
                "has ended: the cursors it opened serve nothing more",
            ));
        }
        Ok(())
    }
}

impl Transactions {
    /// The transactions of a member whose WiredTiger cache is `cache_mb` MiB: one
    /// transaction writes at most a quarter of it, so that applying it never stalls on a
    /// cache its own updates fill.
    pub fn for_cache(cache_mb: usize) -> Transactions {
        Transactions {
            max_bytes: MAX_BYTES.min(cache_mb.saturating_mul(1024 * 1024) / 4),
            ..Transactions::default()
        }
    }

    /// The most one transaction may write here, keys and values together.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The session's open transaction, if any.
    pub fn get(&self, session: &[u8]) -> Option<Arc<Txn>> {
        self.open.lock().get(session).cloned()
    }

    /// Opens `txn` for the session, replacing (aborting) an older one, after ending the
    /// transactions that outlived [`LIFETIME`] or began in an older term (this member
    /// has been primary again since: they can never commit).
    pub fn begin(&self, session: &[u8], txn: Arc<Txn>) -> MongoResult<()> {
        let mut open = self.open.lock();
        let ended: Vec<(Vec<u8>, Arc<Txn>)> = open
            .iter()
            .filter(|(s, t)| t.expired() || t.term < txn.term || s.as_slice() == session)
            .map(|(s, t)| (s.clone(), t.clone()))
            .collect();
        for (s, t) in &ended {
            open.remove(s);
            self.release(s, t);
        }
        if open.len() >= MAX_OPEN {
            return Err(MongoError::new(
                ErrorCode::ExceededMemoryLimit,
                format!("this member already has {MAX_OPEN} open transactions"),
            ));
        }
        open.insert(session.to_vec(), txn);
        Ok(())
    }

    /// Ends the session's transaction `number`, if it is the open one.
    pub fn end(&self, session: &[u8], number: i64) {
        let mut open = self.open.lock();
        if let Some(t) = open.get(session).filter(|t| t.number == number).cloned() {
            open.remove(session);
            self.release(session, &t);
        }
    }

    /// Counts `txn`'s overlay growing from `from` to `to` bytes, unless all overlays
    /// together would pass [`MAX_TOTAL_BYTES`].
    pub fn account(&self, txn: &Txn, from: usize, to: usize) -> MongoResult<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if to <= from {
            self.bytes.fetch_sub(from - to, SeqCst);
            txn.counted.fetch_sub(from - to, SeqCst);
            return Ok(());
        }
        let grow = to - from;
        if self.bytes.fetch_add(grow, SeqCst) + grow > MAX_TOTAL_BYTES {
            self.bytes.fetch_sub(grow, SeqCst);
            return Err(MongoError::new(
                ErrorCode::ExceededMemoryLimit,
                format!("open transactions on this member hold {MAX_TOTAL_BYTES} bytes already"),
            ));
        }
        txn.counted.fetch_add(grow, SeqCst);
        Ok(())
    }

    /// Gives up the keys `txn` of `session` claimed, and its overlay's bytes.
    fn release(&self, session: &[u8], txn: &Txn) {
        use std::sync::atomic::Ordering::SeqCst;
        txn.ended.store(true, SeqCst);
        self.bytes.fetch_sub(txn.counted.swap(0, SeqCst), SeqCst);
        let mut intents = self.intents.lock();
        for slot in txn.claimed.lock().drain(..) {
            if intents
                .get(&slot)
                .is_some_and(|(s, n)| s.as_slice() == session && *n == txn.number)
            {
                intents.remove(&slot);
            }
        }
    }

    /// Claims `slots` for `txn` of `session`: refused with WriteConflict when another
    /// open transaction wrote one of them first.
    pub fn claim<'a>(
        &self,
        session: &[u8],
        txn: &Txn,
        slots: impl Iterator<Item = &'a Slot> + Clone,
    ) -> MongoResult<()> {
        let open = self.open.lock();
        let mut intents = self.intents.lock();
        let mine = |(s, n): &Owner| s.as_slice() == session && *n == txn.number;
        let alive = |(s, n): &Owner| {
            open.get(s)
                .is_some_and(|t| t.number == *n && !t.expired() && t.term >= txn.term)
        };
        if let Some(slot) = slots
            .clone()
            .find(|slot| intents.get(*slot).is_some_and(|o| !mine(o) && alive(o)))
        {
            return Err(MongoError::new(
                ErrorCode::WriteConflict,
                format!(
                    "another transaction is writing a key of {} (first writer wins)",
                    slot.0
                ),
            ));
        }
        let mut claimed = txn.claimed.lock();
        for slot in slots {
            let owner = (session.to_vec(), txn.number);
            if intents
                .insert(slot.clone(), owner)
                .is_none_or(|o| !mine(&o))
            {
                claimed.push(slot.clone());
            }
        }
        Ok(())
    }

    /// How many transactions are open (`serverStatus`).
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// NoSuchTransaction for transaction `number`, and why.
pub fn no_such(number: i64, why: &str) -> MongoError {
    MongoError::new(
        ErrorCode::NoSuchTransaction,
        format!("Transaction with txnNumber {number} {why}"),
    )
}

/// The transaction is open and usable: not past its lifetime, started in this term.
pub fn check_alive(txn: &Txn, term: u64) -> MongoResult<()> {
    if txn.expired() {
        return Err(no_such(
            txn.number,
            &format!(
                "has been aborted: it ran longer than transactionLifetimeLimitSeconds ({})",
                LIFETIME.as_secs()
            ),
        ));
    }
    if txn.term != term {
        return Err(no_such(
            txn.number,
            "has been aborted: the primary changed since it started",
        ));
    }
    Ok(())
}
