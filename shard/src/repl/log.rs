//! The Raft log on disk: the replica set's oplog and the member's only write-ahead log.
//!
//! WiredTiger runs without its own journal; its tables become durable at checkpoints, and
//! everything after the last checkpoint is replayed from this log on restart (the applied
//! index is committed in the same WiredTiger transaction as the data it describes).
//!
//! Records are appended to the newest of the log's segment files, and synced once per
//! `Ready` (group commit: every proposal that arrived meanwhile shares the sync). raft-rs
//! reads the log through `LogStore` (`log_store.rs`), which keeps only the newest entries
//! in memory and reads older ones back from the files.
//!
//! Record: kind (1 byte), payload length (u32 LE), CRC-32 of the payload (u32 LE), payload.
//! A torn or corrupt tail (a crash mid-append) is cut off at open. An entry's payload is
//! its protobuf encoding, written without copying the entry's data (`log_pending.rs`).
//!
//! Segments: a file is named after the log offset of its first byte
//! (`raft-<offset, 16 hex digits>.log`), and a new one is started once the newest holds
//! `SEGMENT_BYTES`. Offsets only grow, so an entry's offset names its file. Compaction
//! drops the entries up to an index that WiredTiger has checkpointed (so recovery never
//! needs them): it appends a `START` record naming the last dropped entry's index and
//! term, with the configuration and hard state, syncs it, and deletes the files that hold
//! only dropped entries. It writes nothing else: rewriting the kept tail (256 MB by
//! default) into a new file would hold the Raft thread for 0.5–1.6 s under load, about an
//! election timeout (`examples/log_compaction.rs` measures a compaction). A snapshot
//! install or a reset starts a new file whose first record, `BEGIN`, voids every older
//! one; it is written aside, synced and renamed into place, so it is whole or absent.
//! Files from before segments (`raft.log`) are taken over as the first segment.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, Storage};

use super::log_pending::Pending;
use super::log_replay::Replayed;
use super::log_store::{invalid, LogStore, HEADER};
use super::page_cache::Uncached;

const ENTRY: u8 = 1;
const HARD_STATE: u8 = 2;
const CONF_STATE: u8 = 3;
/// The log starts after this (index, term): everything up to it was compacted away.
const START: u8 = 4;
/// Everything in older records and files is void (first record of a restarted log).
const BEGIN: u8 = 5;

/// A segment holding this many bytes takes no more records: the next go to a new file.
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// The one file of logs written before segments.
const LEGACY_FILE: &str = "raft.log";

/// One file of the log.
struct Segment {
    /// The log offset of the file's first byte.
    base: u64,
    file: Arc<File>,
}

pub struct DurableLog {
    store: LogStore,
    dir: PathBuf,
    /// Oldest first; records are appended to the last.
    segments: Vec<Segment>,
    /// The log offset just past the last whole record written.
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
    /// How much of the newest file has left the page cache (synced records are dropped
    /// from it).
    uncached: Uncached,
    segment_bytes: u64,
    /// Nothing was on disk when this log was opened (a first start, or a wiped disk).
    created: bool,
}

/// Whether `dir` holds a log.
pub fn exists(dir: &Path) -> bool {
    dir.join(LEGACY_FILE).exists() || list_segments(dir).is_ok_and(|s| !s.is_empty())
}

fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("raft-{base:016x}.log"))
}

/// The segment files in `dir`, oldest first.
fn list_segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let base = name
            .strip_prefix("raft-")
            .and_then(|n| n.strip_suffix(".log"))
            .filter(|hex| hex.len() == 16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        if let Some(base) = base {
            found.push((base, path));
        }
    }
    found.sort_unstable_by_key(|(base, _)| *base);
    Ok(found)
}

pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Opens a segment for reading and appending, positioned at its end.
fn open_segment(path: &Path, create: bool) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create)
        .open(path)?;
    file.seek(SeekFrom::End(0))?;
    Ok(file)
}

impl DurableLog {
    /// Opens (or creates) the log in `dir`. A new log starts with `voters` as its
    /// configuration; an existing one keeps what it recorded.
    pub fn open(dir: &Path, voters: &[u64], sync: bool) -> std::io::Result<DurableLog> {
        std::fs::create_dir_all(dir)?;
        let mut listed = list_segments(dir)?;
        let legacy = dir.join(LEGACY_FILE);
        if legacy.exists() {
            if !listed.is_empty() {
                return Err(invalid(format!(
                    "{} holds both {LEGACY_FILE} and segment files",
                    dir.display()
                )));
            }
            std::fs::rename(&legacy, segment_path(dir, 0))?;
            sync_dir(dir)?;
            listed = list_segments(dir)?;
        }
        // A restart's file that was not renamed into place never counted.
        for e in std::fs::read_dir(dir)? {
            let path = e?.path();
            if path.extension().is_some_and(|x| x == "tmp") {
                std::fs::remove_file(&path)?;
            }
        }
        if listed.is_empty() {
            let path = segment_path(dir, 0);
            File::create(&path)?;
            sync_dir(dir)?;
            listed.push((0, path));
        }
        let mut segments: Vec<Segment> = Vec::new();
        let mut replayed = Replayed::default();
        let (mut hs, mut cs, mut start) = (None, None, None);
        let mut voided = 0;
        let mut len = 0;
        for (k, (base, path)) in listed.iter().enumerate() {
            let mut file = OpenOptions::new().read(true).write(true).open(path)?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            let mut pos = 0usize;
            while let Some((kind, payload)) = next_record(&bytes[pos..]) {
                match kind {
                    ENTRY => {
                        let e = Entry::parse_from_bytes(payload).map_err(invalid)?;
                        replayed.push(e, base + pos as u64);
                    }
                    HARD_STATE => hs = Some(HardState::parse_from_bytes(payload).map_err(invalid)?),
                    CONF_STATE => cs = Some(ConfState::parse_from_bytes(payload).map_err(invalid)?),
                    START if payload.len() == 16 => {
                        let index = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
                        let term = u64::from_le_bytes(payload[8..].try_into().expect("8 bytes"));
                        start = Some((index, term));
                    }
                    BEGIN => {
                        replayed.clear();
                        start = None;
                        voided = k;
                    }
                    _ => break,
                }
                pos += HEADER + payload.len();
            }
            let torn = pos < bytes.len();
            if torn {
                tracing::warn!(
                    file = %path.display(),
                    kept = pos,
                    dropped = bytes.len() - pos,
                    "cutting a torn raft log tail"
                );
                file.set_len(pos as u64)?;
            }
            file.seek(SeekFrom::Start(pos as u64))?;
            len = base + pos as u64;
            segments.push(Segment {
                base: *base,
                file: Arc::new(file),
            });
            if torn {
                // Older segments are synced before a newer one is started, so a tear
                // before the newest is damage: as within one file, what follows it goes.
                for (_, later) in &listed[k + 1..] {
                    tracing::warn!(file = %later.display(), "dropping a raft log segment after a torn one");
                    std::fs::remove_file(later)?;
                }
                sync_dir(dir)?;
                break;
            }
        }
        if voided > 0 {
            for s in segments.drain(..voided) {
                std::fs::remove_file(segment_path(dir, s.base))?;
            }
            sync_dir(dir)?;
        }
        let store = LogStore::new();
        let created = hs.is_none();
        let mut log = DurableLog {
            store,
            dir: dir.to_path_buf(),
            segments,
            len,
            pending: Pending::default(),
            must_sync: false,
            sync,
            syncs: 0,
            uncached: Uncached::default(),
            segment_bytes: SEGMENT_BYTES,
            created,
        };
        log.publish_segments();
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
                replayed.start_after(index);
            }
            w.set_conf_state(cs);
            replayed.load_into(&mut w)?;
            if let Some(hs) = hs {
                w.set_hardstate(hs);
            }
        }
        log.flush()?;
        log.store.wl().trim(log.len);
        Ok(log)
    }

    /// Starts new segments at `bytes` instead of [`SEGMENT_BYTES`] (tests).
    pub fn set_segment_bytes(&mut self, bytes: u64) {
        self.segment_bytes = bytes.max(1);
    }

    /// The number of files the log is in.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn tail(&self) -> &Segment {
        self.segments.last().expect("a log has a segment")
    }

    /// Tells `LogStore` which files to read older entries from. Files it no longer
    /// needs are closed on another thread: the last close of a deleted file frees its
    /// blocks, about 10 ms per 64 MiB segment on ext4, which the Raft thread (and raft-rs,
    /// waiting for the store's lock) should not wait for.
    fn publish_segments(&self) {
        let files = self
            .segments
            .iter()
            .map(|s| (s.base, s.file.clone()))
            .collect();
        let old = self.store.wl().set_segments(files);
        if old.len() > self.segments.len() {
            // If no thread can be started, the files close here instead.
            let _ = std::thread::Builder::new()
                .name("raft-log-close".into())
                .spawn(move || drop(old));
        }
    }

    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Whether nothing was on disk when this log was opened.
    pub fn created(&self) -> bool {
        self.created
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
    /// checkpointed past it), on disk and in memory. On disk, a synced `START` record says
    /// so, and the files that hold nothing newer are deleted: nothing is copied.
    pub fn compact(&mut self, to: u64) -> std::io::Result<()> {
        let first = self.first_index();
        let last = self.store.rl().last_index();
        if to < first || to > last {
            return Ok(());
        }
        let term = self.store.term(to).map_err(invalid)?;
        // Where the first kept entry's record starts: files that end before it go.
        let kept_from = self.store.rl().offset(to + 1).unwrap_or(u64::MAX);
        self.store.wl().compact_to(to, term);
        self.record_state()?;
        self.flush()?;
        let gone = self
            .segments
            .windows(2)
            .take_while(|pair| pair[1].base <= kept_from)
            .count();
        self.remove_segments(..gone)
    }

    /// The log after a snapshot was installed in the data: it starts after the snapshot's
    /// index, with nothing in it (raft-rs's order: the snapshot is stored before the
    /// entries of the same `Ready`).
    pub fn install_snapshot(&mut self, snap: &Snapshot) -> std::io::Result<()> {
        self.flush()?;
        let meta = snap.get_metadata();
        {
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
        }
        self.restart()
    }

    /// Empties the log, keeping the configuration and the term and vote (a member must
    /// never vote twice in a term), for a member whose data was emptied: it starts again
    /// from nothing and the primary sends the log or a snapshot. Only before raft-rs runs.
    pub fn reset(&mut self) -> std::io::Result<()> {
        let state = self.store.initial_state().map_err(invalid)?;
        {
            let mut w = self.store.wl();
            w.restart_at(0, 0, state.conf_state);
            w.set_hardstate(HardState {
                commit: 0,
                ..state.hard_state
            });
        }
        self.restart()
    }

    /// Replaces every file with a new one that holds `BEGIN` and the state `store` has
    /// now (configuration, start, hard state), and no entries. The new file is written
    /// aside, synced and renamed into place, so it is whole or absent; the older files
    /// are deleted after, and at open a `BEGIN` voids any that are still there.
    fn restart(&mut self) -> std::io::Result<()> {
        self.pending.clear();
        // Offsets only grow, so the new file's name is new too.
        let base = self.len.max(self.tail().base + 1);
        self.pending.record(BEGIN, &[]);
        self.record_state()?;
        let path = segment_path(&self.dir, base);
        let tmp = path.with_extension("log.tmp");
        let written = self.pending.len() as u64;
        {
            let f = File::create(&tmp)?;
            let result = self.pending.write_to(&f);
            self.pending.clear();
            result?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)?;
        self.must_sync = false;
        self.segments.push(Segment {
            base,
            file: Arc::new(open_segment(&path, false)?),
        });
        self.len = base + written;
        self.uncached = Uncached::default();
        let older = self.segments.len() - 1;
        self.remove_segments(..older)
    }

    /// Deletes the files in `range` (never all of them) and tells `LogStore`.
    fn remove_segments(&mut self, range: impl std::ops::RangeBounds<usize>) -> std::io::Result<()> {
        let gone: Vec<Segment> = self.segments.drain(range).collect();
        if gone.is_empty() {
            return Ok(());
        }
        for s in gone {
            std::fs::remove_file(segment_path(&self.dir, s.base))?;
        }
        sync_dir(&self.dir)?;
        self.publish_segments();
        Ok(())
    }

    /// Queues the configuration, where the log starts (if it was compacted) and the hard
    /// state, to be synced: what open needs once older files are gone or a cut removed
    /// the records that said it.
    fn record_state(&mut self) -> std::io::Result<()> {
        let (cs, start, hs) = {
            let core = self.store.rl();
            (
                core.conf_state().clone(),
                core.start(),
                core.hard_state().clone(),
            )
        };
        self.record(CONF_STATE, &cs.write_to_bytes().map_err(invalid)?);
        if let (index @ 1.., term) = start {
            let mut marker = index.to_le_bytes().to_vec();
            marker.extend_from_slice(&term.to_le_bytes());
            self.record(START, &marker);
        }
        self.record(HARD_STATE, &hs.write_to_bytes().map_err(invalid)?);
        Ok(())
    }

    /// Cuts the log at offset `cut` (a new leader overwrote what follows). Files wholly
    /// after the cut go first, so a crash midway leaves the old suffix (uncommitted
    /// entries the leader sends again), never a gap.
    fn cut_at(&mut self, cut: u64) -> std::io::Result<()> {
        let keep = self
            .segments
            .iter()
            .position(|s| s.base >= cut)
            .unwrap_or(self.segments.len())
            .max(1);
        if keep < self.segments.len() {
            self.remove_segments(keep..)?;
            // The file appended to now was advised away when it stopped being the newest.
            self.uncached = Uncached::default();
        }
        let tail = self.tail();
        let at = cut - tail.base;
        tail.file.set_len(at)?;
        (&*tail.file).seek(SeekFrom::Start(at))?;
        self.len = cut;
        self.uncached.cut(at);
        Ok(())
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
            self.cut_at(cut)?;
            // The cut may have removed later state records (a compaction's among them):
            // write the current ones again.
            self.record_state()?;
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
        if self.len - self.tail().base >= self.segment_bytes {
            self.roll_over()?;
        }
        let len = self.pending.len() as u64;
        let tail = self.segments.last().expect("a log has a segment");
        self.pending.write_to(&*tail.file)?;
        self.len += len;
        if self.sync && self.must_sync {
            tail.file.sync_data()?;
            self.syncs += 1;
            self.uncached.drop_synced(&tail.file, self.len - tail.base);
        }
        self.must_sync = false;
        self.store.wl().trim(self.len);
        Ok(())
    }

    /// Starts a new file for the records that follow. The newest one's records are synced
    /// first: open reads the files in order, and a tear in an older one would cut
    /// everything after it.
    fn roll_over(&mut self) -> std::io::Result<()> {
        let old = self.tail().file.clone();
        if self.sync {
            old.sync_data()?;
            self.syncs += 1;
        }
        self.uncached.drop_synced(&old, self.len - self.tail().base);
        let path = segment_path(&self.dir, self.len);
        let file = open_segment(&path, true)?;
        sync_dir(&self.dir)?;
        self.segments.push(Segment {
            base: self.len,
            file: Arc::new(file),
        });
        self.uncached = Uncached::default();
        self.publish_segments();
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

    /// Bytes of all the log's files.
    fn on_disk(dir: &Path) -> u64 {
        list_segments(dir)
            .unwrap()
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .sum()
    }

    /// A new log in `dir` with files of `segment_bytes`, holding entries 1..=`count` of
    /// term 1, each written and synced on its own.
    fn segmented_log(
        dir: &Path,
        segment_bytes: u64,
        count: u64,
        data: impl Fn(u64) -> Vec<u8>,
    ) -> DurableLog {
        let mut log = DurableLog::open(dir, &[1, 2, 3], true).unwrap();
        log.set_segment_bytes(segment_bytes);
        for i in 1..=count {
            log.append(&[entry(i, 1, &data(i))]).unwrap();
            log.flush().unwrap();
        }
        log
    }

    /// Every entry from `low` to the last, read back through `LogStore` (from the files
    /// for those that left its memory), checked against `data`.
    fn check_entries(log: &DurableLog, low: u64, data: impl Fn(u64) -> Vec<u8>) {
        let s = log.storage();
        let high = s.last_index().unwrap() + 1;
        let all = s
            .entries(low, high, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(all.len() as u64, high - low);
        for e in &all {
            assert_eq!(
                e.data.as_ref(),
                data(e.index).as_slice(),
                "entry {}",
                e.index
            );
        }
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
            log.compact(6).unwrap();
            assert_eq!(log.first_index(), 7);
            assert_eq!(log.storage().term(6).unwrap(), 1);
            // Appending after a compaction works.
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

    /// Compaction deletes the files that hold only dropped entries and copies nothing:
    /// the kept entries stay where they were, in older files too, and are read back from
    /// there, before and after a reopen.
    #[test]
    fn compaction_deletes_whole_segments_and_copies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let data = |i: u64| vec![(i % 251) as u8; 1000];
        {
            let mut log = segmented_log(dir.path(), 4000, 40, data);
            log.set_commit(40).unwrap();
            log.flush().unwrap();
            let files = log.segment_count();
            assert!(files >= 10, "{files} files");
            let before = on_disk(dir.path());
            let names_before = list_segments(dir.path()).unwrap();
            log.compact(25).unwrap();
            assert_eq!(log.first_index(), 26);
            // The files that stay are the newest of the ones before, not rewritten ones.
            let names_after = list_segments(dir.path()).unwrap();
            assert!(names_before.ends_with(&names_after), "{names_after:?}");
            // About a quarter of a segment's worth is kept before entry 26 in its file.
            assert!(
                log.segment_count() <= files - 5,
                "{} files",
                log.segment_count()
            );
            let after = on_disk(dir.path());
            assert!(after < before * 45 / 100, "{after} of {before} bytes");
            check_entries(&log, 26, data);
            assert!(log
                .storage()
                .entries(25, 27, None, GetEntriesContext::empty(false))
                .is_err());
            // Compacting everything leaves the newest file only.
            log.compact(40).unwrap();
            assert_eq!(log.segment_count(), 1);
            log.append(&[entry(41, 2, &data(41))]).unwrap();
            log.flush().unwrap();
        }
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!(
            (s.first_index().unwrap(), s.last_index().unwrap()),
            (41, 41)
        );
        assert_eq!(s.term(40).unwrap(), 1);
        assert_eq!(s.initial_state().unwrap().hard_state.commit, 40);
        check_entries(&log, 41, data);
    }

    /// A new leader's entries replace a suffix that spans files: the later files go, the
    /// log goes on in the one the cut landed in, and a compaction's marker the cut
    /// removed is written again, so a reopen finds the same log.
    #[test]
    fn a_cut_across_segments_and_after_a_compaction_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let old = |i: u64| vec![(i % 251) as u8; 1000];
        let new = |i: u64| if i >= 12 { vec![7u8; 500] } else { old(i) };
        {
            let mut log = segmented_log(dir.path(), 3000, 30, old);
            log.set_commit(11).unwrap();
            log.compact(5).unwrap();
            let files = log.segment_count();
            // Entries 12.. were never committed; a new leader replaces them.
            let replaced = log.append(&[entry(12, 2, &new(12))]).unwrap();
            assert_eq!(replaced.len(), 19);
            log.flush().unwrap();
            assert!(
                log.segment_count() < files - 3,
                "{} files",
                log.segment_count()
            );
            check_entries(&log, 6, new);
        }
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (6, 12));
        assert_eq!(s.term(5).unwrap(), 1);
        assert_eq!(s.term(12).unwrap(), 2);
        check_entries(&log, 6, new);
    }

    /// A log from before segments is taken over as the first one.
    #[test]
    fn a_log_of_one_file_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.flush().unwrap();
        }
        std::fs::rename(segment_path(dir.path(), 0), dir.path().join(LEGACY_FILE)).unwrap();
        assert!(exists(dir.path()));
        let mut log = DurableLog::open(dir.path(), &[9], true).unwrap();
        assert!(!dir.path().join(LEGACY_FILE).exists());
        assert_eq!(log.storage().last_index().unwrap(), 2);
        log.append(&[entry(3, 1, b"c")]).unwrap();
        log.flush().unwrap();
        drop(log);
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        check_entries(&log, 1, |i| [b"a", b"b", b"c"][i as usize - 1].to_vec());
    }

    /// A restarted log (a snapshot installed) voids every older file, also one that a
    /// crash left behind before it could be deleted.
    #[test]
    fn a_restart_voids_older_segments_left_by_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let kept_aside = dir.path().join("aside");
        {
            let mut log = DurableLog::open(dir.path(), &[1, 2, 3], true).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.flush().unwrap();
            std::fs::copy(segment_path(dir.path(), 0), &kept_aside).unwrap();
            let cs = ConfState::from((vec![1, 2, 3], vec![]));
            log.install_snapshot(&start_marker(40, 2, &cs)).unwrap();
            assert_eq!(log.segment_count(), 1);
        }
        // As if the crash came between the rename and the delete.
        std::fs::rename(&kept_aside, segment_path(dir.path(), 0)).unwrap();
        let log = DurableLog::open(dir.path(), &[9], true).unwrap();
        let s = log.storage();
        assert_eq!(
            (s.first_index().unwrap(), s.last_index().unwrap()),
            (41, 40)
        );
        assert_eq!(log.segment_count(), 1);
        assert!(!segment_path(dir.path(), 0).exists());
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
        let path = segment_path(dir.path(), 0);
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
