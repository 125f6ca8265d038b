//! Replication: each shard member is a Raft (raft-rs) replica, and the Raft log is the
//! oplog and the member's only write-ahead log.
//!
//! * `driver` — the thread that owns the `RawNode` (tick, step, propose, persist, apply);
//! * `log` — the durable Raft log (group-committed appends, torn-tail recovery);
//! * `entry` — oplog entries: physical, document-level, idempotent changes;
//! * `engine` — the `Engine` the command layer writes through on a member;
//! * `transport` — Raft messages between members over tonic;
//! * `snapshot` — a member's whole data sent to one that fell behind the compacted log;
//! * `rollback` — the documents of proposals a new primary erased, kept for the operator;
//! * `peers` — asking the other data-bearing members (a primary about their readers);
//! * `config` — the member list (host, site, priority, votes, arbiter).
//!
//! A write is applied on every member only once it is committed (held by a majority), so
//! nothing a member applied is ever rolled back, and an acknowledged write — `w:1` or
//! `w:"majority"` — survives the loss of any minority of members.

pub mod applier;
pub mod config;
pub mod driver;
pub mod engine;
pub mod entry;
pub mod events;
pub mod log;
mod log_pending;
mod log_replay;
pub mod log_store;
mod page_cache;
pub mod peers;
pub mod prepared;
pub mod raft_frame;
pub mod rollback;
pub mod slog_bridge;
pub mod snapshot;
pub mod snapshot_read;
pub mod transport;
pub mod txn_parts;
mod vote_fence;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::mpsc::{channel, sync_channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use raft::StateRole;
use storage::Engine;
use tokio_util::sync::CancellationToken;

pub use config::{MemberConfig, ReplConfig};
use driver::{Driver, Event};
use transport::{Faults, Outbox, RaftService};

/// Table (in the member's own WiredTiger) holding the applied index.
pub const REPL_TABLE: &str = "_repl";
pub const APPLIED_KEY: &[u8] = b"applied";

/// A write that waits for a prepared transaction looks again at least this often.
pub(crate) const PREPARED_RECHECK: Duration = Duration::from_millis(50);

/// Ticks before an arbiter or priority-0 member would start an election: never, in
/// practice (a tick is 100 ms).
const NEVER_ELECTION_TICK: usize = 1 << 40;
/// Ticks ([`driver::TICK`] each) without a leader before a data member campaigns (up
/// to twice this, randomized).
const ELECTION_TICK: usize = 10;

/// Why a proposed change was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Refused before anything was proposed: safe for the router to retry elsewhere.
    #[error("not primary")]
    NotPrimary,
    /// Proposed, then leadership changed: it may or may not commit.
    #[error("primary stepped down while the write was replicating")]
    StateChanged,
    #[error("waiting for replication timed out")]
    Timeout,
    #[error("member is shutting down")]
    Shutdown,
    /// Applied as a no-op because an insert found its key taken (same on every member).
    #[error("duplicate key in table {0}")]
    KeyExists(String),
    /// Refused before anything was proposed: it writes a key of table `{0}` that a
    /// prepared transaction holds (`prepared`). The writer waits and proposes again.
    #[error("a prepared transaction holds a key this write changes in table {0}")]
    PrepareConflict(String),
    /// Applied as a no-op: the commit or abort named a transaction no longer prepared
    /// here (another resolution came first; the same on every member).
    #[error("the transaction is no longer prepared on this shard")]
    NotPrepared,
}

impl From<ProposeError> for wire::MongoError {
    fn from(e: ProposeError) -> Self {
        wire::MongoError::new(e.code(), e.to_string())
    }
}

impl ProposeError {
    /// The MongoDB error a client sees (not for KeyExists, which becomes E11000).
    pub fn code(&self) -> wire::ErrorCode {
        use wire::ErrorCode;
        match self {
            ProposeError::NotPrimary => ErrorCode::NotWritablePrimary,
            ProposeError::StateChanged => ErrorCode::InterruptedDueToReplStateChange,
            ProposeError::Timeout => ErrorCode::WriteConcernFailed,
            ProposeError::Shutdown => ErrorCode::ShutdownInProgress,
            ProposeError::KeyExists(_) => ErrorCode::DuplicateKey,
            ProposeError::PrepareConflict(_) => ErrorCode::LockTimeout,
            ProposeError::NotPrepared => ErrorCode::NoSuchTransaction,
        }
    }
}

/// What the driver last published about this member.
#[derive(Debug, Clone)]
pub struct Status {
    pub role: StateRole,
    pub term: u64,
    pub leader: u64,
    pub commit: u64,
    pub applied: u64,
    pub last_index: u64,
    /// First index still in the Raft log (everything before was compacted).
    pub first_index: u64,
    /// Why replication stopped on this member, if it did (storage failure, too stale).
    pub halted: Option<String>,
    pub writable: bool,
    /// On the primary: each member's highest replicated index and whether it was heard
    /// from within the last election timeout.
    pub matched: Vec<(u64, u64, bool)>,
    /// Snapshots this member has installed since it started.
    pub snapshots_installed: u64,
    /// Snapshots this member has sent whole to other members since it started.
    pub snapshots_served: u64,
    /// Snapshots this member sent whose receiver neither came for the data nor said it
    /// was copying it elsewhere within `SNAPSHOT_FETCH_START` (raft-rs then sends again).
    pub snapshots_unfetched: u64,
    /// The member is replacing its data with a snapshot's (MongoDB's STARTUP2): its
    /// tables are partial, so it serves no reads and reports no secondary.
    pub installing_snapshot: bool,
    /// The member's log is new and it votes for no candidate with history yet
    /// (`vote_fence`).
    pub vote_fenced: bool,
    /// The cluster time and term of the newest applied entry that has a time (0: none
    /// yet in this run).
    pub applied_time: (proto::cluster_clock::ClusterTime, u64),
    pub updated: Instant,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            role: StateRole::Follower,
            term: 0,
            leader: 0,
            commit: 0,
            applied: 0,
            last_index: 0,
            first_index: 1,
            halted: None,
            writable: false,
            matched: Vec::new(),
            snapshots_installed: 0,
            snapshots_served: 0,
            snapshots_unfetched: 0,
            installing_snapshot: false,
            vote_fenced: false,
            applied_time: (0, 0),
            updated: Instant::now(),
        }
    }
}

/// Per-command write settings, set by the command layer for the thread running the
/// command (commands run synchronously on one blocking thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteScope {
    /// The term in which the command read its pre-images; a proposal in another term is
    /// refused, so a pre-image read on a stale member never becomes a write.
    pub term: Option<u64>,
    pub wtimeout: Option<Duration>,
    /// `w: N` (data members that must hold the write); 0 = majority.
    pub w: u32,
}

thread_local! {
    static SCOPE: Cell<WriteScope> = const { Cell::new(WriteScope { term: None, wtimeout: None, w: 0 }) };
}

/// This thread's write settings.
pub fn scope() -> WriteScope {
    SCOPE.with(|s| s.get())
}

/// Runs `f` with `scope` as this thread's write settings.
pub fn with_scope<R>(scope: WriteScope, f: impl FnOnce() -> R) -> R {
    let old = SCOPE.with(|s| s.replace(scope));
    let r = f();
    SCOPE.with(|s| s.set(old));
    r
}

/// Before a member starts: if it stopped in the middle of replacing its data with a
/// snapshot, neither its data nor its log is in a known state. Both are emptied (the
/// Raft term and vote kept: a member must never vote twice in a term), and the primary
/// sends the log or a snapshot again. Call before creating any table.
pub fn recover_interrupted_install(
    base: &dyn Engine,
    log_dir: &std::path::Path,
) -> Result<(), String> {
    if !snapshot::interrupted(log_dir) {
        return Ok(());
    }
    tracing::warn!("a snapshot install was cut short: emptying this member's data");
    for t in base.list_tables().map_err(|e| e.to_string())? {
        base.drop_table(&t).map_err(|e| e.to_string())?;
    }
    base.checkpoint().map_err(|e| e.to_string())?;
    if log::exists(log_dir) {
        let mut log = log::DurableLog::open(log_dir, &[], true).map_err(|e| e.to_string())?;
        log.reset().map_err(|e| e.to_string())?;
    }
    snapshot::installed(log_dir).map_err(|e| e.to_string())
}

/// A running replica-set member.
pub struct Replica {
    pub config: ReplConfig,
    events: Sender<Event>,
    status: Arc<RwLock<Status>>,
    pub faults: Arc<Faults>,
    /// The other members that hold data.
    pub peers: peers::Peers,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Entries proposed here whose proposer gave up at `wtimeout` (see `Unresolved`).
    pub unresolved: Arc<Unresolved>,
    /// The cluster clock the driver stamps proposals with (`proto::cluster_clock`).
    pub clock: Arc<proto::cluster_clock::ClusterClock>,
    /// The newest cluster time the applier has applied, moved before the entry's
    /// proposer is answered (the driver's `Status` hears of it later).
    applied_clock: Arc<std::sync::atomic::AtomicU64>,
    /// The transactions prepared on this member (`prepared`).
    pub prepared: Arc<prepared::Prepared>,
    /// The log, which change streams read (`crate::change_stream`).
    pub log: log_store::LogStore,
    /// How far this member has applied the log (`None` on an arbiter).
    pub applied: Option<applier::AppliedIndex>,
}

/// Entries whose proposer stopped waiting at its `wtimeout` and whose outcome (applied,
/// refused as a duplicate, or erased by a change of primary) is not known yet.
#[derive(Default)]
pub struct Unresolved {
    count: std::sync::atomic::AtomicUsize,
    lock: Mutex<()>,
    resolved: parking_lot::Condvar,
    /// Runs once an entry's outcome is known, before writers may go on: the member's
    /// catalog reload, so that they read metadata the entry may have changed.
    then: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Unresolved {
    /// Counts the entry `wait` will answer as unresolved until it answers. The driver
    /// answers every proposer (applied, refused, stepped down or stopped), so this ends.
    fn hold(self: &Arc<Self>, wait: std::sync::mpsc::Receiver<Result<u64, ProposeError>>) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let outcome = Arc::new(Mutex::new(Some(wait)));
        let (this, theirs) = (self.clone(), outcome.clone());
        let spawned = std::thread::Builder::new()
            .name("wtimeout-outcome".into())
            .spawn(move || this.resolve(&theirs));
        if let Err(e) = spawned {
            // No thread to wait on: the timed-out writer waits itself (slower, still right).
            tracing::warn!(error = %e, "waiting inline for a timed-out write's outcome");
            self.resolve(&outcome);
        }
    }

    /// Sets what runs after each outcome (see `then`).
    pub fn then(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.then.set(f);
    }

    /// Whether an entry is unresolved now.
    pub fn pending(&self) -> bool {
        self.count.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    fn resolve(
        &self,
        outcome: &Mutex<Option<std::sync::mpsc::Receiver<Result<u64, ProposeError>>>>,
    ) {
        if let Some(wait) = outcome.lock().take() {
            let _ = wait.recv();
        }
        if let Some(then) = self.then.get() {
            then();
        }
        let _held = self.lock.lock();
        self.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.resolved.notify_all();
    }

    /// Returns once every entry whose proposer gave up at its `wtimeout` has an outcome.
    /// A writer calls it holding its collection's lock, before it reads pre-images or the
    /// collection's metadata, so that it never builds on a state that lacks such an entry.
    pub fn wait(&self) {
        while !self.wait_for(Duration::from_secs(3600)) {}
    }

    /// [`Unresolved::wait`] for at most `limit`; whether every entry has an outcome.
    pub fn wait_for(&self, limit: Duration) -> bool {
        use std::sync::atomic::Ordering;
        if self.count.load(Ordering::SeqCst) == 0 {
            return true;
        }
        let until = Instant::now() + limit;
        let mut held = self.lock.lock();
        while self.count.load(Ordering::SeqCst) > 0 {
            if self.resolved.wait_until(&mut held, until).timed_out() {
                return self.count.load(Ordering::SeqCst) == 0;
            }
        }
        true
    }
}

impl Replica {
    /// Starts the member: opens its log in `log_dir`, replays what the data lacks, and
    /// returns the member with the gRPC service its peers send to. Erased proposals go to
    /// `rollback/` beside `log_dir`, by the collection `namespace_of` names.
    pub fn start(
        config: ReplConfig,
        base: Arc<dyn Engine>,
        log_dir: &std::path::Path,
        on_catalog_change: Arc<dyn Fn() + Send + Sync>,
        namespace_of: rollback::NamespaceOf,
        auth: proto::cluster_auth::ClusterAuth,
        rt: &tokio::runtime::Handle,
    ) -> Result<(Arc<Replica>, RaftService), String> {
        config.validate()?;
        let me = config.me()?.clone();
        let voters: Vec<u64> = config
            .members
            .iter()
            .filter(|m| m.votes > 0)
            .map(|m| m.id)
            .collect();
        let mut log =
            log::DurableLog::open(log_dir, &voters, config.sync).map_err(|e| e.to_string())?;
        log.set_segment_bytes(config.log_segment_kb * 1024);
        base.create_table(REPL_TABLE).map_err(|e| e.to_string())?;
        let applied = applied_index(base.as_ref())?;
        let prepared = Arc::new(prepared::Prepared::default());
        storage::prepare_wait::set_blocker(crate::control::ops::blocking_wait_dyn);
        if !me.arbiter {
            prepared::recover(base.as_ref(), &prepared).map_err(|e| e.to_string())?;
        }
        log.commit_at_least(applied).map_err(|e| e.to_string())?;
        let raw = raft_node(&me, applied, log.storage().clone(), voters == [me.id])?;
        let faults = Arc::new(Faults::default());
        let peers: Vec<(u64, String)> = config
            .members
            .iter()
            .filter(|m| m.id != me.id)
            .map(|m| (m.id, m.dial.clone().unwrap_or_else(|| m.host.clone())))
            .collect();
        let outbox = Outbox::start(&config.set_name, &peers, faults.clone(), &auth, rt);
        let data_peers = peers::Peers::new(
            peers
                .iter()
                .filter(|(id, _)| config.members.iter().any(|m| m.id == *id && !m.arbiter))
                .cloned()
                .collect(),
            faults.clone(),
            auth.clone(),
            rt,
        );
        let (tx, rx) = channel();
        let status = Arc::new(RwLock::new(Status::default()));
        let applied_clock = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let applier = if me.arbiter {
            None
        } else {
            Some(
                applier::Applier::start(
                    format!("apply-{}", me.id),
                    base.clone(),
                    on_catalog_change.clone(),
                    tx.clone(),
                    (
                        applied,
                        raft::Storage::last_index(log.storage()).unwrap_or(applied),
                    ),
                    config.history_window_secs,
                    (applied_clock.clone(), prepared.clone()),
                )
                .map_err(|e| e.to_string())?,
            )
        };
        let applied_index = applier.as_ref().map(applier::Applier::progress);
        let log_store = log.storage().clone();
        // The term of the log's first entry, if it holds it: the term in which the set's
        // first primary was elected, from empty logs.
        let first_term = raft::Storage::term(log.storage(), 1)
            .ok()
            .filter(|&t| t > 0);
        let vote_fence = vote_fence::VoteFence::open(log_dir, log.created(), first_term)
            .map_err(|e| e.to_string())?;
        let clock = Arc::new(proto::cluster_clock::ClusterClock::default());
        let driver = Driver {
            prepared: prepared.clone(),
            clock: clock.clone(),
            pending_times: Default::default(),
            raw,
            log,
            vote_fence,
            engine: base.clone(),
            applier,
            rx,
            outbox,
            status: status.clone(),
            arbiter: me.arbiter,
            on_catalog_change,
            incarnation: rand::random(),
            next_seq: 0,
            waiters: HashMap::new(),
            reads: HashMap::new(),
            confirmed_reads: Vec::new(),
            term_start: u64::MAX,
            applied,
            dispatched: applied,
            was_leader: false,
            priorities: config
                .members
                .iter()
                .filter(|m| !m.arbiter && m.priority > 0)
                .map(|m| (m.id, m.priority))
                .collect(),
            leader_seen: (raft::INVALID_ID, std::time::Instant::now()),
            asked_takeover: None,
            frozen_until: None,
            retain_bytes: config.log_retain_mb * 1024 * 1024,
            retain_window: (
                config.log_retain_secs,
                config.log_retain_max_mb * 1024 * 1024,
            ),
            dir: log_dir.to_path_buf(),
            snapshots_out: HashMap::new(),
            rollback: rollback::RollbackDir {
                dir: log_dir.parent().unwrap_or(log_dir).join("rollback"),
                namespace_of,
            },
            last_install: None,
            site_peers: config
                .members
                .iter()
                .filter(|m| m.site == me.site && m.id != me.id && !m.arbiter)
                .map(|m| m.id)
                .collect(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("raft-{}", me.id))
            .spawn(move || driver.run())
            .map_err(|e| e.to_string())?;
        spawn_compactor(
            Arc::downgrade(&base),
            status.clone(),
            tx.clone(),
            Duration::from_secs(config.compact_interval_secs),
        )?;
        let service = RaftService {
            set_name: config.set_name.clone(),
            events: tx.clone(),
            faults: faults.clone(),
            cluster_key: auth.key,
            engine: Arc::downgrade(&base),
            status: status.clone(),
            arbiter: me.arbiter,
            shutdown: CancellationToken::new(),
        };
        Ok((
            Arc::new(Replica {
                config,
                events: tx,
                status,
                faults,
                peers: data_peers,
                thread: Mutex::new(Some(thread)),
                unresolved: Arc::default(),
                clock,
                applied_clock,
                prepared,
                log: log_store,
                applied: applied_index,
            }),
            service,
        ))
    }

    pub fn status(&self) -> Status {
        self.status.read().clone()
    }

    /// Returns once every entry at or before cluster time `at` is applied here, and no
    /// entry applied later can have a time at or before it. A primary that has not
    /// reached `at` learns it and replicates an empty entry (which the clock stamps after
    /// `at`), as MongoDB's primary writes a no-op for a read at a time it has not reached;
    /// a secondary catches up with the primary. `at` must be a time some member handed
    /// out: it moves this member's clock.
    pub fn reach_time(
        &self,
        at: proto::cluster_clock::ClusterTime,
        timeout: std::time::Duration,
    ) -> Result<bool, ProposeError> {
        if self.applied_time() >= at {
            return Ok(true);
        }
        if self.status.read().writable {
            if self.clock.advance(at).is_err() {
                return Ok(false);
            }
            self.replicate(entry::OplogEntry::Write(storage::WriteBatch::new()))?;
            return Ok(true);
        }
        self.catch_up(timeout)?;
        Ok(self.applied_time() >= at)
    }

    /// The cluster time of the newest entry applied here (0 before any).
    pub fn applied_time(&self) -> proto::cluster_clock::ClusterTime {
        let published = self
            .applied_clock
            .load(std::sync::atomic::Ordering::Acquire);
        self.status.read().applied_time.0.max(published)
    }

    /// Proposes `entry` and waits until it is applied here (which implies a majority has
    /// it), or until the thread's `wtimeout`.
    pub fn replicate(&self, entry: entry::OplogEntry) -> Result<(), ProposeError> {
        self.replicate_parted(&entry, &[])
    }

    /// Proposes `entry`, the final entry of a transaction whose other writes (`parted`)
    /// earlier entries carried (`txn_parts`), and waits as `replicate` does. `parted` is
    /// checked against prepared transactions with the entry's own writes.
    pub fn replicate_parted(
        &self,
        entry: &entry::OplogEntry,
        parted: &[storage::WriteOpRef<'_>],
    ) -> Result<(), ProposeError> {
        let data = match entry {
            entry::OplogEntry::Write(b) => entry::encode_write(b),
            other => other.encode(),
        };
        self.propose_and_wait(data, parted)
    }

    pub fn replicate_bytes(&self, data: Vec<u8>) -> Result<(), ProposeError> {
        self.propose_and_wait(data, &[])
    }

    fn propose_and_wait(
        &self,
        data: Vec<u8>,
        parted: &[storage::WriteOpRef<'_>],
    ) -> Result<(), ProposeError> {
        let scope = SCOPE.with(|s| s.get());
        let term = match scope.term {
            Some(t) => t,
            None => {
                let s = self.status.read();
                if !s.writable {
                    return Err(ProposeError::NotPrimary);
                }
                s.term
            }
        };
        let started = std::time::Instant::now();
        let (done, wait) = sync_channel(1);
        let registered = self.hand_over(data, parted, term, done)?;
        // The wait shows in `currentOp` and the slow-operation log as replication.
        let result = crate::control::ops::replicating(|| {
            let index = match scope.wtimeout.map(|t| wait.recv_timeout(t)) {
                Some(Ok(outcome)) => outcome?,
                Some(Err(_)) => {
                    // Past `wtimeout` the entry is still in flight. The caller answers
                    // with a write concern error and frees the collection's lock, but the
                    // next writer must not read its pre-images (or the catalog) before
                    // this entry's outcome is known: its own entry would undo this one
                    // (lost `$inc`s, an index key that disagrees with its document). So
                    // the entry stays unresolved until the driver answers it, and every
                    // writer waits for unresolved entries under its collection's lock
                    // (`Replica::await_unresolved`).
                    self.unresolved.hold(wait);
                    return Err(ProposeError::Timeout);
                }
                None => wait.recv().unwrap_or(Err(ProposeError::Shutdown))?,
            };
            // Applied here means a majority holds it; `w: N` above that waits for more.
            if scope.w as usize > self.majority() {
                let limit = scope.wtimeout.map(|t| started + t);
                self.wait_for_members(index, scope.w as usize, limit)?;
            }
            Ok(())
        });
        // A Prepare refused, or erased with its term, holds its keys no longer (unless it
        // applied); one still in flight past `wtimeout` holds them until it is known.
        if let (Err(e), Some(session)) = (&result, &registered) {
            if *e != ProposeError::Timeout {
                self.prepared.withdraw(session);
            }
        }
        result
    }

    /// Hands `data` to the Raft thread once no prepared transaction holds a key it writes
    /// (waiting for resolutions up to the thread's limit, `storage::prepare_wait`);
    /// returns the session key of a Prepare it hands over.
    fn hand_over(
        &self,
        mut data: Vec<u8>,
        parted: &[storage::WriteOpRef<'_>],
        term: u64,
        done: std::sync::mpsc::SyncSender<Result<u64, ProposeError>>,
    ) -> Result<Option<Vec<u8>>, ProposeError> {
        let until = storage::prepare_wait::limit();
        let mut done = Some(done);
        loop {
            let events = &self.events;
            let handed = self.prepared.admit(data, parted, |data| {
                let done = done.take().expect("handed over once");
                events.send(Event::Propose { data, term, done })
            });
            match handed {
                Ok((sent, registered)) => {
                    sent.map_err(|_| ProposeError::Shutdown)?;
                    return Ok(registered);
                }
                Err((e, _)) if Instant::now() >= until => return Err(e),
                Err((ProposeError::PrepareConflict(_), back)) => {
                    data = back;
                    let wake = (Instant::now() + PREPARED_RECHECK).min(until);
                    crate::control::ops::blocking_wait(|| self.prepared.wait_any_resolution(wake));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Voting members that make a majority.
    fn majority(&self) -> usize {
        self.config.members.iter().filter(|m| m.votes > 0).count() / 2 + 1
    }

    /// Waits until `w` data members hold log entry `index`, or `limit` passes.
    fn wait_for_members(
        &self,
        index: u64,
        w: usize,
        limit: Option<std::time::Instant>,
    ) -> Result<(), ProposeError> {
        let data: Vec<u64> = self
            .config
            .members
            .iter()
            .filter(|m| !m.arbiter)
            .map(|m| m.id)
            .collect();
        loop {
            {
                let s = self.status.read();
                if s.role != raft::StateRole::Leader {
                    return Err(ProposeError::StateChanged);
                }
                let holding = s
                    .matched
                    .iter()
                    .filter(|(id, matched, _)| *matched >= index && data.contains(id))
                    .count();
                if holding >= w {
                    return Ok(());
                }
            }
            if limit.is_some_and(|l| std::time::Instant::now() >= l) {
                return Err(ProposeError::Timeout);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Returns once this member has confirmed with a majority that it is still the
    /// primary and has applied everything committed before the call (`linearizable`).
    pub fn read_barrier(&self, timeout: std::time::Duration) -> Result<(), ProposeError> {
        self.ask(|done| Event::ReadIndex { done }, timeout)
    }

    /// Returns once this member has applied every write committed before the call, as
    /// far as the primary knows (see `Event::CatchUp`): a causally consistent read
    /// (`afterClusterTime`) then sees everything its client saw acknowledged.
    pub fn catch_up(&self, timeout: std::time::Duration) -> Result<(), ProposeError> {
        self.ask(|done| Event::CatchUp { done }, timeout)
    }

    /// Sends the driver a request that answers on `done`, and waits up to `timeout`.
    fn ask(
        &self,
        request: impl FnOnce(std::sync::mpsc::SyncSender<Result<u64, ProposeError>>) -> Event,
        timeout: std::time::Duration,
    ) -> Result<(), ProposeError> {
        let (done, wait) = sync_channel(1);
        self.events
            .send(request(done))
            .map_err(|_| ProposeError::Shutdown)?;
        wait.recv_timeout(timeout)
            .unwrap_or(Err(ProposeError::Timeout))
            .map(|_| ())
    }

    /// Starts an election at once (`replSetStepUp`).
    pub fn campaign(&self) {
        let _ = self.events.send(Event::Campaign);
    }

    /// Keeps this member from becoming primary until `until` (`None`: thaw).
    pub fn freeze(&self, until: Option<std::time::Instant>) {
        let _ = self.events.send(Event::Freeze(until));
    }

    /// Hands leadership to member `to` (`replSetStepDown`).
    pub fn transfer_leader(&self, to: u64) {
        let _ = self.events.send(Event::TransferLeader(to));
    }

    /// Stops the driver thread and waits for it.
    pub fn stop(&self) {
        let _ = self.events.send(Event::Stop);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

/// Every `every`: checkpoint WiredTiger (everything applied so far becomes durable in the
/// data files), then let the driver drop the log up to what was applied before the
/// checkpoint began. Off the Raft thread, since a checkpoint can take a while. Holds the
/// engine only weakly (a stopped member must be able to close WiredTiger), and ends when
/// the engine or the driver is gone.
fn spawn_compactor(
    base: std::sync::Weak<dyn Engine>,
    status: Arc<parking_lot::RwLock<Status>>,
    events: std::sync::mpsc::Sender<Event>,
    every: Duration,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name("raft-compact".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            let applied = status.read().applied;
            let Some(engine) = base.upgrade() else {
                return;
            };
            let checkpoint = engine.checkpoint();
            drop(engine);
            if let Err(e) = checkpoint {
                tracing::warn!(error = %e, "checkpoint before log compaction failed");
                continue;
            }
            if events.send(Event::Compact(applied)).is_err() {
                return;
            }
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Stop);
    }
}

/// The index the data has applied through, as recorded beside it (0 for new data).
fn applied_index(base: &dyn Engine) -> Result<u64, String> {
    match base
        .get(REPL_TABLE, APPLIED_KEY)
        .map_err(|e| e.to_string())?
    {
        Some(v) => Ok(snapshot::decode_applied(&v).ok_or("bad applied index")?.0),
        None => Ok(0),
    }
}

/// The election timer's range for this member, in ticks ((0, 0): raft's default).
fn election_ticks(me: &config::MemberConfig) -> (usize, usize) {
    // A priority-0 member must never be primary (as in MongoDB): its election timer is
    // set beyond reach, so it never campaigns, yet it votes and keeps the log.
    // An arbiter holds no data but keeps the log too, so a write can commit on the
    // primary's site and the arbiter alone; if that site then fails, the arbiter
    // refuses its vote to every surviving data member (their logs are behind) and none
    // can be elected. So the arbiter may campaign, on a slower timer than the data
    // members (it wins only when they cannot), and hands leadership to a data member
    // at once, catching it up first (`Driver::arbiter_handover`).
    if me.arbiter {
        (2 * ELECTION_TICK, 3 * ELECTION_TICK)
    } else if me.priority <= 0 {
        (NEVER_ELECTION_TICK, NEVER_ELECTION_TICK + 1)
    } else {
        (0, 0)
    }
}

/// The Raft node over `storage`, which has applied through `applied`. A set of one
/// (`alone`) need not wait an election timeout to elect itself.
fn raft_node(
    me: &config::MemberConfig,
    applied: u64,
    storage: log_store::LogStore,
    alone: bool,
) -> Result<raft::RawNode<log_store::LogStore>, String> {
    let (min_election_tick, max_election_tick) = election_ticks(me);
    let raft_config = raft::Config {
        id: me.id,
        election_tick: ELECTION_TICK,
        min_election_tick,
        max_election_tick,
        heartbeat_tick: 2,
        applied,
        max_size_per_msg: 4 * 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        priority: me.priority,
        ..Default::default()
    };
    raft_config.validate().map_err(|e| e.to_string())?;
    let mut raw = raft::RawNode::new(&raft_config, storage, &slog_bridge::logger())
        .map_err(|e| e.to_string())?;
    if alone {
        let _ = raw.campaign();
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_wait_for_unresolved_entries_ends_at_its_limit_and_at_the_outcome() {
        let unresolved = Arc::new(Unresolved::default());
        let (answer, wait) = std::sync::mpsc::channel();
        unresolved.hold(wait);
        assert!(unresolved.pending());
        assert!(
            !unresolved.wait_for(Duration::from_millis(20)),
            "no outcome yet"
        );
        answer.send(Ok(7)).unwrap();
        assert!(
            unresolved.wait_for(Duration::from_secs(60)),
            "the outcome came"
        );
        assert!(!unresolved.pending());
    }
}
