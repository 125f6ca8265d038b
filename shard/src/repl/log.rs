//! The Raft log on disk: the replica set's oplog and the member's only write-ahead log.
//!
//! WiredTiger runs without its own journal; its tables become durable at checkpoints, and
//! everything after the last checkpoint is replayed from this log on restart (the applied
//! index is committed in the same WiredTiger transaction as the data it describes).
//!
//! Records are appended to one file, `raft.log`, and synced once per `Ready` (group
//! commit: every proposal that arrived meanwhile shares the sync). raft-rs reads the log
//! through `LogStore` (`log_store.rs`), which keeps only the newest entries in memory
//! and reads older ones back from the file.
//!
//! Record: kind (1 byte), payload length (u32 LE), CRC-32 of the payload (u32 LE), payload.
//! A torn or corrupt tail (a crash mid-append) is cut off at open. An entry's payload is
//! its protobuf encoding, written without copying the entry's data (`log_pending.rs`).
//!
//! Compaction rewrites the file without the entries up to an index that WiredTiger has
//! checkpointed (so recovery never needs them): a `START` record then names the last
//! dropped entry's index and term, and the new file replaces the old one atomically
//! (write, fsync, rename, fsync the directory).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, Storage};

use super::log_pending::Pending;
use super::log_store::{invalid, LogStore, HEADER};
use super::page_cache::Uncached;

const ENTRY: u8 = 1;
const HARD_STATE: u8 = 2;
const CONF_STATE: u8 = 3;
/// The log starts after this (index, term): everything up to it was compacted away.
const START: u8 = 4;

pub struct DurableLog {
    store: LogStore,
    path: PathBuf,
    /// Appended to here; `store` reads older entries from it.
    file: Arc<File>,
    /// Bytes of `file` that hold whole records.
    len: u64,
    /// Records not yet written (flushed with one `writev` and one sync).
    pending: Pending,
    /// Whether `pending` holds a record that must be on disk before anyone hears of it
    /// (entries, term, vote, configuration). A commit index alone need not be: the
    /// leader tells it again, and at start the applied index (in WiredTiger) raises it.
    must_sync: bool,
    sync: bool,
    /// `fdatasync` calls made (the tests count them).
    syncs: u64,
    /// How much of `file` has left the page cache (synced records are dropped from it).
    uncached: Uncached,
}

impl DurableLog {
    /// Opens (or creates) the log in `dir`. A new log starts with `voters` as its
    /// configuration; an existing one keeps what it recorded.
    pub fn open(dir: &Path, voters: &[u64], sync: bool) -> std::io::Result<DurableLog> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("raft.log");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut entries: Vec<Entry> = Vec::new();
        let mut offsets: Vec<u64> = Vec::new();
        let (mut hs, mut cs, mut start) = (None, None, None);
        let mut pos = 0usize;
        while let Some((kind, payload)) = next_record(&bytes[pos..]) {
            match kind {
                ENTRY => {
                    let e = Entry::parse_from_bytes(payload).map_err(invalid)?;
                    // A later record for an index replaces that index and everything after.
                    while entries.last().is_some_and(|l| l.index >= e.index) {
                        entries.pop();
                        offsets.pop();
                    }
                    offsets.push(pos as u64);
                    entries.push(e);
                }
                HARD_STATE => hs = Some(HardState::parse_from_bytes(payload).map_err(invalid)?),
                CONF_STATE => cs = Some(ConfState::parse_from_bytes(payload).map_err(invalid)?),
                START if payload.len() == 16 => {
                    let index = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
                    let term = u64::from_le_bytes(payload[8..].try_into().expect("8 bytes"));
                    start = Some((index, term));
                }
                _ => break,
            }
            pos += HEADER + payload.len();
        }
        if pos < bytes.len() {
            tracing::warn!(
                kept = pos,
                dropped = bytes.len() - pos,
                "cutting a torn raft log tail"
            );
            file.set_len(pos as u64)?;
        }
        file.seek(SeekFrom::Start(pos as u64))?;
        let file = Arc::new(file);
        let store = LogStore::new();
        store.wl().set_file(file.clone());
        let mut log = DurableLog {
            store,
            path,
            file,
            len: pos as u64,
            pending: Pending::default(),
            must_sync: false,
            sync,
            syncs: 0,
            uncached: Uncached::default(),
        };
        let cs = match cs {
            Some(cs) => cs,
            None => {
                let cs = ConfState::from((voters.to_vec(), vec![]));
                log.record(CONF_STATE, &cs.write_to_bytes().map_err(invalid)?);
                cs
            }
        };
        // A new member starts at term 1, not 0: raft-rs must never send a vote rejection
        // with term 0 (it asserts), which it would when a lower-priority member asks a
        // fresh member for a pre-vote.
        let hs = match hs {
            Some(hs) => Some(hs),
            None => {
                let hs = HardState {
                    term: 1,
                    ..Default::default()
                };
                log.record(HARD_STATE, &hs.write_to_bytes().map_err(invalid)?);
                Some(hs)
            }
        };
        {
            let mut w = log.store.wl();
            if let Some((index, term)) = start {
                w.restart_at(index, term, cs.clone());
                let kept = entries.iter().position(|e| e.index > index);
                let kept = kept.unwrap_or(entries.len());
                entries.drain(..kept);
                offsets.drain(..kept);
            }
            w.set_conf_state(cs);
            w.append(&entries, &offsets)?;
            if let Some(hs) = hs {
                w.set_hardstate(hs);
            }
        }
        log.flush()?;
        log.store.wl().trim(log.len);
        Ok(log)
    }

    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    pub fn storage(&self) -> &LogStore {
        &self.store
    }

    /// First index still in the log.
    pub fn first_index(&self) -> u64 {
        self.store.rl().first_index()
    }

    /// The first index of the shortest tail of entries that holds at least `bytes` of
    /// records (the whole log if it is smaller).
    pub fn tail_start(&self, bytes: u64) -> u64 {
        let end = self.len + self.pending.len() as u64;
        let core = self.store.rl();
        let mut start = core.first_index();
        for (index, offset) in core.offsets_newest_first() {
            start = index;
            if end - offset >= bytes {
                break;
            }
        }
        start
    }

    /// Drops every entry up to and including `to` (the caller guarantees WiredTiger has
    /// checkpointed past it), on disk and in memory.
    pub fn compact(&mut self, to: u64) -> std::io::Result<()> {
        let first = self.first_index();
        let last = self.store.rl().last_index();
        if to < first || to > last {
            return Ok(());
        }
        self.flush()?;
        let term = self.store.term(to).map_err(invalid)?;
        let kept = self
            .store
            .entries(to + 1, last + 1, None, GetEntriesContext::empty(false))
            .map_err(invalid)?;
        let state = self.store.initial_state().map_err(invalid)?;
        let (hs, cs) = (state.hard_state, state.conf_state);
        let offsets = self.rewrite(Some((to, term)), &hs, &cs, &kept)?;
        // The same in memory: restart the storage at the marker, then put back what stays.
        let mut w = self.store.wl();
        w.restart_at(to, term, cs);
        w.append(&kept, &offsets)?;
        w.set_hardstate(hs);
        w.trim(self.len);
        Ok(())
    }

    /// The log after a snapshot was installed in the data: it starts after the snapshot's
    /// index, with nothing in it (raft-rs's order: the snapshot is stored before the
    /// entries of the same `Ready`).
    pub fn install_snapshot(&mut self, snap: &Snapshot) -> std::io::Result<()> {
        self.flush()?;
        let meta = snap.get_metadata();
        let hs = {
            let mut w = self.store.wl();
            if w.first_index() > meta.index {
                return Err(invalid(format!(
                    "snapshot at {} is older than the log, which starts at {}",
                    meta.index,
                    w.first_index()
                )));
            }
            // As raft-rs's storage: the commit index (and term, if behind) move to the
            // snapshot's.
            w.restart_at(meta.index, meta.term, meta.get_conf_state().clone());
            w.hard_state().clone()
        };
        self.rewrite(
            Some((meta.index, meta.term)),
            &hs,
            meta.get_conf_state(),
            &[],
        )
        .map(|_| ())
    }

    /// Empties the log, keeping the configuration and the term and vote (a member must
    /// never vote twice in a term), for a member whose data was emptied: it starts again
    /// from nothing and the primary sends the log or a snapshot. Only before raft-rs runs.
    pub fn reset(&mut self) -> std::io::Result<()> {
        let state = self.store.initial_state().map_err(invalid)?;
        let hs = HardState {
            commit: 0,
            ..state.hard_state
        };
        self.rewrite(None, &hs, &state.conf_state, &[])?;
        let mut w = self.store.wl();
        w.restart_at(0, 0, state.conf_state);
        w.set_hardstate(hs);
        Ok(())
    }

    /// Replaces the file, atomically (write, fsync, rename, fsync the directory), with the
    /// configuration, an optional start marker, the hard state and `kept`; the offsets of
    /// `kept`'s records in the new file.
    fn rewrite(
        &mut self,
        start: Option<(u64, u64)>,
        hs: &HardState,
        cs: &ConfState,
        kept: &[Entry],
    ) -> std::io::Result<Vec<u64>> {
        self.pending.clear();
        self.record(CONF_STATE, &cs.write_to_bytes().map_err(invalid)?);
        if let Some((index, term)) = start {
            let mut marker = index.to_le_bytes().to_vec();
            marker.extend_from_slice(&term.to_le_bytes());
            self.record(START, &marker);
        }
        self.record(HARD_STATE, &hs.write_to_bytes().map_err(invalid)?);
        let mut offsets = Vec::with_capacity(kept.len());
        for e in kept {
            offsets.push(self.pending.len() as u64);
            self.pending.entry(ENTRY, e)?;
        }
        let len = self.pending.len() as u64;
        let tmp = self.path.with_extension("log.compacting");
        {
            let f = File::create(&tmp)?;
            let written = self.pending.write_to(&f);
            self.pending.clear();
            written?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        let mut file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        file.seek(SeekFrom::End(0))?;
        self.file = Arc::new(file);
        self.store.wl().set_file(self.file.clone());
        self.len = len;
        self.uncached.cut(0);
        Ok(offsets)
    }

    /// Appends entries, replacing any suffix they conflict with, and returns the entries
    /// replaced (never committed: a new primary overwrote them).
    pub fn append(&mut self, entries: &[Entry]) -> std::io::Result<Vec<Entry>> {
        let Some(first) = entries.first() else {
            return Ok(Vec::new());
        };
        let mut replaced = Vec::new();
        let cut = self.store.rl().offset(first.index);
        if let Some(cut) = cut {
            // A new leader overwrote our uncommitted suffix. Nothing acknowledged is lost:
            // only committed entries are ever applied or acknowledged.
            let last = self.store.rl().last_index();
            replaced = self
                .store
                .entries(first.index, last + 1, None, GetEntriesContext::empty(false))
                .map_err(invalid)?;
            self.flush()?;
            self.file.set_len(cut)?;
            (&*self.file).seek(SeekFrom::Start(cut))?;
            self.len = cut;
            self.uncached.cut(cut);
            // The cut may have removed later hard-state records; write the current one again.
            let hs = self.store.rl().hard_state().clone();
            self.record(HARD_STATE, &hs.write_to_bytes().map_err(invalid)?);
        }
        let mut offsets = Vec::with_capacity(entries.len());
        for e in entries {
            offsets.push(self.len + self.pending.len() as u64);
            self.must_sync = true;
            self.pending.entry(ENTRY, e)?;
        }
        self.store.wl().append(entries, &offsets)?;
        Ok(replaced)
    }

    /// Records the hard state. Only a new term or vote needs a sync before raft-rs's
    /// messages go out (a member must never vote twice in a term); a moved commit index
    /// is written with the next synced record.
    pub fn set_hard_state(&mut self, hs: HardState) -> std::io::Result<()> {
        let vote_or_term = {
            let current = self.store.rl();
            let current = current.hard_state();
            hs.term != current.term || hs.vote != current.vote
        };
        self.record_lazy(HARD_STATE, &hs.write_to_bytes().map_err(invalid)?);
        self.must_sync |= vote_or_term;
        self.store.wl().set_hardstate(hs);
        Ok(())
    }

    /// Records the commit index raft-rs reported after `advance` (no sync needed: a lost
    /// commit index is learned again from the leader).
    pub fn set_commit(&mut self, commit: u64) -> std::io::Result<()> {
        let mut hs = self.store.rl().hard_state().clone();
        hs.commit = commit;
        self.set_hard_state(hs)
    }

    /// At start: entries this member already applied (its data says so) are committed,
    /// even if the commit index recorded with them did not reach the disk. raft-rs
    /// refuses to start with an applied index beyond the commit index.
    pub fn commit_at_least(&mut self, applied: u64) -> std::io::Result<()> {
        let (commit, last) = {
            let core = self.store.rl();
            (core.hard_state().commit, core.last_index())
        };
        if applied > commit && applied <= last {
            self.set_commit(applied)?;
        }
        Ok(())
    }

    /// Writes pending records, and syncs them (one `fdatasync`) when one must be durable.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let len = self.pending.len() as u64;
        self.pending.write_to(&*self.file)?;
        self.len += len;
        if self.sync && self.must_sync {
            self.file.sync_data()?;
            self.syncs += 1;
            self.uncached.drop_synced(&self.file, self.len);
        }
        self.must_sync = false;
        self.store.wl().trim(self.len);
        Ok(())
    }

    /// Queues a record that must be durable before the next message goes out.
    fn record(&mut self, kind: u8, payload: &[u8]) {
        self.must_sync = true;
        self.record_lazy(kind, payload);
    }

    /// Queues a record that may wait for the next synced one.
    fn record_lazy(&mut self, kind: u8, payload: &[u8]) {
        self.pending.record(kind, payload);
    }
}

/// The next whole, intact record, or `None` at the end or at a torn/corrupt record.
fn next_record(b: &[u8]) -> Option<(u8, &[u8])> {
    if b.len() < HEADER {
        return None;
    }
    let len = u32::from_le_bytes(b[1..5].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(b[5..9].try_into().ok()?);
    let payload = b.get(HEADER..HEADER + len)?;
    (crc32fast::hash(payload) == crc).then_some((b[0], payload))
}

#[cfg(test)]
mod tests {
    use raft::Storage;

    use super::super::log_store::CACHE_BYTES;
    use super::*;

    /// A data-less snapshot that only says where the log starts.
    fn start_marker(index: u64, term: u64, cs: &ConfState) -> Snapshot {
        let mut snap = Snapshot::default();
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(cs.clone());
        snap
    }

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Default::default()
        }
    }

    #[test]
    fn reopens_with_entries_hard_state_and_conflicts_resolved() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")])
                .unwrap();
            let hs = HardState {
                term: 2,
                vote: 2,
                commit: 1,
                ..Default::default()
            };
            log.set_hard_state(hs).unwrap();
            // A new leader replaces entries 2.. with its own.
            let replaced = log.append(&[entry(2, 2, b"B")]).unwrap();
            let replaced: Vec<u64> = replaced.iter().map(|e| e.index).collect();
            assert_eq!(replaced, [2, 3]);
            log.flush().unwrap();
        }
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!(s.last_index().unwrap(), 2);
        assert_eq!(s.term(2).unwrap(), 2);
        let state = s.initial_state().unwrap();
        assert_eq!(state.hard_state.term, 2);
        assert_eq!(state.hard_state.vote, 2);
        assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
    }

    #[test]
    fn compaction_drops_the_prefix_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            let entries: Vec<Entry> = (1..=10).map(|i| entry(i, 1, b"xxxxxxxx")).collect();
            log.append(&entries).unwrap();
            log.set_commit(10).unwrap();
            log.flush().unwrap();
            let before = std::fs::metadata(dir.path().join("raft.log"))
                .unwrap()
                .len();
            log.compact(6).unwrap();
            let after = std::fs::metadata(dir.path().join("raft.log"))
                .unwrap()
                .len();
            assert!(after < before, "{after} < {before}");
            assert_eq!(log.first_index(), 7);
            assert_eq!(log.storage().term(6).unwrap(), 1);
            // Appending after a compaction lands in the new file.
            log.append(&[entry(11, 2, b"y")]).unwrap();
            log.flush().unwrap();
        }
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!(s.first_index().unwrap(), 7);
        assert_eq!(s.last_index().unwrap(), 11);
        assert_eq!(s.term(6).unwrap(), 1);
        assert_eq!(s.term(11).unwrap(), 2);
        let state = s.initial_state().unwrap();
        assert_eq!(state.hard_state.commit, 10);
        assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
    }

    #[test]
    fn an_installed_snapshot_and_a_reset_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.set_hard_state(HardState {
                term: 3,
                vote: 2,
                commit: 1,
                ..Default::default()
            })
            .unwrap();
            let cs = ConfState::from((vec![1, 2, 3], vec![]));
            log.install_snapshot(&start_marker(40, 2, &cs)).unwrap();
            assert_eq!(log.first_index(), 41);
            log.append(&[entry(41, 3, b"c")]).unwrap();
            log.flush().unwrap();
        }
        let mut log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!(
            (s.first_index().unwrap(), s.last_index().unwrap()),
            (41, 41)
        );
        assert_eq!(s.term(40).unwrap(), 2);
        let hs = s.initial_state().unwrap().hard_state;
        assert_eq!((hs.term, hs.vote, hs.commit), (3, 2, 40));

        // A reset keeps the vote and nothing else.
        log.reset().unwrap();
        drop(log);
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (1, 0));
        let state = s.initial_state().unwrap();
        let hs = state.hard_state;
        assert_eq!((hs.term, hs.vote, hs.commit), (3, 2, 0));
        assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
    }

    /// The commit index moves after every round of replication; syncing it each time
    /// would double the fsyncs of a write. It rides on the next synced record, and at
    /// start the applied index raises it.
    #[test]
    fn a_moved_commit_index_alone_is_not_synced() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            let base = log.syncs();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.flush().unwrap();
            assert_eq!(log.syncs(), base + 1, "entries are synced");
            log.set_commit(2).unwrap();
            log.flush().unwrap();
            assert_eq!(log.syncs(), base + 1, "a commit index alone is not");
            let hs = log.storage().initial_state().unwrap().hard_state;
            log.set_hard_state(HardState { vote: 3, ..hs }).unwrap();
            log.flush().unwrap();
            assert_eq!(log.syncs(), base + 2, "a vote is");
        }
        let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
        // Written without a sync, the commit index still reached the file here; at start
        // the applied index raises a commit index that did not, up to the log's end.
        let commit = |log: &DurableLog| log.storage().initial_state().unwrap().hard_state.commit;
        assert_eq!(commit(&log), 2);
        log.set_commit(0).unwrap();
        log.commit_at_least(1).unwrap();
        assert_eq!(commit(&log), 1);
        log.commit_at_least(9).unwrap();
        assert_eq!(commit(&log), 1, "never beyond the log");
    }

    /// Only the newest entries stay in memory; older ones are read back from the file,
    /// also after a new leader cut the log and after a reopen.
    #[test]
    fn old_entries_leave_memory_and_are_read_back_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mb = |i: u64| vec![(i % 251) as u8; 1 << 20];
        let check = |log: &DurableLog, upto: u64, term_from: u64| {
            let s = log.storage();
            let all = s
                .entries(1, upto + 1, None, GetEntriesContext::empty(false))
                .unwrap();
            assert_eq!(all.len() as u64, upto);
            for e in &all {
                assert_eq!(e.data.as_ref(), mb(e.index).as_slice(), "entry {}", e.index);
                let term = if e.index >= term_from { 2 } else { 1 };
                assert_eq!(e.term, term, "entry {}", e.index);
            }
            let cached = s.rl().cached_bytes();
            assert!(cached <= CACHE_BYTES + (2 << 20), "{cached} bytes cached");
        };
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            let entries: Vec<Entry> = (1..=80).map(|i| entry(i, 1, &mb(i))).collect();
            log.append(&entries).unwrap();
            log.flush().unwrap();
            check(&log, 80, u64::MAX);
            // A size limit stops the read early, with at least one entry.
            let few = log
                .storage()
                .entries(1, 81, 3 << 20, GetEntriesContext::empty(false))
                .unwrap();
            assert_eq!(few.len(), 2);
            // A new leader replaces 60.. (entries no longer cached): the old ones come back.
            let replacing: Vec<Entry> = (60..=70).map(|i| entry(i, 2, &mb(i))).collect();
            let replaced = log.append(&replacing).unwrap();
            assert_eq!(replaced.len(), 21);
            assert_eq!(replaced[0].data.as_ref(), mb(60).as_slice());
            log.flush().unwrap();
            check(&log, 70, 60);
        }
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        check(&log, 70, 60);
        assert_eq!(log.storage().term(59).unwrap(), 1);
        assert_eq!(log.storage().term(60).unwrap(), 2);
    }

    #[test]
    fn cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = DurableLog::open(dir.path(), &[1], true).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.flush().unwrap();
        }
        let path = dir.path().join("raft.log");
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f);
        let mut log = DurableLog::open(dir.path(), &[1], true).unwrap();
        assert_eq!(log.storage().last_index().unwrap(), 1);
        // Appending after the cut works and survives another reopen.
        log.append(&[entry(2, 1, b"b2")]).unwrap();
        log.flush().unwrap();
        let log = DurableLog::open(dir.path(), &[1], true).unwrap();
        assert_eq!(log.storage().last_index().unwrap(), 2);
    }
}
