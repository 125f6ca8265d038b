//! What opening the log rebuilds from its records: every entry's index, term and record
//! offset, but the data of the newest entries only, as much as `LogStore` keeps in
//! memory (`CACHE_BYTES`). Parsing every entry into memory first and trimming after would
//! make a member restarting after a sustained write load hold its whole log (the 256 MiB
//! retention and up to 30 s of writes) in memory at once.

use std::collections::VecDeque;

use raft::eraftpb::Entry;

use super::log_store::{entry_size, Core, CACHE_BYTES};

#[derive(Default)]
pub struct Replayed {
    /// `(index, term, record offset)` of every entry, oldest first.
    all: Vec<(u64, u64, u64)>,
    /// The newest entries with their data: a suffix of `all`.
    recent: VecDeque<Entry>,
    recent_bytes: usize,
}

impl Replayed {
    /// An entry whose record is at `offset`. A later record for an index replaces that
    /// index and everything after it (a new leader overwrote them).
    pub fn push(&mut self, e: Entry, offset: u64) {
        while self
            .all
            .last()
            .is_some_and(|&(index, _, _)| index >= e.index)
        {
            self.all.pop();
        }
        while self.recent.back().is_some_and(|r| r.index >= e.index) {
            self.pop_recent(false);
        }
        self.all.push((e.index, e.term, offset));
        self.recent_bytes += entry_size(&e);
        self.recent.push_back(e);
        while self.recent_bytes > CACHE_BYTES && self.recent.len() > 1 {
            self.pop_recent(true);
        }
    }

    fn pop_recent(&mut self, oldest: bool) {
        let e = if oldest {
            self.recent.pop_front()
        } else {
            self.recent.pop_back()
        };
        if let Some(e) = e {
            self.recent_bytes -= entry_size(&e);
        }
    }

    /// Everything so far is void (a restarted log).
    pub fn clear(&mut self) {
        *self = Replayed::default();
    }

    /// Drops the entries up to `index`: the log starts after it.
    pub fn start_after(&mut self, index: u64) {
        let dropped = self.all.partition_point(|&(i, _, _)| i <= index);
        self.all.drain(..dropped);
        while self.recent.front().is_some_and(|e| e.index <= index) {
            self.pop_recent(true);
        }
    }

    /// The number of entries whose data is held.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.recent.len()
    }

    /// Hands the entries to `core`: those without data first, then the newest with it.
    pub fn load_into(self, core: &mut Core) -> std::io::Result<()> {
        let uncached = self.all.len() - self.recent.len();
        core.append_uncached(&self.all[..uncached])?;
        let offsets: Vec<u64> = self.all[uncached..].iter().map(|&(_, _, o)| o).collect();
        let recent: Vec<Entry> = self.recent.into();
        core.append(&recent, &offsets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, bytes: usize) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8; bytes].into(),
            ..Default::default()
        }
    }

    /// Only the newest `CACHE_BYTES` keep their data while the log is read; a later
    /// record replaces a suffix, and a start marker drops a prefix, with or without data.
    #[test]
    fn holds_the_data_of_the_newest_entries_only() {
        let mb = 1 << 20;
        let mut r = Replayed::default();
        for i in 1..=100 {
            r.push(entry(i, 1, mb), i * 2 * mb as u64);
        }
        assert_eq!(r.all.len(), 100);
        assert!(r.held() <= CACHE_BYTES / mb, "{} held", r.held());
        assert_eq!(r.recent.back().map(|e| e.index), Some(100));
        // A new leader's entry 90 replaces 90..=100.
        r.push(entry(90, 2, 10), 1);
        assert_eq!(r.all.last(), Some(&(90, 2, 1)));
        assert_eq!(r.recent.back().map(|e| (e.index, e.term)), Some((90, 2)));
        assert_eq!(r.all.len(), 90);
        r.start_after(40);
        assert_eq!(r.all.first().map(|&(i, _, _)| i), Some(41));
        r.start_after(85);
        assert_eq!(r.all.first().map(|&(i, _, _)| i), Some(86));
        assert_eq!(r.recent.front().map(|e| e.index), Some(86));
        r.clear();
        assert!(r.all.is_empty() && r.recent.is_empty() && r.recent_bytes == 0);
    }
}
