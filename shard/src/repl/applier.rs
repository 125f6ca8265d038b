//! Applies committed entries to WiredTiger on a thread of its own.
//!
//! Why a thread of its own: were the Raft thread to apply each `Ready`'s committed entries
//! itself, between persisting and sending, nothing would be appended, synced or
//! acknowledged while WiredTiger wrote (an apply of a few batches can take 15–30 ms on a
//! loaded 2-core machine), so a member's log sync and its apply would take turns instead
//! of overlapping, and a follower's acknowledgement of new entries would wait for its
//! apply of older ones. So the Raft thread hands committed entries over and goes on; this
//! thread applies them in log order, answers each proposer once its entry is applied, and
//! reports how far it got (`Event::Applied`), which is what raft-rs, reads and `writable`
//! go by.
//!
//! Each entry is applied with the applied index in the same WiredTiger transaction, so a
//! crash at any point leaves the data at exactly one applied index.
//!
//! An entry that carries a cluster time commits at that timestamp, and times rise with
//! the log, so WiredTiger holds every applied state by time. After each batch the stable
//! timestamp moves to the last applied entry's time (everything applied is committed by
//! a majority, so nothing stable is ever rolled back) and the oldest timestamp to
//! `history_window_secs` before it. Stable moves before the batch is reported applied:
//! the compactor checkpoints (as of stable) only up to what it was told is applied, so
//! the checkpoint covers every entry it removes from the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use proto::cluster_clock::ClusterTime;
use raft::eraftpb::{Entry, EntryType};
use storage::{Engine, StorageError, WriteOpRef};
use tracing::error;

use super::driver::{entry_time, Event};
use super::entry::OplogEntryRef;
use super::{prepared, snapshot, txn_parts, ProposeError, APPLIED_KEY, REPL_TABLE};

/// Who waits for an entry: the proposer, answered with the entry's index or the error
/// applying it gave (a duplicate key).
pub type Waiter = SyncSender<Result<u64, ProposeError>>;

/// Committed entries to apply, with the proposers waiting for some of them.
struct Job {
    entries: Vec<Entry>,
    waiters: Vec<(u64, Waiter)>,
}

/// How far the applier got; the Raft thread waits on it before replacing the data with a
/// snapshot.
#[derive(Default)]
struct Progress {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    applied: u64,
    /// Why applying stopped (the member must stop too).
    failed: Option<String>,
}

pub struct Applier {
    jobs: Option<Sender<Job>>,
    progress: Arc<Progress>,
    thread: Option<JoinHandle<()>>,
}

/// What applying needs, owned by the applier thread.
struct Context {
    engine: Arc<dyn Engine>,
    /// Called after an applied entry changed the catalog table.
    on_catalog_change: Arc<dyn Fn() + Send + Sync>,
    /// Where the applier reports progress to the Raft thread.
    events: Sender<Event>,
    /// The last entry the log held when the member started. Up to it, entries may be
    /// replayed over tables that are already gone (see `write_replayed`).
    replay_until: u64,
    /// How far the oldest timestamp trails stable, as a cluster-time difference.
    history: ClusterTime,
    /// The newest cluster time applied: stored with the applied index, so that a snapshot
    /// of this member says which time its data is as of.
    newest: std::cell::Cell<ClusterTime>,
    /// The same time for readers (`Replica::applied_time`), moved before an entry's
    /// proposer hears it was applied: a client that saw its write acknowledged and then
    /// starts a read at this member's newest time must read that write.
    published: Arc<AtomicU64>,
    /// The transactions prepared on this member.
    prepared: Arc<super::prepared::Prepared>,
}

impl Applier {
    /// Starts the thread; `applied` is the index the data holds now, `replay_until` the
    /// last entry in the log at start, `history_secs` the history window; `published` is
    /// where it publishes the newest applied time, `prepared` the member's prepared
    /// transactions.
    pub fn start(
        name: String,
        engine: Arc<dyn Engine>,
        on_catalog_change: Arc<dyn Fn() + Send + Sync>,
        events: Sender<Event>,
        (applied, replay_until): (u64, u64),
        history_secs: u64,
        (published, prepared): (Arc<AtomicU64>, Arc<super::prepared::Prepared>),
    ) -> std::io::Result<Applier> {
        let progress = Arc::new(Progress::default());
        progress.state.lock().applied = applied;
        let (jobs, rx) = channel();
        let newest = stored_time(engine.as_ref());
        // Until its first entry with a time applies (an election's entry has none), the
        // member's newest time is the stored one: a transaction or snapshot read started
        // after a restart reads there, not at a time older than the history kept.
        published.fetch_max(newest, Ordering::AcqRel);
        let ctx = Context {
            engine,
            on_catalog_change,
            events,
            replay_until,
            history: history_secs.min(u64::from(u32::MAX)) << 32,
            newest: std::cell::Cell::new(newest),
            published,
            prepared,
        };
        let shared = progress.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(ctx, rx, &shared))?;
        Ok(Applier {
            jobs: Some(jobs),
            progress,
            thread: Some(thread),
        })
    }

    /// Queues committed entries (in log order, after every entry queued before).
    pub fn apply(&self, entries: Vec<Entry>, waiters: Vec<(u64, Waiter)>) {
        if let Some(jobs) = &self.jobs {
            // The thread is gone only after a failure, which the Raft thread hears of.
            let _ = jobs.send(Job { entries, waiters });
        }
    }

    /// What change streams read the applied index through.
    pub fn progress(&self) -> AppliedIndex {
        AppliedIndex(self.progress.clone())
    }

    /// Waits until everything up to `index` is applied; the error says why applying
    /// stopped.
    pub fn wait_for(&self, index: u64) -> Result<u64, String> {
        let mut state = self.progress.state.lock();
        loop {
            if state.applied >= index {
                return Ok(state.applied);
            }
            if let Some(why) = &state.failed {
                return Err(why.clone());
            }
            self.progress.changed.wait(&mut state);
        }
    }

    /// The data now holds everything up to `index` (an installed snapshot); called only
    /// when nothing is queued.
    pub fn installed(&self, index: u64) {
        let mut state = self.progress.state.lock();
        state.applied = state.applied.max(index);
    }

    /// Applies what is queued, then stops the thread.
    pub fn stop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Applier {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The index of the newest entry applied here, to wait on.
#[derive(Clone)]
pub struct AppliedIndex(Arc<Progress>);

impl AppliedIndex {
    pub fn get(&self) -> u64 {
        self.0.state.lock().applied
    }

    /// The applied index once it passes `index`, or when `limit` runs out, or at once
    /// if applying stopped.
    pub fn wait_past(&self, index: u64, limit: std::time::Duration) -> u64 {
        let until = std::time::Instant::now() + limit;
        let mut state = self.0.state.lock();
        while state.applied <= index && state.failed.is_none() {
            if self.0.changed.wait_until(&mut state, until).timed_out() {
                break;
            }
        }
        state.applied
    }
}

/// Whoever waits on the applier hears when its thread ends, however it ends (a panic in
/// WiredTiger's bindings included): otherwise a snapshot install would wait forever.
struct Ended<'a>(&'a Progress);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        if state.failed.is_none() {
            state.failed = Some("the applier stopped".into());
        }
        drop(state);
        self.0.changed.notify_all();
    }
}

fn run(ctx: Context, jobs: Receiver<Job>, progress: &Progress) {
    let _ended = Ended(progress);
    while let Ok(job) = jobs.recv() {
        let mut last = None;
        let mut newest_time = None;
        let mut waiters = job.waiters.into_iter().peekable();
        for e in job.entries {
            let index = e.index;
            let result = match apply_entry(&ctx, &e) {
                Ok(r) => r,
                Err(err) => return stop(&ctx, progress, index, &err),
            };
            let time = entry_time(&e.context);
            if let Some(t) = time {
                ctx.published.fetch_max(t, Ordering::AcqRel);
            }
            while let Some((_, w)) = waiters.next_if(|(i, _)| *i <= index) {
                let _ = w.try_send(result.clone().map(|()| index));
            }
            last = Some(index);
            newest_time = time.or(newest_time);
        }
        if let Some(stable) = newest_time {
            let oldest = stable.saturating_sub(ctx.history);
            if let Err(err) = ctx.engine.set_timestamps(stable, oldest) {
                return stop(&ctx, progress, last.unwrap_or(0), &err);
            }
        }
        if let Some(index) = last {
            {
                let mut state = progress.state.lock();
                state.applied = state.applied.max(index);
            }
            progress.changed.notify_all();
            let _ = ctx.events.send(Event::Applied(index));
        }
    }
}

/// The newest cluster time the data was applied with, as stored with the applied index.
fn stored_time(engine: &dyn Engine) -> ClusterTime {
    match engine.get(REPL_TABLE, APPLIED_KEY) {
        Ok(Some(v)) => snapshot::decode_applied_time(&v),
        _ => 0,
    }
}

/// Applying failed: the member must stop, and whoever waits on the applier hears why.
fn stop(ctx: &Context, progress: &Progress, index: u64, err: &StorageError) {
    error!(index, error = %err, "applying a committed entry failed");
    let why = err.to_string();
    progress.state.lock().failed = Some(why.clone());
    progress.changed.notify_all();
    let _ = ctx.events.send(Event::ApplyFailed(why));
}

/// Applies one committed entry. No-ops (an election's empty entry) and configuration
/// entries only advance the applied index.
fn apply_entry(ctx: &Context, e: &Entry) -> Result<Result<(), ProposeError>, StorageError> {
    let time = entry_time(&e.context);
    if let Some(t) = time {
        ctx.newest.set(t);
    }
    let at = Applied {
        index: e.index,
        term: e.term,
        time,
        newest: ctx.newest.get(),
    };
    if e.data.is_empty() || e.get_entry_type() != EntryType::EntryNormal {
        write_applied(ctx.engine.as_ref(), &at)?;
        return Ok(Ok(()));
    }
    let Some(op) = OplogEntryRef::decode(&e.data) else {
        return Err(StorageError::Other(format!(
            "undecodable oplog entry {}",
            at.index
        )));
    };
    apply_one(ctx, op, &at)
}

/// The entry being applied: where it is in the log, and its cluster time if it has one
/// (entries of older logs, raft-rs's election no-ops and configuration entries do not).
struct Applied {
    index: u64,
    term: u64,
    time: Option<ClusterTime>,
    /// The newest time applied so far, this entry's included.
    newest: ClusterTime,
}

impl Applied {
    /// Writes `ops` at the entry's time.
    fn write(&self, engine: &dyn Engine, ops: &[WriteOpRef<'_>]) -> Result<(), StorageError> {
        match self.time {
            Some(t) => engine.write_refs_at(ops, t),
            None => engine.write_refs(ops),
        }
    }
}

/// Applies one entry with the applied index in the same transaction. A duplicate key
/// is a result (the same on every member), not a failure of the member.
fn apply_one(
    ctx: &Context,
    op: OplogEntryRef<'_>,
    at: &Applied,
) -> Result<Result<(), ProposeError>, StorageError> {
    let engine = ctx.engine.as_ref();
    let applied = snapshot::encode_applied(at.index, at.term, at.newest);
    let applied = WriteOpRef::Put {
        table: REPL_TABLE,
        key: APPLIED_KEY,
        value: &applied,
    };
    let touches_catalog = |ops: &[WriteOpRef<'_>]| {
        ops.iter()
            .any(|o| o.table() == crate::catalog::CATALOG_TABLE)
    };
    let catalog_changed;
    match op {
        OplogEntryRef::Write(own) => {
            // A transaction's commit applies the writes of its parts with its own.
            let parts = match txn_parts::is_commit(&own) {
                true => txn_parts::load(engine, &own)?,
                false => Vec::new(),
            };
            let mut ops = txn_parts::with_parts(&parts, own)?;
            catalog_changed = touches_catalog(&ops);
            ops.push(applied);
            match write_replayed(ctx, &mut ops, at) {
                Ok(()) => {}
                Err(StorageError::KeyExists { table }) => {
                    write_refused(engine, at)?;
                    return Ok(Err(ProposeError::KeyExists(table)));
                }
                Err(e) => return Err(e),
            }
        }
        OplogEntryRef::CreateTable(t) => {
            catalog_changed = false;
            engine.create_table(t)?;
            write_applied(engine, at)?;
        }
        OplogEntryRef::DropTable(t) => {
            catalog_changed = false;
            engine.drop_table(t)?;
            write_applied(engine, at)?;
        }
        OplogEntryRef::Prepare {
            txn,
            coordinator,
            ops: own,
            side,
        } => {
            let parts = txn_parts::load(engine, &side)?;
            let ops = txn_parts::with_parts(&parts, own)?;
            catalog_changed = touches_catalog(&side);
            let named = (&txn, coordinator);
            let time = timed(at)?;
            prepared::apply_prepare(engine, &ctx.prepared, named, (&ops, &side), time, applied)?;
        }
        OplogEntryRef::CommitPrepared { txn, commit, side } => {
            catalog_changed = touches_catalog(&side);
            let resolution = (&txn, Some(commit), side.as_slice());
            if !prepared::apply_resolution(engine, &ctx.prepared, resolution, timed(at)?, applied)?
            {
                write_refused(engine, at)?;
                return Ok(Err(ProposeError::NotPrepared));
            }
        }
        OplogEntryRef::AbortPrepared { txn, side } => {
            catalog_changed = touches_catalog(&side);
            let resolution = (&txn, None, side.as_slice());
            if !prepared::apply_resolution(engine, &ctx.prepared, resolution, timed(at)?, applied)?
            {
                write_refused(engine, at)?;
                return Ok(Err(ProposeError::NotPrepared));
            }
        }
    }
    if catalog_changed {
        (ctx.on_catalog_change)();
    }
    Ok(Ok(()))
}

/// The time of an entry that must have one (a prepared transaction's).
fn timed(at: &Applied) -> Result<ClusterTime, StorageError> {
    at.time.ok_or_else(|| {
        StorageError::Other(format!(
            "entry {} of a prepared transaction has no cluster time",
            at.index
        ))
    })
}

/// Writes an entry's ops. WiredTiger makes a table's create and drop durable at once, but
/// rows and the applied index only at the next checkpoint; so after a crash the log is
/// replayed from the checkpoint over tables that later entries dropped. Those entries'
/// ops on such a table are skipped (the table's data is gone, as the later drop would
/// leave it; its catalog row goes with that drop's entry). Entries after the log's end at
/// start never meet a missing table: there it stays a failure.
fn write_replayed(
    ctx: &Context,
    ops: &mut Vec<WriteOpRef<'_>>,
    at: &Applied,
) -> Result<(), StorageError> {
    let index = at.index;
    loop {
        match at.write(ctx.engine.as_ref(), ops) {
            Err(StorageError::NoSuchTable(t)) if index <= ctx.replay_until && t != REPL_TABLE => {
                tracing::warn!(index, table = %t, "replayed entry names a table a later entry dropped: its ops there are skipped");
                ops.retain(|o| o.table() != t);
            }
            r => return r,
        }
    }
}

/// Records an entry refused as it applied (a duplicate key, a resolution of a
/// transaction not prepared) as applied, and as refused: a change stream reading the log
/// skips its events (`refused_key`).
fn write_refused(engine: &dyn Engine, at: &Applied) -> Result<(), StorageError> {
    let applied = snapshot::encode_applied(at.index, at.term, at.newest);
    let ops = [
        WriteOpRef::Put {
            table: REPL_TABLE,
            key: APPLIED_KEY,
            value: &applied,
        },
        WriteOpRef::Put {
            table: REPL_TABLE,
            key: &refused_key(at.index),
            value: &[],
        },
    ];
    at.write(engine, &ops)
}

/// The `_repl` row that marks entry `index` as refused when it applied.
pub fn refused_key(index: u64) -> Vec<u8> {
    [&b"refused/"[..], &index.to_be_bytes()].concat()
}

/// Records an entry that changed no data as applied (the index, with its term, is
/// what a snapshot of this member says it holds).
fn write_applied(engine: &dyn Engine, at: &Applied) -> Result<(), StorageError> {
    let applied = snapshot::encode_applied(at.index, at.term, at.newest);
    let op = WriteOpRef::Put {
        table: REPL_TABLE,
        key: APPLIED_KEY,
        value: &applied,
    };
    at.write(engine, &[op])
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;
    use std::time::Duration;

    use storage::{MemoryEngine, WriteBatch};

    use super::*;

    /// An applier over `engine` with no catalog to reload.
    fn test_applier(
        engine: Arc<dyn Engine>,
        events: std::sync::mpsc::Sender<Event>,
        at: (u64, u64),
        history_secs: u64,
    ) -> Applier {
        let published = Arc::default();
        Applier::start(
            "apply-test".into(),
            engine,
            Arc::new(|| {}),
            events,
            at,
            history_secs,
            (published, Arc::default()),
        )
        .unwrap()
    }
    use crate::repl::entry::OplogEntry;

    fn entry(index: u64, op: OplogEntry) -> Entry {
        Entry {
            index,
            term: 2,
            data: op.encode().into(),
            ..Default::default()
        }
    }

    fn insert(key: &[u8]) -> OplogEntry {
        let mut b = WriteBatch::new();
        b.insert("t", key.to_vec(), b"v".to_vec());
        OplogEntry::Write(b)
    }

    #[test]
    fn applies_in_order_answers_each_proposer_and_reports_progress() {
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        engine.create_table(REPL_TABLE).unwrap();
        let (events, reports) = channel();
        let mut applier = test_applier(engine.clone(), events, (10, 0), 300);
        let (first, first_done) = sync_channel(1);
        let (dup, dup_done) = sync_channel(1);
        applier.apply(
            vec![
                entry(11, OplogEntry::CreateTable("t".into())),
                entry(12, insert(b"a")),
                entry(13, insert(b"a")),
                // An election's no-op only moves the applied index.
                Entry {
                    index: 14,
                    term: 3,
                    ..Default::default()
                },
            ],
            vec![(12, first), (13, dup)],
        );
        let wait = Duration::from_secs(10);
        assert_eq!(first_done.recv_timeout(wait).unwrap().unwrap(), 12);
        // The same duplicate key on every member: a result for the proposer, not a failure.
        assert!(matches!(
            dup_done.recv_timeout(wait).unwrap(),
            Err(ProposeError::KeyExists(t)) if t == "t"
        ));
        assert_eq!(applier.wait_for(14), Ok(14));
        assert!(matches!(reports.recv_timeout(wait), Ok(Event::Applied(14))));
        let held = engine.get(REPL_TABLE, APPLIED_KEY).unwrap().unwrap();
        assert_eq!(snapshot::decode_applied(&held), Some((14, 3)));
        assert_eq!(engine.get("t", b"a").unwrap().as_deref(), Some(&b"v"[..]));
        applier.stop();
    }

    /// A commit applies the writes its parts carry with its own, in one write; an entry
    /// that only deletes part rows (a discard, a sweep) applies nothing of them.
    #[test]
    fn a_commit_applies_its_parts_and_a_sweep_only_deletes_them() {
        use crate::sessions::retry::TXN_TABLE;
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        for t in [REPL_TABLE, txn_parts::PARTS_TABLE, TXN_TABLE, "t"] {
            engine.create_table(t).unwrap();
        }
        let (events, _reports) = channel();
        let mut applier = test_applier(engine.clone(), events, (0, 0), 300);
        let slice = |k: &[u8]| match insert(k) {
            OplogEntry::Write(b) => b,
            _ => unreachable!(),
        };
        let key = |seq| txn_parts::part_key(2, (b"s", 1), seq);
        let parts = |seqs: [u32; 2]| {
            OplogEntry::Write(WriteBatch::of(
                seqs.iter()
                    .map(|&q| txn_parts::part_row(key(q), &slice(&[b'a' + q as u8])))
                    .collect(),
            ))
        };
        let deletes = |seqs: [u32; 2]| {
            let mut b = WriteBatch::new();
            for q in seqs {
                b.delete(txn_parts::PARTS_TABLE, key(q));
            }
            b
        };
        let mut commit = deletes([2, 3]);
        commit.put(TXN_TABLE, b"s".to_vec(), b"record".to_vec());
        commit.put("t", b"z".to_vec(), b"v".to_vec());
        applier.apply(
            vec![
                entry(1, parts([0, 1])),
                entry(2, OplogEntry::Write(deletes([0, 1]))),
                entry(3, parts([2, 3])),
                entry(4, OplogEntry::Write(commit)),
            ],
            vec![],
        );
        assert_eq!(applier.wait_for(4), Ok(4));
        let rows = |t| {
            engine
                .scan(t, &storage::KeyRange::all(), false, 10)
                .unwrap()
        };
        let keys: Vec<Vec<u8>> = rows("t").into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [b"c".to_vec(), b"d".to_vec(), b"z".to_vec()]);
        assert!(rows(txn_parts::PARTS_TABLE).is_empty());
        applier.stop();
    }

    /// An entry with a cluster time in its context (incarnation, sequence, time).
    fn timed(index: u64, op: OplogEntry, time: ClusterTime) -> Entry {
        let mut e = entry(index, op);
        let context: Vec<u8> = [1u64, index, time]
            .iter()
            .flat_map(|n| n.to_le_bytes())
            .collect();
        e.context = context.into();
        e
    }

    #[test]
    fn entries_commit_at_their_times_and_stable_follows_the_last() {
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        engine.create_table(REPL_TABLE).unwrap();
        let (events, reports) = channel();
        let secs = |s: u64| s << 32;
        let mut applier = test_applier(engine.clone(), events, (0, 0), 2);
        let put = |v: &[u8]| {
            let mut b = WriteBatch::new();
            b.put("t", b"k".to_vec(), v.to_vec());
            OplogEntry::Write(b)
        };
        applier.apply(
            vec![
                entry(1, OplogEntry::CreateTable("t".into())),
                timed(2, put(b"first"), secs(100)),
                timed(3, put(b"second"), secs(101)),
                timed(4, put(b"third"), secs(103)),
            ],
            vec![],
        );
        assert_eq!(applier.wait_for(4), Ok(4));
        assert!(matches!(
            reports.recv_timeout(Duration::from_secs(10)),
            Ok(Event::Applied(4))
        ));
        let at = |t| engine.get_at("t", b"k", t).unwrap();
        assert_eq!(at(secs(101)).as_deref(), Some(&b"second"[..]));
        assert_eq!(at(secs(102)).as_deref(), Some(&b"second"[..]));
        assert_eq!(at(secs(103)).as_deref(), Some(&b"third"[..]));
        // Oldest trails the last time by the two-second window: 100 is gone, 101 is kept.
        assert!(matches!(
            engine.get_at("t", b"k", secs(100)),
            Err(StorageError::SnapshotTooOld { .. })
        ));
        // Stable is the last entry's time: a commit behind it is refused.
        let late = [WriteOpRef::Delete {
            table: "t",
            key: b"k",
        }];
        assert!(engine.write_refs_at(&late, secs(102)).is_err());
        applier.stop();
    }

    /// An entry written to a table, a checkpoint before it, then the table's drop (durable
    /// at once in WiredTiger) and a crash: at restart the table is gone while the log
    /// replays the write.
    fn replay_over_a_dropped_table(replay_until: u64) -> (Arc<dyn Engine>, Result<u64, String>) {
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        engine.create_table(REPL_TABLE).unwrap();
        engine.create_table("kept").unwrap();
        let (events, _reports) = channel();
        let mut applier = test_applier(engine.clone(), events, (1, replay_until), 300);
        let mut b = WriteBatch::new();
        b.insert("dropped", b"k".to_vec(), b"v".to_vec());
        b.put("kept", b"k".to_vec(), b"v".to_vec());
        applier.apply(
            vec![
                entry(2, OplogEntry::Write(b)),
                entry(3, OplogEntry::DropTable("dropped".into())),
            ],
            Vec::new(),
        );
        let outcome = applier.wait_for(3);
        applier.stop();
        (engine, outcome)
    }

    #[test]
    fn a_replayed_write_to_a_table_a_later_entry_dropped_is_skipped() {
        let (engine, outcome) = replay_over_a_dropped_table(3);
        assert_eq!(outcome, Ok(3));
        assert_eq!(
            engine.get("kept", b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
        assert!(engine.get("dropped", b"k").is_err(), "not created again");
    }

    #[test]
    fn a_write_to_a_missing_table_after_the_replay_stops_the_member() {
        let (_, outcome) = replay_over_a_dropped_table(1);
        assert!(outcome.unwrap_err().contains("no such table"));
    }

    #[test]
    fn waiting_on_a_stopped_applier_ends() {
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let (events, _reports) = channel();
        let mut applier = test_applier(engine, events, (3, 0), 300);
        applier.stop();
        assert_eq!(applier.wait_for(3), Ok(3));
        assert_eq!(applier.wait_for(4), Err("the applier stopped".to_string()));
    }

    #[test]
    fn a_failed_apply_stops_it_and_says_why() {
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let (events, reports) = channel();
        let applier = test_applier(engine, events, (0, 0), 300);
        let garbage = Entry {
            index: 1,
            term: 1,
            data: vec![0xff, 1, 2].into(),
            ..Default::default()
        };
        applier.apply(vec![garbage], Vec::new());
        assert!(applier.wait_for(1).unwrap_err().contains("undecodable"));
        assert!(matches!(
            reports.recv_timeout(Duration::from_secs(10)),
            Ok(Event::ApplyFailed(_))
        ));
    }
}
