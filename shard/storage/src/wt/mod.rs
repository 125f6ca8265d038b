//! The WiredTiger engine.
//!
//! Concurrency design:
//! WiredTiger sessions are single-threaded, and anything shared that every operation
//! writes to (a pool lock, an atomic counter) turns into a cache-line ping-pong at a few
//! threads. So each calling thread gets its own [`SessionSlot`]: a `WT_SESSION` plus the
//! cursors it has opened, cached per table and reused for the thread's lifetime. The hot
//! path touches only thread-local data and the slot's own mutex, which no other thread
//! takes except `drop_table` and engine shutdown (both rare). The slot is found through
//! a thread-local list keyed by engine id, so several engines can coexist in one process.
//!
//! Writes run in one snapshot transaction per batch and are retried on `WT_ROLLBACK`
//! (WiredTiger rolls back the oldest transaction under eviction pressure even with a
//! single writer, and two writers of one key conflict).

mod ffi;
pub mod format;
mod prepared;
mod timestamps;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{
    Engine, ExportSink, KeyRange, Result, Rows, StorageError, TableStats, Timestamp, WriteBatch,
    WriteOp, WriteOpRef,
};
pub(crate) use ffi::{Code, Connection, Cursor, Session};
use timestamps::{Marks, TsConfig};

/// How long a transaction WiredTiger keeps rolling back is retried before its caller
/// hears of it: a transaction larger than the cache can hold would otherwise be retried
/// for ever.
const ROLLBACK_GIVE_UP: Duration = Duration::from_secs(60);

/// How often the background thread checkpoints unless told otherwise.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(30);

/// Connection options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WtOptions {
    /// WiredTiger cache size in MiB.
    pub cache_mb: usize,
    /// Write-ahead logging. Off once the Raft log is the only WAL: then a crash loses
    /// everything since the last checkpoint, and recovery replays Raft.
    pub log: bool,
    /// fsync the log at each commit (only meaningful with `log`).
    pub sync: bool,
    /// WiredTiger's inexpensive statistics (`statistics=(fast)`), which
    /// [`WiredTigerEngine::pinned_transaction_ids`] reads.
    pub statistics: bool,
}

impl Default for WtOptions {
    fn default() -> Self {
        WtOptions {
            cache_mb: 256,
            log: true,
            sync: false,
            statistics: false,
        }
    }
}

impl WtOptions {
    /// The `wiredtiger_open` configuration string.
    /// The dirty and update triggers are raised from WiredTiger 10's defaults (20% and
    /// 10% of the cache): one write batch may hold 16 MiB of documents, and with a small
    /// cache a transaction whose own updates pass the update trigger is rolled back for
    /// eviction every time it is retried.
    pub fn config_string(&self) -> String {
        format!(
            "create,cache_size={}M,log=(enabled={}),transaction_sync=(enabled={},method=fsync),\
             session_max=1024,statistics=({}),eviction_dirty_trigger=70,\
             eviction_updates_trigger=60",
            self.cache_mb.max(1),
            self.log,
            self.log && self.sync,
            if self.statistics { "fast" } else { "none" },
        )
    }
}

/// Every data session uses snapshot isolation, so a scan sees one consistent state.
/// WiredTiger's own cursor cache is off: we keep cursors open ourselves, so it would add
/// nothing, and with it off a cursor closed by `drop_table` really lets go of the table.
const SESSION_CONFIG: &str = "isolation=snapshot,cache_cursors=false";
const TABLE_CONFIG: &str = "key_format=u,value_format=u";
/// Prefix of our table URIs; it keeps user names clear of WiredTiger's reserved names.
const URI_PREFIX: &str = "table:b_";

pub struct WiredTigerEngine {
    inner: Arc<Inner>,
    checkpointer: Option<Checkpointer>,
}

struct Inner {
    /// Distinguishes engines in the thread-local session lists. Ids are never reused.
    id: u64,
    /// Every slot ever handed to a thread; used only by `drop_table` and shutdown.
    slots: Mutex<Vec<Arc<SessionSlot>>>,
    /// Serializes create/drop and guards the session they use.
    ddl: Mutex<Session>,
    /// The stable and oldest timestamps last set on `conn`.
    marks: Marks,
    /// Open prepared transactions, each on a session of its own (closed, which rolls
    /// the transaction back, before `conn`).
    prepared: Mutex<HashMap<crate::PreparedId, prepared::Held>>,
    /// Dropped after every session above is closed.
    conn: Connection,
    /// Declared after `conn`, so it is gone only once the connection is closed (see
    /// `CloseWatch`).
    open: Arc<()>,
}

/// Tells whether an engine's WiredTiger connection has closed. An engine closes when its
/// last reference goes, and a checkpoint running at that moment holds one a little
/// longer; closing then writes the checkpoint's metadata by path. Whoever deletes or
/// reopens the directory in the same process (a test restarting a member) waits for
/// `is_closed` first, or the old connection's last writes land in the new one's files.
#[derive(Clone)]
pub struct CloseWatch(std::sync::Weak<()>);

impl CloseWatch {
    pub fn is_closed(&self) -> bool {
        self.0.strong_count() == 0
    }
}

/// One thread's session. `None` once closed (thread exit or engine shutdown).
struct SessionSlot {
    state: Mutex<Option<SessionState>>,
    /// Set when the state is gone for good, so threads can prune their lists.
    closed: AtomicBool,
}

struct SessionState {
    /// Declared before `session` so the cursors close first.
    cursors: HashMap<String, TableCursors>,
    keys: KeyBuf,
    session: Session,
}

struct TableCursors {
    /// `overwrite=true`: put, delete, get, scan.
    main: Cursor,
    /// `overwrite=false`, opened on first `Insert`: fails with WT_DUPLICATE_KEY.
    insert: Option<Cursor>,
}

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_SESSIONS: ThreadSessions = const { ThreadSessions(RefCell::new(Vec::new())) };
}

/// This thread's slots, one per engine it has used.
struct ThreadSessions(RefCell<Vec<(u64, Arc<SessionSlot>)>>);

impl Drop for ThreadSessions {
    /// Thread exit: close our sessions (if their engines are still open) so they don't
    /// accumulate in the connection. The slot lock orders this against engine shutdown.
    fn drop(&mut self) {
        for (_, slot) in self.0.get_mut().drain(..) {
            slot.close();
        }
    }
}

impl SessionSlot {
    /// Closes the session while holding the slot's lock. Engine shutdown closes every
    /// slot before the connection, so it must wait for a thread that is closing its own
    /// session at exit: taking the state out and closing it after the lock is released
    /// let the connection close first, and the session's close then touched freed memory
    /// (a segfault seen 1 run in 25 of the conformance suite).
    fn close(&self) {
        let mut state = self.state.lock();
        *state = None;
        self.closed.store(true, Ordering::Release);
    }
}

impl WiredTigerEngine {
    /// Opens (creating if needed) a database in `dir` with logging on and no fsync.
    pub fn open(dir: &Path, cache_mb: usize) -> Result<Self> {
        Self::open_with(
            dir,
            WtOptions {
                cache_mb,
                ..WtOptions::default()
            },
        )
    }

    pub fn open_with(dir: &Path, options: WtOptions) -> Result<Self> {
        Self::open_with_interval(dir, options, Some(DEFAULT_CHECKPOINT_INTERVAL))
    }

    /// `checkpoint_interval: None` disables the background checkpoint thread.
    pub fn open_with_interval(
        dir: &Path,
        options: WtOptions,
        checkpoint_interval: Option<Duration>,
    ) -> Result<Self> {
        // wiredtiger_open fails with a misleading salvage message on a missing directory.
        std::fs::create_dir_all(dir)?;
        format::check_or_record(dir)?;
        let conn = Connection::open(dir, &options.config_string())
            .map_err(|c| wt_error(c, "wiredtiger_open"))?;
        let mut ddl = data_session(&conn)?;
        if let Err(e) = drop_export_checkpoints(&mut ddl) {
            // Not a reason to refuse the data: such a checkpoint only holds disk space.
            tracing::warn!(error = %e, "export checkpoints left by an earlier process were not dropped");
        }
        let inner = Arc::new(Inner {
            id: NEXT_ENGINE_ID.fetch_add(1, Ordering::Relaxed),
            slots: Mutex::new(Vec::new()),
            ddl: Mutex::new(ddl),
            marks: Marks::recovered(&conn),
            prepared: Mutex::new(HashMap::new()),
            conn,
            open: Arc::new(()),
        });
        let checkpointer = match checkpoint_interval {
            Some(every) => Some(Checkpointer::start(Arc::downgrade(&inner), every)?),
            None => None,
        };
        tracing::info!(dir = %dir.display(), ?options, "opened WiredTiger");
        Ok(WiredTigerEngine {
            inner,
            checkpointer,
        })
    }

    pub fn close_watch(&self) -> CloseWatch {
        CloseWatch(Arc::downgrade(&self.inner.open))
    }

    /// The named checkpoints exports hold now (each keeps its pages allocated in the files
    /// until the export ends).
    pub fn export_checkpoints(&self) -> Result<Vec<String>> {
        let mut session = data_session(&self.inner.conn)?;
        export_checkpoint_names(&mut session)
    }

    /// How many transaction IDs the oldest running transaction holds back (WiredTiger's
    /// "transaction range of IDs currently pinned"): WiredTiger keeps every version newer
    /// than that transaction's snapshot. Needs [`WtOptions::statistics`].
    pub fn pinned_transaction_ids(&self) -> Result<i64> {
        let mut session = data_session(&self.inner.conn)?;
        let mut stats = session
            .open_cursor("statistics:", None)
            .map_err(|c| wt_error(c, "open statistics cursor"))?;
        stats
            .statistic(ffi::STAT_TXN_PINNED_RANGE)
            .map_err(|c| wt_error(c, "read statistic"))
    }
}

impl Drop for WiredTigerEngine {
    fn drop(&mut self) {
        // Stop the checkpointer first; it holds only a Weak, so `inner` then drops here.
        if let Some(c) = self.checkpointer.take() {
            c.stop();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Close every thread's session before the connection (field order closes `ddl`
        // before `conn`). Threads still alive find their slot empty and prune it.
        for slot in self.slots.get_mut().drain(..) {
            slot.close();
        }
    }
}

impl Inner {
    /// Runs `f` with this thread's session, opening it on first use.
    fn with_session<R>(&self, f: impl FnOnce(&mut SessionState) -> Result<R>) -> Result<R> {
        THREAD_SESSIONS.with(|ts| {
            {
                let list = ts.0.borrow();
                if let Some((_, slot)) = list.iter().find(|(id, _)| *id == self.id) {
                    let mut guard = slot.state.lock();
                    if let Some(state) = guard.as_mut() {
                        return f(state);
                    }
                }
            }
            let slot = self.register_thread(&mut ts.0.borrow_mut())?;
            let mut guard = slot.state.lock();
            let state = guard.as_mut().expect("freshly opened slot");
            f(state)
        })
    }

    #[cold]
    fn register_thread(&self, list: &mut Vec<(u64, Arc<SessionSlot>)>) -> Result<Arc<SessionSlot>> {
        list.retain(|(id, slot)| *id != self.id && !slot.closed.load(Ordering::Acquire));
        let session = data_session(&self.conn)?;
        let slot = Arc::new(SessionSlot {
            state: Mutex::new(Some(SessionState {
                cursors: HashMap::new(),
                keys: KeyBuf::default(),
                session,
            })),
            closed: AtomicBool::new(false),
        });
        let mut all = self.slots.lock();
        all.retain(|s| !s.closed.load(Ordering::Acquire));
        all.push(slot.clone());
        list.push((self.id, slot.clone()));
        Ok(slot)
    }

    fn checkpoint_with_new_session(&self) -> Result<()> {
        let mut s = data_session(&self.conn)?;
        s.checkpoint(None).map_err(|c| wt_error(c, "checkpoint"))
    }
}

impl SessionState {
    /// The cached cursors for `table` (opened on first use), with the session and key
    /// buffer borrowed alongside.
    fn table<'a>(&'a mut self, table: &'a str) -> Result<TableOps<'a>> {
        // Two lookups instead of `entry` so the hot path doesn't allocate the key.
        if !self.cursors.contains_key(table) {
            let main = self
                .session
                .open_cursor(&table_uri(table), None)
                .map_err(|c| open_error(c, table))?;
            self.cursors
                .insert(table.to_owned(), TableCursors { main, insert: None });
        }
        Ok(TableOps {
            table,
            cursors: self.cursors.get_mut(table).expect("just inserted"),
            keys: &mut self.keys,
            session: &mut self.session,
        })
    }

    /// Runs the batch's ops inside an open transaction. Errors are returned raw so the
    /// caller can tell a retryable rollback from a final failure.
    fn apply<'a>(
        &mut self,
        ops: impl Iterator<Item = WriteOpRef<'a>>,
    ) -> std::result::Result<(), OpError> {
        for op in ops {
            let mut t = self.table(op.table()).map_err(OpError::Final)?;
            match op {
                WriteOpRef::Put { key, value, .. } => t.put(key, value)?,
                WriteOpRef::Insert { key, value, .. } => t.insert(key, value)?,
                WriteOpRef::Delete { key, .. } => t.delete(key)?,
            }
        }
        Ok(())
    }
}

/// WiredTiger rejects zero-length keys ("Empty keys not permitted"), but the trait allows
/// them. Every stored key is therefore the user key behind one constant tag byte: order is
/// unchanged (a common prefix), and the empty key becomes `[KEY_TAG]`. Encoding reuses a
/// per-session buffer, so it costs a short memcpy and no allocation.
const KEY_TAG: u8 = 0x01;

#[derive(Default)]
struct KeyBuf(Vec<u8>);

impl KeyBuf {
    fn encode(&mut self, key: &[u8]) -> &[u8] {
        self.0.clear();
        self.0.push(KEY_TAG);
        self.0.extend_from_slice(key);
        &self.0
    }
}

fn decode_key(stored: &[u8]) -> &[u8] {
    debug_assert_eq!(stored.first(), Some(&KEY_TAG), "key without tag byte");
    stored.get(1..).unwrap_or_default()
}

/// One table's cursors plus what operating on them needs, borrowed from a `SessionState`.
struct TableOps<'a> {
    table: &'a str,
    cursors: &'a mut TableCursors,
    keys: &'a mut KeyBuf,
    session: &'a mut Session,
}

impl TableOps<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> std::result::Result<(), OpError> {
        let k = self.keys.encode(key);
        self.cursors
            .main
            .insert(k, value)
            .map_err(|e| OpError::wt(e, "insert"))
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> std::result::Result<(), OpError> {
        if self.cursors.insert.is_none() {
            let c = self
                .session
                .open_cursor(&table_uri(self.table), Some("overwrite=false"))
                .map_err(|c| OpError::Final(open_error(c, self.table)))?;
            self.cursors.insert = Some(c);
        }
        let c = self.cursors.insert.as_mut().expect("just opened");
        match c.insert(self.keys.encode(key), value) {
            Ok(()) => Ok(()),
            Err(Code::DUPLICATE_KEY) => Err(OpError::Final(StorageError::KeyExists {
                table: self.table.to_owned(),
            })),
            Err(e) => Err(OpError::wt(e, "insert")),
        }
    }

    fn delete(&mut self, key: &[u8]) -> std::result::Result<(), OpError> {
        match self.cursors.main.remove(self.keys.encode(key)) {
            Ok(()) | Err(Code::NOTFOUND) => Ok(()),
            Err(e) => Err(OpError::wt(e, "remove")),
        }
    }

    /// Auto-commit point read (no explicit transaction: one search is atomic anyway),
    /// or a read in a transaction at `at`.
    fn get(&mut self, key: &[u8], at: Option<Timestamp>) -> Result<Option<Vec<u8>>> {
        if at.is_some() {
            return self.in_snapshot(at, |c, keys| {
                Ok(c.search(keys.encode(key))?.map(<[u8]>::to_vec))
            });
        }
        let c = &mut self.cursors.main;
        let k = self.keys.encode(key);
        // Even an auto-commit read can be picked as an eviction victim.
        let r = retry_on_rollback(|| match c.search(k) {
            Ok(v) => Ok(v.map(<[u8]>::to_vec)),
            Err(e) => Err(OpError::wt(e, "search")),
        });
        // Release the page the cursor pins; also drops WiredTiger's pointer to our key.
        reset(c)?;
        r
    }

    /// Runs `read` over the main cursor inside one snapshot transaction (reading as of
    /// `at` if given), retried on rollback. Read-only, so the transaction ends with a
    /// (cheap) rollback, which also resets the cursor.
    fn in_snapshot<R>(
        &mut self,
        at: Option<Timestamp>,
        mut read: impl FnMut(&mut Cursor, &mut KeyBuf) -> ffi::WtResult<R>,
    ) -> Result<R> {
        let TableOps {
            cursors,
            keys,
            session,
            ..
        } = self;
        let config = at.map(|t| TsConfig::new(&[("read_timestamp", t)]));
        retry_on_rollback(|| {
            match &config {
                Some(c) => session.begin_with(c.as_cstr()),
                None => session.begin(),
            }
            .map_err(|e| match (e, at) {
                // The oldest timestamp moved past `at` since the caller checked it.
                (Code::EINVAL, Some(read)) => {
                    OpError::Final(StorageError::SnapshotTooOld { read, oldest: 0 })
                }
                _ => OpError::wt(e, "begin_transaction"),
            })?;
            let r = read(&mut cursors.main, keys);
            let end = session.rollback();
            let out = r.map_err(|e| OpError::wt(e, "read"))?;
            end.map_err(|e| OpError::wt(e, "rollback_transaction"))?;
            Ok(out)
        })
    }
}

/// Failure of one attempt at a transaction.
enum OpError {
    /// WT_ROLLBACK: roll back, back off, and run the whole transaction again.
    Retry,
    Final(StorageError),
}

impl OpError {
    fn wt(code: Code, what: &str) -> OpError {
        match code {
            Code::ROLLBACK => OpError::Retry,
            // The caller names the table (`in_table`).
            Code::PREPARE_CONFLICT => OpError::Final(StorageError::PrepareConflict {
                table: String::new(),
            }),
            _ => OpError::Final(wt_error(code, what)),
        }
    }
}

/// Runs `attempt` until it does not ask for a retry. Backoff grows from 10µs to 10ms with
/// no deadline: a rollback means another transaction made progress, so we will too.
fn retry_on_rollback<R>(mut attempt: impl FnMut() -> std::result::Result<R, OpError>) -> Result<R> {
    let mut backoff = Duration::from_micros(10);
    let mut tries: u64 = 0;
    let started = std::time::Instant::now();
    loop {
        match attempt() {
            Ok(r) => return Ok(r),
            Err(OpError::Final(e)) => return Err(e),
            Err(OpError::Retry) if started.elapsed() > ROLLBACK_GIVE_UP => {
                return Err(StorageError::WiredTiger {
                    code: Code::ROLLBACK.0,
                    message: format!(
                        "the transaction was rolled back {tries} times in {}s: it may need \
                         more of the cache than WiredTiger can give it",
                        ROLLBACK_GIVE_UP.as_secs()
                    ),
                })
            }
            Err(OpError::Retry) => {
                tries += 1;
                if tries >= 1024 && tries.is_power_of_two() {
                    tracing::warn!(tries, "WiredTiger transaction still rolling back");
                }
                if tries > 2 {
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(10));
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl WiredTigerEngine {
    /// Applies `ops` in one transaction, committed at `commit` if given, from the start
    /// again if WiredTiger rolls it back (so they are an iterator that can be cloned).
    fn write_ops<'a>(
        &self,
        ops: impl Iterator<Item = WriteOpRef<'a>> + Clone,
        commit: Option<Timestamp>,
    ) -> Result<()> {
        let config = commit.map(|t| TsConfig::new(&[("commit_timestamp", t)]));
        let mut ops = ops.peekable();
        if ops.peek().is_none() {
            return Ok(());
        }
        self.inner.with_session(|st| {
            retry_on_rollback(|| {
                st.session
                    .begin()
                    .map_err(|e| OpError::wt(e, "begin_transaction"))?;
                match st.apply(ops.clone()) {
                    // A failed commit has already rolled back; WT_ROLLBACK retries.
                    Ok(()) => match &config {
                        Some(c) => st.session.commit_with(c.as_cstr()),
                        None => st.session.commit(),
                    }
                    .map_err(|e| OpError::wt(e, "commit_transaction")),
                    Err(e) => {
                        if let Err(code) = st.session.rollback() {
                            return Err(OpError::Final(wt_error(code, "rollback_transaction")));
                        }
                        Err(e)
                    }
                }
            })
        })
    }
}

impl WiredTigerEngine {
    /// [`Engine::write_conflict`]: a dry run of the writes in a transaction reading at
    /// `at`, rolled back whatever happens. WiredTiger refuses to update a key whose newest
    /// version its snapshot cannot see (WT_ROLLBACK). An eviction can refuse the same way,
    /// so a refusal is tried again a few times before it counts as a conflict.
    fn dry_run_conflicts(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool> {
        const TRIES: usize = 3;
        let config = TsConfig::new(&[("read_timestamp", at)]);
        self.inner.with_session(|st| {
            for _ in 0..TRIES {
                st.session
                    .begin_with(config.as_cstr())
                    .map_err(|e| match e {
                        Code::EINVAL => StorageError::SnapshotTooOld {
                            read: at,
                            oldest: self.inner.marks.oldest(),
                        },
                        e => wt_error(e, "begin_transaction"),
                    })?;
                let tried = ops.iter().try_for_each(|op| {
                    // Every op as an overwrite: each one meets the same visibility check.
                    st.table(op.table())
                        .map_err(OpError::Final)?
                        .put(op.key(), b"")
                });
                st.session
                    .rollback()
                    .map_err(|e| wt_error(e, "rollback_transaction"))?;
                match tried {
                    Ok(()) => return Ok(false),
                    Err(OpError::Retry) => std::thread::yield_now(),
                    Err(OpError::Final(e)) => return Err(e),
                }
            }
            Ok(true)
        })
    }

    fn scan_maybe_at(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Option<Timestamp>,
    ) -> Result<Rows> {
        crate::prepare_wait::waiting(|| {
            self.inner
                .with_session(|st| {
                    let mut t = st.table(table)?; // reports a missing table even for limit 0
                    if limit == 0 {
                        return Ok(Vec::new());
                    }
                    t.in_snapshot(at, |c, keys| scan_cursor(c, keys, range, reverse, limit))
                })
                .map_err(|e| in_table(e, table))
        })
    }

    /// Names the oldest timestamp in a too-old error raised inside a read.
    fn too_old(&self, e: StorageError) -> StorageError {
        match e {
            StorageError::SnapshotTooOld { read, .. } => StorageError::SnapshotTooOld {
                read,
                oldest: self.inner.marks.oldest(),
            },
            e => e,
        }
    }
}

impl Engine for WiredTigerEngine {
    fn create_table(&self, name: &str) -> Result<()> {
        let uri = table_uri(name);
        let mut ddl = self.inner.ddl.lock();
        retry_busy(|| ddl.create(&uri, TABLE_CONFIG), "create")
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        let uri = table_uri(name);
        let mut ddl = self.inner.ddl.lock();
        // Every thread may hold a cached cursor on the table, and WiredTiger refuses to
        // drop an object with open cursors (EBUSY). Lock every slot, close its cursors on
        // this table, and drop while still holding the locks so none is reopened. A thread
        // blocked here is never inside WiredTiger (it takes its lock before any call, and
        // leaves no transaction open or cursor positioned when it releases it), so this
        // cannot deadlock with WiredTiger's own locks. DDL is rare; the stall is short.
        // The slot list stays locked too: a thread that registers its first session
        // during the drop would otherwise open a cursor on the table behind our back and
        // keep it busy until the drop gave up (it waits in `register_thread`, holding no
        // lock and outside WiredTiger, until the drop is done).
        let slots = self.inner.slots.lock();
        let mut guards: Vec<_> = slots.iter().map(|s| s.state.lock()).collect();
        for g in guards.iter_mut() {
            if let Some(state) = g.as_mut() {
                state.cursors.remove(name);
            }
        }
        // force: succeed if the table does not exist.
        let r = retry_busy(|| ddl.drop_object(&uri, "force=true"), "drop");
        drop(guards);
        drop(slots);
        r
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        self.inner.with_session(|st| table_names(&mut st.session))
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::prepare_wait::waiting(|| {
            self.inner
                .with_session(|st| st.table(table)?.get(key, None))
                .map_err(|e| in_table(e, table))
        })
    }

    fn scan(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_maybe_at(table, range, reverse, limit, None)
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_ops(batch.ops.iter().map(WriteOp::as_ref), None)
    }

    fn write_refs(&self, ops: &[WriteOpRef<'_>]) -> Result<()> {
        self.write_ops(ops.iter().copied(), None)
    }

    fn get_at(&self, table: &str, key: &[u8], at: Timestamp) -> Result<Option<Vec<u8>>> {
        self.inner.marks.check_read(at)?;
        crate::prepare_wait::waiting(|| {
            self.inner
                .with_session(|st| st.table(table)?.get(key, Some(at)))
                .map_err(|e| in_table(self.too_old(e), table))
        })
    }

    fn scan_at(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Timestamp,
    ) -> Result<Rows> {
        self.inner.marks.check_read(at)?;
        self.scan_maybe_at(table, range, reverse, limit, Some(at))
            .map_err(|e| self.too_old(e))
    }

    fn write_refs_at(&self, ops: &[WriteOpRef<'_>], commit: Timestamp) -> Result<()> {
        self.write_ops(ops.iter().copied(), Some(commit))
    }

    fn set_timestamps(&self, stable: Timestamp, oldest: Timestamp) -> Result<()> {
        self.inner.marks.advance(&self.inner.conn, stable, oldest)
    }

    fn write_conflict(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool> {
        self.inner.marks.check_read(at)?;
        self.dry_run_conflicts(ops, at)
    }

    fn prepare(&self, id: crate::PreparedId, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<()> {
        let held = (&self.inner.prepared, &self.inner.marks);
        prepared::prepare(&self.inner.conn, held, id, ops, at, false)
    }

    fn prepare_recovered(
        &self,
        id: crate::PreparedId,
        ops: &[WriteOpRef<'_>],
        at: Timestamp,
    ) -> Result<()> {
        let held = (&self.inner.prepared, &self.inner.marks);
        prepared::prepare(&self.inner.conn, held, id, ops, at, true)
    }

    fn commit_prepared(
        &self,
        id: crate::PreparedId,
        commit: Timestamp,
        durable: Timestamp,
    ) -> Result<()> {
        prepared::commit(&self.inner.prepared, &self.inner.marks, id, commit, durable)
    }

    fn abort_prepared(&self, id: crate::PreparedId) -> Result<()> {
        prepared::abort(&self.inner.prepared, id)
    }

    /// Counts with a full scan in one snapshot: exact, but O(table). WiredTiger's
    /// statistics cursor would be O(1), but its entry count is only maintained for
    /// checkpointed pages, so it lags behind recent writes. Good enough until `stats`
    /// shows up in a profile.
    fn stats(&self, table: &str) -> Result<TableStats> {
        self.inner.with_session(|st| {
            st.table(table)?.in_snapshot(None, |c, _| {
                let mut stats = TableStats::default();
                while c.next()? {
                    let k = decode_key(c.key()?).len();
                    let v = c.value()?.len();
                    stats.entries += 1;
                    stats.bytes += (k + v) as u64;
                }
                Ok(stats)
            })
        })
    }

    fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint_with_new_session()
    }

    /// Reads a named checkpoint made for this export, not a transaction: a transaction
    /// held open for the whole copy (minutes for a large set) would make WiredTiger keep
    /// every version written meanwhile in the cache, where they cannot be evicted. A
    /// checkpoint's pages are on disk and are read like any other. The checkpoint and the
    /// table list are made under the DDL lock, so they name the same tables. Each page
    /// opens its cursor afresh and closes it before `sink` runs: a cursor left open would
    /// make a concurrent `drop_table` of that table wait (EBUSY).
    fn export(&self, page_bytes: usize, sink: &mut ExportSink<'_>) -> Result<()> {
        let mut session = data_session(&self.inner.conn)?;
        let name = format!(
            "{EXPORT_CHECKPOINT}{}",
            NEXT_EXPORT.fetch_add(1, Ordering::Relaxed)
        );
        let tables = {
            let _ddl = self.inner.ddl.lock();
            session
                .checkpoint(Some(&format!("name={name}")))
                .map_err(|c| wt_error(c, "export checkpoint"))?;
            table_names(&mut session)
        };
        let r =
            tables.and_then(|t: Vec<String>| export_in(&mut session, &name, &t, page_bytes, sink));
        // Its pages stay allocated in the files until it is dropped. A process that stops
        // before this drops it at its next open (`drop_export_checkpoints`).
        if let Err(c) = retry_busy(
            || session.checkpoint(Some(&format!("drop=({name})"))),
            "drop export checkpoint",
        ) {
            tracing::warn!(error = %c, checkpoint = %name, "export checkpoint left for the next open");
        }
        r
    }
}

/// Named checkpoints made for exports are called this, then a number.
const EXPORT_CHECKPOINT: &str = "bulwark_export_";
static NEXT_EXPORT: AtomicU64 = AtomicU64::new(0);

/// The export checkpoints in the files' metadata, which lists each file's checkpoints by
/// name.
fn export_checkpoint_names(session: &mut Session) -> Result<Vec<String>> {
    let mut names = std::collections::BTreeSet::new();
    let mut meta = session
        .open_cursor("metadata:", None)
        .map_err(|c| wt_error(c, "open metadata cursor"))?;
    while meta.next().map_err(|c| wt_error(c, "metadata next"))? {
        // A file's entry lists its checkpoints as `checkpoint=(<name>=(...),...)`. Other
        // entries may hold a table's name, which may look like one.
        if !meta
            .key_str()
            .map_err(|c| wt_error(c, "metadata key"))?
            .starts_with("file:")
        {
            continue;
        }
        let config = meta
            .value_str()
            .map_err(|c| wt_error(c, "metadata value"))?;
        for (at, _) in config.match_indices(EXPORT_CHECKPOINT) {
            let listed = at > 0 && matches!(config.as_bytes()[at - 1], b'(' | b',');
            let rest = &config[at + EXPORT_CHECKPOINT.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if listed && !digits.is_empty() && rest[digits.len()..].starts_with("=(") {
                names.insert(format!("{EXPORT_CHECKPOINT}{digits}"));
            }
        }
    }
    Ok(names.into_iter().collect())
}

/// Drops the export checkpoints a process that stopped mid-export left behind.
fn drop_export_checkpoints(session: &mut Session) -> Result<()> {
    let names = export_checkpoint_names(session)?;
    if names.is_empty() {
        return Ok(());
    }
    tracing::info!(checkpoints = ?names, "dropping export checkpoints left by an earlier process");
    session
        .checkpoint(Some(&format!("drop=({})", names.join(","))))
        .map_err(|c| wt_error(c, "drop export checkpoints"))
}

/// Our tables, sorted, from WiredTiger's metadata.
fn table_names(session: &mut Session) -> Result<Vec<String>> {
    let mut meta = session
        .open_cursor("metadata:", None)
        .map_err(|c| wt_error(c, "open metadata cursor"))?;
    let mut names = Vec::new();
    while meta.next().map_err(|c| wt_error(c, "metadata next"))? {
        let key = meta.key_str().map_err(|c| wt_error(c, "metadata key"))?;
        if let Some(escaped) = key.strip_prefix(URI_PREFIX) {
            names.push(unescape_name(escaped));
        }
    }
    names.sort();
    Ok(names)
}

fn export_in(
    session: &mut Session,
    checkpoint: &str,
    tables: &[String],
    page_bytes: usize,
    sink: &mut ExportSink<'_>,
) -> Result<()> {
    let mut keys = KeyBuf::default();
    let config = format!("checkpoint={checkpoint}");
    for name in tables {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (page, more) = {
                let mut c = session
                    .open_cursor(&table_uri(name), Some(&config))
                    .map_err(|c| open_error(c, name))?;
                export_page(&mut c, &mut keys, after.as_deref(), page_bytes)
                    .map_err(|c| wt_error(c, "export read"))?
            };
            let last = page.last().map(|(k, _)| k.clone());
            sink(name, page)?;
            match last {
                Some(k) if more => after = Some(k),
                _ => break,
            }
        }
    }
    Ok(())
}

/// Up to about `page_bytes` of rows after the key `after` (from the first without it),
/// from an unpositioned cursor, and whether rows remain after them.
fn export_page(
    c: &mut Cursor,
    keys: &mut KeyBuf,
    after: Option<&[u8]>,
    page_bytes: usize,
) -> ffi::WtResult<(Rows, bool)> {
    let mut out = Vec::new();
    let mut bytes = 0;
    let mut more = match after {
        Some(k) => match c.search_near(keys.encode(k))? {
            None => false,
            Some(exact) if exact <= 0 => c.next()?,
            Some(_) => true,
        },
        None => c.next()?,
    };
    while more && bytes < page_bytes {
        let key = decode_key(c.key()?).to_vec();
        let value = c.value()?.to_vec();
        bytes += key.len() + value.len();
        out.push((key, value));
        more = c.next()?;
    }
    Ok((out, more))
}

/// Collects up to `limit` entries of `range` from an unpositioned cursor.
fn scan_cursor(
    c: &mut Cursor,
    keys: &mut KeyBuf,
    range: &KeyRange,
    reverse: bool,
    limit: usize,
) -> ffi::WtResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    // Position on the first candidate; `search_near` lands on a neighbour of the bound,
    // so step once if it landed on the wrong side (or on an excluded bound itself).
    let mut more = if !reverse {
        match &range.start {
            Bound::Unbounded => c.next()?,
            Bound::Included(s) => match c.search_near(keys.encode(s))? {
                None => false,
                Some(exact) if exact < 0 => c.next()?,
                Some(_) => true,
            },
            Bound::Excluded(s) => match c.search_near(keys.encode(s))? {
                None => false,
                Some(exact) if exact <= 0 => c.next()?,
                Some(_) => true,
            },
        }
    } else {
        match &range.end {
            Bound::Unbounded => c.prev()?,
            Bound::Included(e) => match c.search_near(keys.encode(e))? {
                None => false,
                Some(exact) if exact > 0 => c.prev()?,
                Some(_) => true,
            },
            Bound::Excluded(e) => match c.search_near(keys.encode(e))? {
                None => false,
                Some(exact) if exact >= 0 => c.prev()?,
                Some(_) => true,
            },
        }
    };
    while more && out.len() < limit {
        let key = decode_key(c.key()?);
        let outside = if reverse {
            range.before_start(key)
        } else {
            range.after_end(key)
        };
        if outside {
            break;
        }
        let key = key.to_vec();
        let value = c.value()?.to_vec();
        out.push((key, value));
        more = if reverse { c.prev()? } else { c.next()? };
    }
    Ok(out)
}

fn reset(c: &mut Cursor) -> Result<()> {
    c.reset().map_err(|e| wt_error(e, "cursor reset"))
}

/// Schema operations can meet EBUSY from a checkpoint or WiredTiger's handle sweep
/// holding the table for a moment; retry those for up to ~10 s.
fn retry_busy(mut op: impl FnMut() -> ffi::WtResult<()>, what: &str) -> Result<()> {
    let mut backoff = Duration::from_millis(1);
    let mut waited = Duration::ZERO;
    loop {
        match op() {
            Ok(()) => return Ok(()),
            Err(Code::EBUSY) if waited < Duration::from_secs(10) => {
                std::thread::sleep(backoff);
                waited += backoff;
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
            Err(c) => return Err(wt_error(c, what)),
        }
    }
}

/// A new session with the data sessions' configuration.
fn data_session(conn: &Connection) -> Result<Session> {
    conn.open_session(SESSION_CONFIG)
        .map_err(|c| wt_error(c, "open_session"))
}

/// Names the table in a prepare conflict, which WiredTiger reports without one.
fn in_table(e: StorageError, table: &str) -> StorageError {
    match e {
        StorageError::PrepareConflict { .. } => StorageError::PrepareConflict {
            table: table.to_owned(),
        },
        e => e,
    }
}

fn wt_error(code: Code, what: &str) -> StorageError {
    StorageError::WiredTiger {
        code: code.0,
        message: format!("{what}: {}", code.message()),
    }
}

fn open_error(code: Code, table: &str) -> StorageError {
    if code == Code::ENOENT {
        StorageError::NoSuchTable(table.to_owned())
    } else {
        wt_error(code, "open_cursor")
    }
}

/// `table:b_<name>`, with every byte outside `[A-Za-z0-9_]` written as `-xx` (hex), so
/// any name (dots, dollars, slashes) maps to a valid, reversible WiredTiger name.
fn table_uri(name: &str) -> String {
    let mut uri = String::with_capacity(URI_PREFIX.len() + name.len());
    uri.push_str(URI_PREFIX);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("-{b:02x}"));
        }
    }
    uri
}

fn unescape_name(escaped: &str) -> String {
    let bytes = escaped.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'-' && i + 3 <= bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The periodic checkpoint thread. It holds a `Weak` so it never keeps the connection open.
struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: JoinHandle<()>,
}

impl Checkpointer {
    fn start(inner: Weak<Inner>, every: Duration) -> Result<Checkpointer> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("wt-checkpoint".into())
            .spawn(move || {
                let (flag, cv) = &*stop2;
                loop {
                    {
                        let mut stopped = flag.lock();
                        if !*stopped {
                            cv.wait_for(&mut stopped, every);
                        }
                        if *stopped {
                            return;
                        }
                    }
                    let Some(inner) = inner.upgrade() else { return };
                    match inner.checkpoint_with_new_session() {
                        Ok(()) => tracing::debug!("checkpoint done"),
                        Err(e) => tracing::warn!(error = %e, "background checkpoint failed"),
                    }
                }
            })?;
        Ok(Checkpointer { stop, handle })
    }

    fn stop(self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if self.handle.join().is_err() {
            tracing::error!("checkpoint thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in ["plain", "db.coll", "a$b/c-d e", "WiredTiger", "ünï", "x-41"] {
            let uri = table_uri(name);
            let esc = uri.strip_prefix(URI_PREFIX).unwrap();
            assert!(esc
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
            assert_eq!(unescape_name(esc), name);
        }
    }

    /// The watch reports the connection open while any reference remains (a running
    /// checkpoint's, here another handle), and closed once the last one is gone.
    #[test]
    fn the_close_watch_waits_for_the_last_reference() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(WiredTigerEngine::open(dir.path(), 8).unwrap());
        let watch = engine.close_watch();
        let held = engine.clone();
        drop(engine);
        assert!(!watch.is_closed());
        drop(held);
        assert!(watch.is_closed());
        WiredTigerEngine::open(dir.path(), 8).expect("the directory is free again");
    }
}
