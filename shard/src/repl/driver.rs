//! The task that owns a member's `RawNode`: it ticks, steps incoming messages, proposes
//! writes, persists the log and applies committed entries, handling each `Ready` in
//! raft-rs's documented order (see `examples/five_mem_node`).
//!
//! It runs on its own OS thread because persisting and applying block (fsync,
//! WiredTiger); everything else talks to it through one channel.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use protobuf::Message as _;
use raft::eraftpb::{Entry, Message, MessageType};
use raft::{RawNode, StateRole};
use storage::{Engine, StorageError};
use tracing::{debug, error, info, warn};

use super::applier::{Applier, Waiter};
use super::log::DurableLog;
use super::snapshot;
use super::transport::Outbox;
use super::{ProposeError, Status};
use proto::cluster_clock::{ClusterClock, ClusterTime};

/// One Raft tick. Elections time out after 10–20 ticks (raft-rs's defaults), so a failed
/// primary is replaced within about 2 s.
pub const TICK: Duration = Duration::from_millis(100);

/// A request context: incarnation and sequence number.
const CONTEXT: usize = 16;
/// A proposal's context: the request context, then the entry's cluster time.
const CONTEXT_WITH_TIME: usize = 24;
/// How many entries a new primary looks back through for the newest cluster time.
const TIME_LOOKBACK: u64 = 1024;

/// The cluster time a primary gave the entry whose context this is; `None` for entries
/// without one (an election's no-op, configuration changes).
pub fn entry_time(context: &[u8]) -> Option<ClusterTime> {
    let bytes = context.get(CONTEXT..CONTEXT_WITH_TIME)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?)).filter(|&t| t != 0)
}

/// How long a new primary serves before a higher-priority member asks it to hand over.
const TAKEOVER_SETTLE: Duration = Duration::from_secs(2);
/// How often a higher-priority member may ask again (a takeover can fail if the primary
/// is busy or the asker falls behind).
const TAKEOVER_RETRY: Duration = Duration::from_secs(5);

fn is_transfer(ev: &Event) -> bool {
    matches!(ev, Event::Message(m) if m.get_msg_type() == MessageType::MsgTimeoutNow)
}

/// Marks the member as installing a snapshot while it lives (whichever way the install
/// ends).
struct InstallingFlag(Arc<RwLock<Status>>);

impl InstallingFlag {
    fn raise(status: &Arc<RwLock<Status>>) -> InstallingFlag {
        status.write().installing_snapshot = true;
        InstallingFlag(status.clone())
    }
}

impl Drop for InstallingFlag {
    fn drop(&mut self) {
        self.0.write().installing_snapshot = false;
    }
}

/// A frozen member stands for no election: its vote requests are not sent.
fn without_vote_requests(msgs: Vec<Message>) -> Vec<Message> {
    msgs.into_iter()
        .filter(|m| {
            !matches!(
                m.get_msg_type(),
                MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
            )
        })
        .collect()
}

pub enum Event {
    /// Replicate `data`; `term` is the term the caller saw when it read its pre-image.
    Propose {
        data: Vec<u8>,
        term: u64,
        done: SyncSender<Result<u64, ProposeError>>,
    },
    /// Confirm leadership with a quorum (Raft's ReadIndex) and answer once everything
    /// committed before the request is applied here: a linearizable read may then run.
    ReadIndex {
        done: SyncSender<Result<u64, ProposeError>>,
    },
    /// Answer once this member has applied everything committed before the request (a
    /// causally consistent read, `afterClusterTime`): a writable primary has; a primary
    /// not yet writable waits for its term's first entry; a secondary asks the primary
    /// for its commit index (a follower ReadIndex) and waits to apply up to it.
    CatchUp {
        done: SyncSender<Result<u64, ProposeError>>,
    },
    Message(Box<Message>),
    /// Start an election now (`replSetStepUp`).
    Campaign,
    /// Hand leadership to another member (`replSetStepDown`).
    TransferLeader(u64),
    /// WiredTiger has checkpointed everything up to this applied index: the log before it
    /// may go, keeping `retain_bytes` of entries for members that lag.
    Compact(u64),
    /// Do not become primary before this instant (`replSetFreeze`; a stepped-down
    /// primary freezes itself for `stepDownSecs`). `None` thaws.
    Freeze(Option<Instant>),
    /// A member began fetching this member's data after a `MsgSnapshot`.
    SnapshotServing(u64),
    /// A member is copying the data of a snapshot this member sent from another member of
    /// its site: the transfer is going on (and is not reported as never started).
    SnapshotCopying(u64),
    /// The fetch ended; raft-rs hears of it (`report_snapshot`).
    SnapshotServed {
        to: u64,
        ok: bool,
    },
    /// The applier has applied everything up to this index.
    Applied(u64),
    /// The applier could not write an entry: the member stops.
    ApplyFailed(String),
    Stop,
}

/// A member sent a `MsgSnapshot` that has not started fetching the data by then is
/// reported as failed, so raft-rs tries again (it waits for a report forever otherwise).
const SNAPSHOT_FETCH_START: Duration = Duration::from_secs(10);
/// Attempts at fetching a snapshot before a member whose tables were already dropped
/// stops (restarted, it empties itself and asks again).
const SNAPSHOT_ATTEMPTS: u32 = 3;
/// After installing a snapshot, a member does not ask for another for this long.
const REQUEST_SNAPSHOT_AFTER_INSTALL: Duration = Duration::from_secs(5);
/// Read requests older than this are forgotten (callers wait at most their deadline).
const READ_FORGET: Duration = Duration::from_secs(120);

pub struct Driver {
    pub raw: RawNode<super::log_store::LogStore>,
    pub log: DurableLog,
    pub engine: Arc<dyn Engine>,
    /// Applies committed entries off this thread (`None` on an arbiter, which holds no
    /// data).
    pub applier: Option<Applier>,
    pub rx: Receiver<Event>,
    pub outbox: Outbox,
    pub status: Arc<RwLock<Status>>,
    /// Arbiters vote and keep the log but hold no data.
    pub arbiter: bool,
    /// Called after a snapshot replaced the catalog table (the applier calls it after
    /// entries that change it).
    pub on_catalog_change: Arc<dyn Fn() + Send + Sync>,
    /// Distinguishes this run's proposals from an earlier incarnation's in the log.
    pub incarnation: u64,
    pub next_seq: u64,
    pub waiters: HashMap<u64, SyncSender<Result<u64, ProposeError>>>,
    /// ReadIndex requests waiting for the quorum's answer, by sequence number, with when
    /// they were asked (a follower's request is dropped when it has no primary; the
    /// caller times out, and the entry goes after `READ_FORGET`).
    pub reads: HashMap<u64, (Instant, SyncSender<Result<u64, ProposeError>>)>,
    /// Confirmed reads waiting for the applied index to reach theirs.
    pub confirmed_reads: Vec<(u64, SyncSender<Result<u64, ProposeError>>)>,
    /// First log index of the current leadership term: until it is applied the new
    /// primary's data may lag what earlier primaries committed, so it takes no writes.
    pub term_start: u64,
    /// The last index the data holds (applied, or installed from a snapshot).
    pub applied: u64,
    /// The last committed index handed to the applier (at least `applied`).
    pub dispatched: u64,
    pub was_leader: bool,
    /// Election priority of every data member (arbiters and priority 0 are absent),
    /// for handing leadership to a caught-up member that outranks this one.
    pub priorities: HashMap<u64, i64>,
    /// The leader this member last saw, and since when.
    pub leader_seen: (u64, Instant),
    /// When this member last asked the primary for a priority takeover.
    pub asked_takeover: Option<Instant>,
    /// Log entries kept beyond the checkpointed index, in bytes.
    pub retain_bytes: u64,
    /// Seconds of log kept beyond `retain_bytes` for change streams, and the most bytes
    /// that may keep (`ReplConfig::log_retain_secs`, `log_retain_max_mb`).
    pub retain_window: (u64, u64),
    /// While frozen this member asks for no votes and accepts no leadership transfer.
    pub frozen_until: Option<Instant>,
    /// A member with a new log grants and asks for no votes for a while.
    pub vote_fence: super::vote_fence::VoteFence,
    /// The member's log directory (where the snapshot-install marker lives).
    pub dir: std::path::PathBuf,
    /// Snapshots sent to members: when, and whether their fetch has started.
    pub snapshots_out: HashMap<u64, (Instant, bool)>,
    /// Where the documents of proposals a new primary erased are kept.
    pub rollback: super::rollback::RollbackDir,
    /// When this member last installed a snapshot.
    pub last_install: Option<Instant>,
    /// The data members of this member's own site: a snapshot is copied from one of them
    /// when it can, rather than across sites from the primary.
    pub site_peers: Vec<u64>,
    /// Stamps every proposal with a cluster time (`proto::cluster_clock`).
    pub clock: Arc<ClusterClock>,
    /// The transactions prepared here: no proposal may write their keys.
    pub prepared: Arc<super::prepared::Prepared>,
    /// The cluster times (and terms) of entries handed to the applier and not yet
    /// applied, by index.
    pub pending_times: VecDeque<(u64, ClusterTime, u64)>,
}

impl Driver {
    pub fn run(mut self) {
        let mut next_tick = Instant::now() + TICK;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(Event::Stop) => break,
                Ok(ev) => {
                    if self.handle(ev) {
                        break;
                    }
                    while let Ok(ev) = self.rx.try_recv() {
                        if matches!(ev, Event::Stop) || self.handle(ev) {
                            return self.stop();
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            if now >= next_tick {
                self.raw.tick();
                let raft = &self.raw.raft;
                let leader =
                    (raft.leader_id != raft::INVALID_ID).then_some((raft.leader_id, raft.term));
                let last = raft.raft_log.last_index();
                if let Err(e) = self.vote_fence.tick(leader, last) {
                    warn!(error = %e, "could not lift the vote fence");
                }
                self.snapshot_watchdog();
                self.forget_old_reads();
                self.priority_takeover();
                self.arbiter_handover();
                next_tick = now + TICK;
            }
            self.track_role();
            if let Err(e) = self.on_ready() {
                // The log or the data cannot be written: this member must not go on
                // acknowledging anything. The others keep the set available.
                error!(error = %e, "replication stopped");
                self.status.write().halted = Some(e.to_string());
                break;
            }
            self.publish_status();
        }
        self.stop();
    }

    fn stop(&mut self) {
        // What is committed and queued is applied (and its proposers answered) first.
        if let Some(a) = self.applier.as_mut() {
            a.stop();
        }
        self.fail_waiters(ProposeError::Shutdown);
        self.status.write().role = StateRole::Follower;
        self.status.write().writable = false;
    }

    /// Returns true when the driver must stop.
    fn handle(&mut self, ev: Event) -> bool {
        match ev {
            Event::Propose { data, term, done } => {
                let r = self.propose(data, term);
                match r {
                    Ok(seq) => {
                        self.waiters.insert(seq, done);
                    }
                    Err(e) => {
                        let _ = done.try_send(Err(e));
                    }
                }
            }
            Event::ReadIndex { done } => {
                if !self.writable() {
                    let _ = done.try_send(Err(ProposeError::NotPrimary));
                    return false;
                }
                self.read_index(done);
            }
            Event::CatchUp { done } => {
                let raft = &self.raw.raft;
                if self.arbiter {
                    let _ = done.try_send(Err(ProposeError::NotPrimary));
                } else if raft.state == StateRole::Leader {
                    // Answered once everything committed so far is applied (and, on a
                    // new primary, its term's first entry).
                    let index = if self.writable() {
                        raft.raft_log.committed
                    } else {
                        self.term_start
                    };
                    self.confirmed_reads.push((index, done));
                    self.answer_reads();
                } else if raft.leader_id == raft::INVALID_ID {
                    // Nobody to ask: kept unanswered, the caller's deadline ends the wait.
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.reads.insert(seq, (Instant::now(), done));
                } else {
                    self.read_index(done);
                }
            }
            Event::Message(_) if self.frozen() && is_transfer(&ev) => {}
            Event::Message(m) if !self.vote_fence.admits(&m) => {
                debug!(
                    from = m.from,
                    term = m.term,
                    "vote fence: a vote not granted"
                );
            }
            Event::Message(m) if m.get_msg_type() == MessageType::MsgSnapshot => {
                if let Err(e) = self.receive_snapshot(*m) {
                    error!(error = %e, "replication stopped");
                    self.status.write().halted = Some(e.to_string());
                    return true;
                }
            }
            Event::Message(mut m) => {
                // A member whose log was lost (a wiped disk, an interrupted snapshot
                // install) still looks caught up to the primary, which sends a heartbeat's
                // commit index only up to what the member acknowledged. raft-rs treats a
                // commit index beyond the log as fatal, so it is clamped, and the member
                // asks for a snapshot: otherwise the primary, believing it has everything,
                // would send it nothing until the next write.
                let mut lost = None;
                if m.get_msg_type() == MessageType::MsgHeartbeat {
                    let last = self.raw.raft.raft_log.last_index();
                    if m.commit > last {
                        lost = Some((m.from, m.commit));
                        m.commit = last;
                    }
                }
                if let Err(e) = self.raw.step(*m) {
                    warn!(error = %e, "dropped a raft message");
                }
                // Heartbeats queued while a snapshot was installing still carry the old
                // commit index: a fresh install is not asked for again.
                let installed_lately = self
                    .last_install
                    .is_some_and(|t| t.elapsed() < REQUEST_SNAPSHOT_AFTER_INSTALL);
                if let Some((leader, commit)) = lost.filter(|_| !installed_lately) {
                    self.request_snapshot(leader, commit);
                }
            }
            Event::Campaign => {
                let _ = self.raw.campaign();
            }
            Event::TransferLeader(to) => self.raw.transfer_leader(to),
            Event::Freeze(until) => self.frozen_until = until,
            Event::Compact(durable) => {
                // Compaction appends a state record: after a failed write the file may end
                // in part of one, and anything appended behind it would be misread at the
                // next open. The member stops (fail-stop) rather than write on.
                if let Err(e) = self.compact(durable) {
                    error!(error = %e, "log compaction failed: replication stopped");
                    self.status.write().halted = Some(format!("log compaction failed: {e}"));
                    return true;
                }
            }
            Event::SnapshotServing(to) => {
                self.snapshots_out.insert(to, (Instant::now(), true));
            }
            Event::SnapshotCopying(to) => {
                // Only a snapshot still waiting for its copy to start: one this member is
                // serving itself reports its own end.
                if let Some((sent, false)) = self.snapshots_out.get_mut(&to) {
                    *sent = Instant::now();
                }
            }
            Event::SnapshotServed { to, ok } => {
                self.snapshots_out.remove(&to);
                let status = if ok {
                    raft::SnapshotStatus::Finish
                } else {
                    raft::SnapshotStatus::Failure
                };
                self.raw.report_snapshot(to, status);
            }
            Event::Applied(index) => self.on_applied(index),
            Event::ApplyFailed(why) => {
                error!(error = %why, "replication stopped");
                self.status.write().halted = Some(why);
                return true;
            }
            Event::Stop => return true,
        }
        false
    }

    /// A `MsgSnapshot` (which carries no data): fetch the data from its sender, then step
    /// it with the index and term the data reflects. An arbiter holds no data and steps
    /// it as it is. A fetch that fails before any table was dropped is simply given up
    /// (the sender reports the failure and sends again); once tables are dropped, the
    /// member retries and then stops rather than go on without its data.
    fn receive_snapshot(&mut self, mut m: Message) -> Result<(), StorageError> {
        // A snapshot this member's data already covers (sent twice, or asked for by a
        // stale request) is stepped as it is: raft-rs ignores it, and nothing is copied.
        let covered = m.get_snapshot().get_metadata().index <= self.dispatched;
        if !self.arbiter && !covered {
            // The data is about to be replaced: nothing may still be writing to it, and
            // no prepared transaction may hold its tables open. A fetch given up keeps
            // the data, whose prepared transactions are prepared again.
            self.drain()?;
            let _installing = InstallingFlag::raise(&self.status);
            super::prepared::abandon_all(self.engine.as_ref(), &self.prepared)?;
            let wanted = m.get_snapshot().get_metadata().index;
            let Some((index, term)) = self.fetch_snapshot_data(m.from, wanted)? else {
                super::prepared::recover(self.engine.as_ref(), &self.prepared)?;
                return Ok(());
            };
            // Entries up to `index` are in the data now: `dispatch` skips them if raft-rs
            // hands them over anyway (when it fast-forwards instead of restoring).
            self.installed(index);
            super::prepared::recover(self.engine.as_ref(), &self.prepared)?;
            (self.on_catalog_change)();
            let meta = m.mut_snapshot().mut_metadata();
            meta.index = index;
            meta.term = term;
        }
        if let Err(e) = self.raw.step(m) {
            warn!(error = %e, "dropped a snapshot message");
        }
        Ok(())
    }

    /// Copies the data a `MsgSnapshot` from `sender` stands for, and returns the index and
    /// term it reflects. A data member of this member's own site is asked first, for data
    /// at `wanted` (the index the message names) or later, so that the copy stays within
    /// the site; the sender is asked last, for its data as it is (the entries between its
    /// applied index and `wanted` follow from the log). `None` when no member started a
    /// transfer: the sender reports the failure and sends again. Once a transfer broke
    /// off after this member's tables were dropped, it retries from the sender and then
    /// stops rather than go on without its data.
    fn fetch_snapshot_data(
        &self,
        sender: u64,
        wanted: u64,
    ) -> Result<Option<(u64, u64)>, StorageError> {
        let me = self.raw.raft.id;
        let mut sources: Vec<(u64, u64)> = self
            .site_peers
            .iter()
            .filter(|&&p| p != sender)
            // A peer's data must reflect some write: an emptied member has applied nothing.
            .map(|&p| (p, wanted.max(1)))
            .collect();
        sources.push((sender, 0));
        let (mut next, mut broken) = (0, 0);
        loop {
            let (from, min_index) = sources[next];
            let told = (from != sender).then_some(sender);
            let fetched = self.outbox.fetch_snapshot(
                from,
                me,
                min_index,
                told,
                self.engine.as_ref(),
                &self.dir,
            );
            match fetched {
                Ok(got) => {
                    info!(from, sender, index = got.0, "copied a snapshot");
                    return Ok(Some(got));
                }
                Err(e) if !snapshot::interrupted(&self.dir) && next + 1 < sources.len() => {
                    info!(from, error = %e, "a member of this site cannot send its data");
                    next += 1;
                }
                Err(e) if !snapshot::interrupted(&self.dir) => {
                    warn!(from, error = %e, "could not fetch a snapshot");
                    return Ok(None);
                }
                Err(e) => {
                    broken += 1;
                    if broken >= SNAPSHOT_ATTEMPTS {
                        return Err(StorageError::Other(format!(
                            "installing a snapshot from member {from} failed: {e}; restart \
                             this member to start again from nothing"
                        )));
                    }
                    warn!(from, attempt = broken, error = %e, "fetching a snapshot again");
                    std::thread::sleep(TICK * 10);
                    next = sources.len() - 1;
                }
            }
        }
    }

    /// Asks the primary for a snapshot after this member lost entries it had acknowledged
    /// (up to `commit`). raft-rs's own `request_snapshot` needs a last entry of the
    /// current term, which an empty log lacks; this is the rejection it would send, with
    /// a rejected index no progress state takes for stale.
    fn request_snapshot(&mut self, leader: u64, commit: u64) {
        let mut r = Message::default();
        r.set_msg_type(MessageType::MsgAppendResponse);
        r.from = self.raw.raft.id;
        r.to = leader;
        r.term = self.raw.raft.term;
        r.reject = true;
        r.index = u64::MAX;
        r.reject_hint = self.raw.raft.raft_log.last_index();
        r.request_snapshot = commit;
        self.outbox.send(vec![r]);
    }

    /// Asks for the commit index as a quorum confirms it (raft-rs forwards a follower's
    /// request to the primary); answered in `on_ready` once applied here.
    fn read_index(&mut self, done: SyncSender<Result<u64, ProposeError>>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.raw.read_index(self.context(seq));
        self.reads.insert(seq, (Instant::now(), done));
    }

    /// Forgets read requests nobody answered (their callers have long timed out).
    fn forget_old_reads(&mut self) {
        self.reads
            .retain(|_, (asked, _)| asked.elapsed() < READ_FORGET);
    }

    /// Reports snapshots whose receiver never came for the data (nor told this member it
    /// copies it from another) as failed. A snapshot raft-rs no longer waits for (the
    /// receiver answered after installing data from another member) is forgotten.
    fn snapshot_watchdog(&mut self) {
        let stale: Vec<u64> = self
            .snapshots_out
            .iter()
            .filter(|(_, (sent, serving))| !serving && sent.elapsed() > SNAPSHOT_FETCH_START)
            .map(|(&to, _)| to)
            .collect();
        for to in stale {
            self.snapshots_out.remove(&to);
            let waiting = self
                .raw
                .raft
                .prs()
                .get(to)
                .is_some_and(|p| p.state == raft::ProgressState::Snapshot);
            if waiting {
                self.raw.report_snapshot(to, raft::SnapshotStatus::Failure);
                self.status.write().snapshots_unfetched += 1;
            }
        }
    }

    fn propose(&mut self, data: Vec<u8>, term: u64) -> Result<u64, ProposeError> {
        if !self.writable() {
            return Err(ProposeError::NotPrimary);
        }
        if term != self.raw.raft.term {
            return Err(ProposeError::StateChanged);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        // Ticked here, on the one thread that proposes, so times rise with log order.
        let mut context = self.context(seq);
        context.extend_from_slice(&self.clock.tick().to_le_bytes());
        self.raw
            .propose(context, data)
            .map_err(|_| ProposeError::NotPrimary)?;
        Ok(seq)
    }

    /// A request's context: this run's incarnation and the request's sequence number. A
    /// proposal's carries its cluster time after them (`entry_time`).
    fn context(&self, seq: u64) -> Vec<u8> {
        let mut context = Vec::with_capacity(CONTEXT_WITH_TIME);
        context.extend_from_slice(&self.incarnation.to_le_bytes());
        context.extend_from_slice(&seq.to_le_bytes());
        context
    }

    fn outgoing(&mut self, msgs: Vec<Message>) -> Vec<Message> {
        let last = self.raw.raft.raft_log.last_index();
        for m in &msgs {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                self.snapshots_out.insert(m.to, (Instant::now(), false));
            }
            if let Err(e) = self.vote_fence.sent(m, last) {
                warn!(error = %e, "could not record a vote in the vote fence");
            }
        }
        if self.frozen() || !self.vote_fence.may_campaign(last) {
            without_vote_requests(msgs)
        } else {
            msgs
        }
    }

    fn frozen(&self) -> bool {
        self.frozen_until.is_some_and(|t| Instant::now() < t)
    }

    /// An arbiter holds no data: even while it leads it takes no commands.
    fn writable(&self) -> bool {
        !self.arbiter && self.raw.raft.state == StateRole::Leader && self.applied >= self.term_start
    }

    fn on_ready(&mut self) -> Result<(), StorageError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        for rs in ready.take_read_states() {
            if let Some((_, w)) = self
                .own_seq(&rs.request_ctx)
                .and_then(|s| self.reads.remove(&s))
            {
                self.confirmed_reads.push((rs.index, w));
            }
        }
        if !ready.messages().is_empty() {
            let msgs = self.outgoing(ready.take_messages());
            self.outbox.send(msgs);
        }
        if !ready.snapshot().is_empty() {
            // The data already holds it (`receive_snapshot`); the log now starts after it.
            let snap = ready.snapshot();
            self.log.install_snapshot(snap)?;
            snapshot::installed(&self.dir)?;
            self.installed(snap.get_metadata().index);
            self.status.write().snapshots_installed += 1;
            self.last_install = Some(Instant::now());
            info!(
                index = snap.get_metadata().index,
                "the log starts after the installed snapshot"
            );
        }
        self.dispatch(ready.take_committed_entries());
        if !ready.entries().is_empty() {
            // A member that becomes primary ticks above every entry it holds.
            if let Some(t) = ready
                .entries()
                .iter()
                .rev()
                .find_map(|e| entry_time(&e.context))
            {
                self.clock.learn(t);
            }
            let replaced = self.log.append(ready.entries())?;
            if !replaced.is_empty() && !self.arbiter {
                // Never committed, so never acknowledged; kept for the operator all the same.
                if let Err(e) = self.rollback.save(&replaced) {
                    warn!(error = %e, "could not save erased writes to the rollback directory");
                }
            }
        }
        if let Some(hs) = ready.hs() {
            self.log.set_hard_state(hs.clone())?;
        }
        // Entries and votes are on disk before anyone is told about them.
        self.log.flush()?;
        if !ready.persisted_messages().is_empty() {
            let msgs = self.outgoing(ready.take_persisted_messages());
            self.outbox.send(msgs);
        }
        // Applying is reported later (`Event::Applied` → `advance_apply_to`).
        let mut light = self.raw.advance_append(ready);
        if let Some(commit) = light.commit_index() {
            // Written with the next synced record, not synced now (see `DurableLog`).
            self.log.set_commit(commit)?;
        }
        let msgs = self.outgoing(light.take_messages());
        self.outbox.send(msgs);
        self.dispatch(light.take_committed_entries());
        // An installed snapshot counts as persisted only now.
        self.report_applied();
        // Reads confirmed above whose index the data already holds.
        self.answer_reads();
        Ok(())
    }

    /// Hands committed entries to the applier with the proposers waiting for them. An
    /// arbiter holds no data: for it, committed is applied.
    fn dispatch(&mut self, entries: Vec<Entry>) {
        let entries: Vec<Entry> = entries
            .into_iter()
            // In the data already (an installed snapshot).
            .filter(|e| e.index > self.dispatched)
            .collect();
        let Some(last) = entries.last().map(|e| e.index) else {
            return;
        };
        self.dispatched = last;
        self.pending_times.extend(
            entries
                .iter()
                .filter_map(|e| entry_time(&e.context).map(|t| (e.index, t, e.term))),
        );
        let waiters: Vec<(u64, Waiter)> = entries
            .iter()
            .filter_map(|e| {
                let w = self
                    .own_seq(&e.context)
                    .and_then(|s| self.waiters.remove(&s))?;
                Some((e.index, w))
            })
            .collect();
        match self.applier.as_ref() {
            Some(applier) => applier.apply(entries, waiters),
            None => self.on_applied(last),
        }
    }

    /// The data holds everything up to `index`: raft-rs hears of it, and reads waiting for
    /// it may run.
    fn on_applied(&mut self, index: u64) {
        self.applied = self.applied.max(index);
        let mut newest = None;
        while let Some(&(at, time, term)) = self.pending_times.front() {
            if at > self.applied {
                break;
            }
            self.pending_times.pop_front();
            newest = Some((time, term));
        }
        if let Some(newest) = newest {
            self.status.write().applied_time = newest;
        }
        self.report_applied();
        self.answer_reads();
    }

    /// Tells raft-rs how far the data is, as far as it may hear it: never beyond what its
    /// log holds as committed and persisted (a snapshot being installed is neither yet).
    fn report_applied(&mut self) {
        let log = &self.raw.raft.raft_log;
        let to = self.applied.min(log.committed).min(log.persisted);
        if to > log.applied {
            self.raw.advance_apply_to(to);
        }
    }

    fn answer_reads(&mut self) {
        let applied = self.applied;
        self.confirmed_reads.retain(|(index, w)| {
            if *index <= applied {
                let _ = w.try_send(Ok(*index));
            }
            *index > applied
        });
    }

    /// Waits until the applier has applied everything handed to it.
    fn drain(&mut self) -> Result<(), StorageError> {
        if let Some(a) = self.applier.as_ref() {
            let applied = a.wait_for(self.dispatched).map_err(StorageError::Other)?;
            self.on_applied(applied);
        }
        Ok(())
    }

    /// The data now holds everything up to `index`, from a snapshot.
    fn installed(&mut self, index: u64) {
        self.dispatched = self.dispatched.max(index);
        if let Some(a) = self.applier.as_ref() {
            a.installed(index);
        }
        self.applied = self.applied.max(index);
        self.report_applied();
        self.answer_reads();
    }

    /// The preferred primary comes back: a caught-up follower whose priority is higher
    /// than the primary's asks the primary to hand over (a Raft leadership transfer, so
    /// no write is lost), as MongoDB's priority takeover does. It waits until the
    /// primary has served for a settling period, asks at most every few seconds, and not
    /// while frozen.
    fn priority_takeover(&mut self) {
        let raft = &self.raw.raft;
        let leader = raft.leader_id;
        if raft.state != StateRole::Follower || leader == raft::INVALID_ID || self.frozen() {
            return;
        }
        let Some(&mine) = self.priorities.get(&raft.id) else {
            return;
        };
        let theirs = self.priorities.get(&leader).copied().unwrap_or(0);
        let settled =
            self.leader_seen.0 == leader && self.leader_seen.1.elapsed() >= TAKEOVER_SETTLE;
        let caught_up = self.applied >= raft.raft_log.committed;
        let asked_recently = self
            .asked_takeover
            .is_some_and(|t| t.elapsed() < TAKEOVER_RETRY);
        if mine > theirs && settled && caught_up && !asked_recently {
            info!(
                leader,
                "asking the primary to hand over to this higher-priority member"
            );
            self.asked_takeover = Some(Instant::now());
            let me = raft.id;
            self.raw.transfer_leader(me);
        }
    }

    /// An arbiter leads only when no data member could be elected (see the election timers
    /// in `Replica::start`), and then only to bring one up to date: it hands leadership to the
    /// best data member (reachable, highest priority, most caught up). raft-rs sends the
    /// missing entries first and transfers once the member has them; a transfer that does
    /// not complete within an election timeout is dropped, and the next tick tries again.
    fn arbiter_handover(&mut self) {
        let raft = &self.raw.raft;
        if !self.arbiter || raft.state != StateRole::Leader || raft.lead_transferee.is_some() {
            return;
        }
        let prs = raft.prs();
        let best = self
            .priorities
            .iter()
            .filter_map(|(&id, &priority)| {
                let pr = prs.get(id)?;
                Some((pr.recent_active, priority, pr.matched, id))
            })
            .max();
        if let Some((_, _, _, to)) = best {
            info!(to, "the arbiter leads: handing over to a data member");
            self.raw.transfer_leader(to);
        }
    }

    /// Drops the log up to `durable` (checkpointed), but keeps the newest `retain_bytes`
    /// of entries so a member that lags a little still catches up from the log.
    fn compact(&mut self, durable: u64) -> std::io::Result<()> {
        let first = self.log.first_index();
        let last = self.raw.raft.raft_log.last_index();
        let keep_from = self
            .log
            .tail_start(self.retain_bytes)
            .min(self.window_start(first));
        let to = durable.min(self.applied).min(keep_from.saturating_sub(1));
        if to >= first {
            self.log.compact(to)?;
            info!(to, first = to + 1, last, "compacted the raft log");
        }
        Ok(())
    }

    /// The first entry inside the retention window in time (`u64::MAX`: none kept for
    /// time), kept within the window's byte cap.
    fn window_start(&self, first: u64) -> u64 {
        let (secs, max_bytes) = self.retain_window;
        let newest = self.status.read().applied_time.0;
        if secs == 0 || newest == 0 {
            return u64::MAX;
        }
        let at = newest.saturating_sub(secs << 32);
        let by_time = self
            .log
            .storage()
            .first_at_time(at, (first, self.applied + 1))
            .unwrap_or(u64::MAX);
        by_time.max(self.log.tail_start(max_bytes))
    }

    /// Notices leadership changes (they happen inside `step` and `tick`).
    fn track_role(&mut self) {
        if self.raw.raft.leader_id != self.leader_seen.0 {
            self.leader_seen = (self.raw.raft.leader_id, Instant::now());
        }
        let is_leader = self.raw.raft.state == StateRole::Leader;
        if is_leader && !self.was_leader {
            // The no-op entry raft-rs appends on election is the last one now.
            self.term_start = self.raw.raft.raft_log.last_index();
            // Entries from before a restart were never appended in this run.
            if let Some(t) = self.newest_time_in_log() {
                self.clock.learn(t);
            }
            if self.arbiter {
                info!(
                    term = self.raw.raft.term,
                    "arbiter elected (takes no commands)"
                );
            } else {
                info!(term = self.raw.raft.term, "became primary");
            }
        }
        if self.was_leader && !is_leader {
            self.term_start = u64::MAX;
            info!(term = self.raw.raft.term, "stepped down");
            // Prepares proposed in that term hold their keys again if they apply.
            self.prepared.forget_proposed();
            // Their entries may still commit under the new primary, or vanish: the
            // callers cannot know, so they hear that the state changed.
            self.fail_waiters(ProposeError::StateChanged);
        }
        self.was_leader = is_leader;
    }

    /// The cluster time of the newest entry in the log that has one, looking back at most
    /// `TIME_LOOKBACK` entries (an election's no-op and configuration changes have none).
    fn newest_time_in_log(&self) -> Option<ClusterTime> {
        let log = &self.raw.raft.raft_log;
        let last = log.last_index();
        let from = log
            .first_index()
            .max(last.saturating_sub(TIME_LOOKBACK) + 1);
        let ctx = raft::GetEntriesContext::empty(false);
        let entries = log.entries(from, None, ctx).ok()?;
        entries.iter().rev().find_map(|e| entry_time(&e.context))
    }

    fn own_seq(&self, context: &[u8]) -> Option<u64> {
        if context.len() != CONTEXT && context.len() != CONTEXT_WITH_TIME {
            return None;
        }
        let inc = u64::from_le_bytes(context[..8].try_into().ok()?);
        (inc == self.incarnation)
            .then(|| u64::from_le_bytes(context[8..16].try_into().expect("8 bytes")))
    }

    fn fail_waiters(&mut self, e: ProposeError) {
        let reads = self.reads.drain().map(|(_, (_, w))| w);
        let confirmed = self.confirmed_reads.drain(..).map(|(_, w)| w);
        for w in self
            .waiters
            .drain()
            .map(|(_, w)| w)
            .chain(reads)
            .chain(confirmed)
        {
            let _ = w.try_send(Err(e.clone()));
        }
    }

    fn publish_status(&self) {
        let raft = &self.raw.raft;
        let mut matched = Vec::new();
        if raft.state == StateRole::Leader {
            for (id, p) in raft.prs().iter() {
                matched.push((*id, p.matched, p.recent_active));
            }
        }
        let mut s = self.status.write();
        s.role = raft.state;
        s.term = raft.term;
        s.leader = raft.leader_id;
        s.commit = raft.raft_log.committed;
        s.applied = self.applied;
        s.last_index = raft.raft_log.last_index();
        s.first_index = self.log.first_index();
        s.writable = self.writable();
        s.vote_fenced = self.vote_fence.fenced();
        s.matched = matched;
        s.updated = Instant::now();
    }
}

/// Encodes a raft message for the wire (raft-proto's own codec).
pub fn encode_message(m: &Message) -> Vec<u8> {
    m.write_to_bytes().unwrap_or_default()
}
