//! What raft-rs reads the log through (`raft::Storage`): the hard state, the
//! configuration, every entry's term, and the entries themselves, of which only the
//! newest `CACHE_BYTES` stay in memory; older ones are read back from the log's segment
//! files at the offsets `DurableLog` recorded.
//!
//! Why not raft-rs's `MemStorage`: it keeps every entry until the log is compacted (after
//! a checkpoint, keeping 256 MB), so a member's memory grew with every write for up to
//! 30 s plus that tail, and each new entry's buffer was fresh memory the kernel had to
//! zero (a fifth of all CPU in the replication benchmark's profile). Entries past the
//! cache are wanted only by a follower that fell behind, and those come from the page
//! cache. Entries not yet written to the file are never dropped from the cache.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{Error, GetEntriesContext, RaftState, Storage, StorageError};

/// Bytes of entry payloads kept in memory, newest first.
pub const CACHE_BYTES: usize = 32 << 20;
/// A record's header in the log's files: kind, payload length, CRC-32.
pub const HEADER: usize = 9;

/// Shared between raft-rs (reads) and `DurableLog` (writes), as `MemStorage` is.
#[derive(Clone)]
pub struct LogStore {
    core: Arc<RwLock<Core>>,
}

pub struct Core {
    hard_state: HardState,
    conf_state: ConfState,
    /// The last entry compacted away (or covered by a snapshot): `(index, term)`.
    start: (u64, u64),
    /// Term and record offset in the log (see `segments`) of every entry after `start`.
    index: VecDeque<(u64, u64)>,
    /// The newest entries, a suffix of the log.
    cache: VecDeque<Entry>,
    cache_bytes: usize,
    /// The log's files, oldest first, each with the log offset of its first byte: older
    /// entries are read from them. Replaced whenever a file is added or removed.
    segments: Vec<(u64, Arc<File>)>,
}

impl LogStore {
    pub fn new() -> LogStore {
        LogStore {
            core: Arc::new(RwLock::new(Core {
                hard_state: HardState::default(),
                conf_state: ConfState::default(),
                start: (0, 0),
                index: VecDeque::new(),
                cache: VecDeque::new(),
                cache_bytes: 0,
                segments: Vec::new(),
            })),
        }
    }

    pub fn rl(&self) -> RwLockReadGuard<'_, Core> {
        self.core.read().unwrap()
    }

    pub fn wl(&self) -> RwLockWriteGuard<'_, Core> {
        self.core.write().unwrap()
    }
}

impl LogStore {
    /// Entry `index` for a reader beside Raft (a change stream); `None` once compacted
    /// away or not yet in the log.
    pub fn read(&self, index: u64) -> Option<Entry> {
        self.rl().entry(index).ok()
    }

    /// The first index in `[first, end)` whose entry's cluster time is `at` or later
    /// (`end` if none): times rise with the index, and an entry without one (an
    /// election's) counts with the next that has one. `None` if an entry went missing
    /// (compacted meanwhile).
    pub fn first_at_time(&self, at: u64, (first, end): (u64, u64)) -> Option<u64> {
        let (mut lo, mut hi) = (first, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.time_from(mid, hi)? {
                Some(t) if t >= at => hi = mid,
                _ => lo = mid + 1,
            }
        }
        Some(lo)
    }

    /// The time of the first entry in `[index, end)` that has one.
    pub fn time_from(&self, index: u64, end: u64) -> Option<Option<u64>> {
        for i in index..end {
            if let Some(t) = super::driver::entry_time(&self.read(i)?.context) {
                return Some(Some(t));
            }
        }
        Some(None)
    }
}

impl Default for LogStore {
    fn default() -> Self {
        LogStore::new()
    }
}

impl Core {
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn set_hardstate(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The last entry compacted away (or covered by a snapshot): `(index, term)`.
    pub fn start(&self) -> (u64, u64) {
        self.start
    }

    pub fn set_conf_state(&mut self, cs: ConfState) {
        self.conf_state = cs;
    }

    pub fn first_index(&self) -> u64 {
        self.start.0 + 1
    }

    /// Bytes of entries held in memory.
    pub fn cached_bytes(&self) -> usize {
        self.cache_bytes
    }

    pub fn last_index(&self) -> u64 {
        self.start.0 + self.index.len() as u64
    }

    /// The record offset of each entry, newest first.
    pub fn offsets_newest_first(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let first = self.first_index();
        (0..self.index.len())
            .rev()
            .map(move |i| (first + i as u64, self.index[i].1))
    }

    /// The record offset of entry `index`, if the log holds it.
    pub fn offset(&self, index: u64) -> Option<u64> {
        let i = index.checked_sub(self.first_index())?;
        self.index.get(i as usize).map(|&(_, offset)| offset)
    }

    /// The log restarts after `(index, term)` with nothing in it, as raft-rs's storage
    /// does on a snapshot: the commit index moves there, the term up to it if behind.
    pub fn restart_at(&mut self, index: u64, term: u64, cs: ConfState) {
        self.start = (index, term);
        self.hard_state.term = self.hard_state.term.max(term);
        self.hard_state.commit = index;
        self.conf_state = cs;
        self.index.clear();
        self.cache.clear();
        self.cache_bytes = 0;
    }

    /// Appends `entries`, whose records start at `offsets`, replacing the suffix they
    /// overlap. They must follow on from what the log holds.
    pub fn append(&mut self, entries: &[Entry], offsets: &[u64]) -> std::io::Result<()> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        if head.index < self.first_index() || head.index > self.last_index() + 1 {
            return Err(invalid(format!(
                "append at {} to a log of {}..={}",
                head.index,
                self.first_index(),
                self.last_index()
            )));
        }
        self.index
            .truncate((head.index - self.first_index()) as usize);
        while self.cache.back().is_some_and(|e| e.index >= head.index) {
            let e = self.cache.pop_back().expect("checked");
            self.cache_bytes -= entry_size(&e);
        }
        for (e, &offset) in entries.iter().zip(offsets) {
            self.index.push_back((e.term, offset));
            self.cache_bytes += entry_size(e);
            self.cache.push_back(e.clone());
        }
        Ok(())
    }

    /// Entries known by `(index, term, record offset)` only, their data left in the files:
    /// at open, before the newest entries are appended with their data.
    pub fn append_uncached(&mut self, entries: &[(u64, u64, u64)]) -> std::io::Result<()> {
        for &(index, term, offset) in entries {
            if !self.cache.is_empty() || index != self.last_index() + 1 {
                return Err(invalid(format!(
                    "entry {index} read back after a log of {}..={}",
                    self.first_index(),
                    self.last_index()
                )));
            }
            self.index.push_back((term, offset));
        }
        Ok(())
    }

    /// The files older entries are read from; returns those it read from before.
    pub fn set_segments(&mut self, segments: Vec<(u64, Arc<File>)>) -> Vec<(u64, Arc<File>)> {
        std::mem::replace(&mut self.segments, segments)
    }

    /// Forgets the entries up to `to` (whose term is `term`): the log now starts after it.
    /// The hard state and configuration stay as they are.
    pub fn compact_to(&mut self, to: u64, term: u64) {
        let dropped = (to.saturating_sub(self.start.0) as usize).min(self.index.len());
        self.index.drain(..dropped);
        self.start = (to, term);
        while self.cache.front().is_some_and(|e| e.index <= to) {
            let e = self.cache.pop_front().expect("checked");
            self.cache_bytes -= entry_size(&e);
        }
    }

    /// Drops the oldest cached entries beyond `CACHE_BYTES`, of those whose records end
    /// within the file's first `written` bytes (the others exist nowhere else yet).
    pub fn trim(&mut self, written: u64) {
        while self.cache_bytes > CACHE_BYTES && self.cache.len() > 1 {
            let front = self.cache.front().expect("checked");
            let written_out = self
                .offset(front.index)
                .is_some_and(|o| o + (HEADER as u64) + (front.compute_size() as u64) <= written);
            if !written_out {
                return;
            }
            let e = self.cache.pop_front().expect("checked");
            self.cache_bytes -= entry_size(&e);
        }
    }

    fn entry(&self, index: u64) -> raft::Result<Entry> {
        if let Some(front) = self.cache.front() {
            if index >= front.index {
                return Ok(self.cache[(index - front.index) as usize].clone());
            }
        }
        let offset = self
            .offset(index)
            .ok_or(Error::Store(StorageError::Unavailable))?;
        let segment = self.segments.partition_point(|(base, _)| *base <= offset);
        let (base, file) = segment
            .checked_sub(1)
            .map(|k| &self.segments[k])
            .ok_or(Error::Store(StorageError::Unavailable))?;
        read_entry(file, offset - base, index).map_err(Error::Io)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let core = self.rl();
        Ok(RaftState::new(
            core.hard_state.clone(),
            core.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let core = self.rl();
        if low < core.first_index() {
            return Err(Error::Store(StorageError::Compacted));
        }
        if high > core.last_index() + 1 {
            return Err(Error::Store(StorageError::Unavailable));
        }
        // raft-rs's rule (`util::limit_size`): at least one entry, then while the total
        // stays within `max_size`. Read no further than that from the file.
        let mut out = Vec::new();
        let mut total = 0u64;
        for index in low..high {
            let e = core.entry(index)?;
            total += u64::from(e.compute_size());
            if !out.is_empty() && total > max_size {
                break;
            }
            out.push(e);
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let core = self.rl();
        if idx == core.start.0 {
            return Ok(core.start.1);
        }
        if idx < core.first_index() {
            return Err(Error::Store(StorageError::Compacted));
        }
        if idx > core.last_index() {
            return Err(Error::Store(StorageError::Unavailable));
        }
        Ok(core.index[(idx - core.first_index()) as usize].0)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.rl().first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.rl().last_index())
    }

    /// As raft-rs's `MemStorage`: a data-less snapshot at the commit index. The data of a
    /// snapshot a follower needs travels apart (`snapshot.rs`).
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let (commit, cs) = {
            let core = self.rl();
            (core.hard_state.commit, core.conf_state.clone())
        };
        let term = self.term(commit)?;
        let mut snap = Snapshot::default();
        let meta = snap.mut_metadata();
        meta.index = commit.max(request_index);
        meta.term = term;
        meta.set_conf_state(cs);
        Ok(snap)
    }
}

/// What an entry weighs in the cache.
pub fn entry_size(e: &Entry) -> usize {
    e.data.len() + e.context.len() + 32
}

/// Entry `index`, whose record starts at `offset`, checked against its CRC and its index
/// (an intact record of another entry at a stale offset must not pass for it).
fn read_entry(file: &File, offset: u64, index: u64) -> std::io::Result<Entry> {
    let mut header = [0u8; HEADER];
    file.read_exact_at(&mut header, offset)?;
    let len = u32::from_le_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[5..9].try_into().expect("4 bytes"));
    let mut payload = vec![0u8; len];
    file.read_exact_at(&mut payload, offset + HEADER as u64)?;
    if crc32fast::hash(&payload) != crc {
        return Err(invalid(format!(
            "raft log record at {offset}: bad checksum"
        )));
    }
    let e = Entry::parse_from_bytes(&payload).map_err(invalid)?;
    if e.index != index {
        return Err(invalid(format!(
            "raft log record at {offset} holds entry {}, not {index}",
            e.index
        )));
    }
    Ok(e)
}

pub(super) fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}
