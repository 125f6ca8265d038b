//! Reading the committed log for a change stream: only entries applied on this member,
//! whose cluster times rise strictly with their index (`docs/replication.md`), so a time
//! names a place in the log on every member.

use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::{Entry, EntryType};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::repl::applier::AppliedIndex;
use crate::repl::driver::entry_time;
use crate::repl::Replica;

/// Entries a stream looks back over for a transaction's earlier entries (its parts, or
/// the Prepare its commit decides).
pub const LOOK_BACK: u64 = 100_000;

pub struct LogReader {
    pub replica: Arc<Replica>,
    applied: AppliedIndex,
    /// The next index to read.
    pub next: u64,
}

/// One applied entry with a time.
pub struct TimedEntry {
    pub index: u64,
    pub time: u64,
    pub entry: Entry,
}

impl LogReader {
    /// A reader positioned at the first entry whose time is `at` or later. Fails with
    /// ChangeStreamHistoryLost when entries that may have had such times are compacted.
    pub fn at_time(replica: Arc<Replica>, at: u64) -> MongoResult<LogReader> {
        let applied = replica.applied.clone().ok_or_else(|| {
            MongoError::new(
                ErrorCode::ChangeStreamUnsupportedTopology,
                "an arbiter holds no data to stream changes from",
            )
        })?;
        let mut reader = LogReader {
            replica,
            applied,
            next: 0,
        };
        reader.next = reader.first_at_or_after(at)?;
        Ok(reader)
    }

    pub fn applied(&self) -> u64 {
        self.applied.get()
    }

    /// Waits up to `limit` for an entry past the applied index `seen`.
    pub fn wait_past(&self, seen: u64, limit: Duration) -> u64 {
        self.applied.wait_past(seen, limit)
    }

    /// The next applied entry that has a time, if there is one now.
    pub fn next_entry(&mut self) -> MongoResult<Option<TimedEntry>> {
        let applied = self.applied();
        while self.next <= applied {
            let index = self.next;
            let entry = self.read(index)?;
            self.next += 1;
            if let Some(time) = entry_time(&entry.context) {
                return Ok(Some(TimedEntry { index, time, entry }));
            }
        }
        Ok(None)
    }

    /// Entry `index`, which must still be in the log.
    pub fn read(&self, index: u64) -> MongoResult<Entry> {
        self.replica
            .log
            .read(index)
            .ok_or_else(|| history_lost(index))
    }

    /// Entries before `index`, newest first, back to `LOOK_BACK` entries or the log's
    /// start, with their data (configuration changes and empty entries left out).
    pub fn before(&self, index: u64) -> impl Iterator<Item = MongoResult<Entry>> + '_ {
        let low = index.saturating_sub(LOOK_BACK).max(1);
        (low..index).rev().map(|i| self.read(i)).filter(|e| {
            e.as_ref().map_or(true, |e| {
                !e.data.is_empty() && e.get_entry_type() == EntryType::EntryNormal
            })
        })
    }

    /// The first index, up to one past the applied index, whose entry's time is `at` or
    /// later.
    fn first_at_or_after(&self, at: u64) -> MongoResult<u64> {
        let applied = self.applied();
        let log = &self.replica.log;
        let first = log.rl().first_index();
        let lost = || history_lost(first);
        let found = log
            .first_at_time(at, (first, applied + 1))
            .ok_or_else(lost)?;
        // Compacted entries are older than the first one left; if that is later than
        // `at`, some of them may have been at or after it.
        if found == first && first > 1 {
            if let Some(t) = log.time_from(first, applied + 1).ok_or_else(lost)? {
                if t > at {
                    return Err(lost());
                }
            }
        }
        Ok(found)
    }
}

pub fn history_lost(index: u64) -> MongoError {
    MongoError::new(
        ErrorCode::ChangeStreamHistoryLost,
        format!(
            "Resume of change stream was not possible, as the resume point may no longer be \
             in the oplog (entry {index} is no longer in this member's log)"
        ),
    )
}
