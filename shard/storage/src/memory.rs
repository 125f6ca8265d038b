//! The in-memory engine: one `BTreeMap` per table behind a single `RwLock`, with every
//! key's timestamped versions.
//!
//! It is the reference behaviour for the conformance suite and the engine of unit tests,
//! not a performance path, so one lock for everything is fine.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use parking_lot::RwLock;

use crate::{
    check_prepare, check_prepared_commit, Engine, ExportSink, KeyRange, PreparedId, Result, Rows,
    StorageError, TableStats, Timestamp, WriteBatch, WriteOp, WriteOpRef,
};

/// A key's versions, oldest first: the commit timestamp and the value (`None`: deleted).
/// A write without a timestamp replaces the whole history with one version at time 0.
type Versions = Vec<(Timestamp, Option<Vec<u8>>)>;
type Table = BTreeMap<Vec<u8>, Versions>;
/// A prepared transaction's writes: (table, key, value; `None` deletes).
type PreparedWrites = Vec<(String, Vec<u8>, Option<Vec<u8>>)>;
/// (table, key, versions before the op) for restoring a failed batch.
type Undo<'a> = (&'a str, &'a [u8], Option<Versions>);

#[derive(Default)]
struct State {
    tables: HashMap<String, Table>,
    stable: Timestamp,
    oldest: Timestamp,
    /// Open prepared transactions: their prepare time and writes (`None`: a delete).
    prepared: HashMap<PreparedId, (Timestamp, PreparedWrites)>,
}

#[derive(Default)]
pub struct MemoryEngine {
    state: RwLock<State>,
}

impl MemoryEngine {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self, table: &str, key: &[u8], at: Option<Timestamp>) -> Result<Option<Vec<u8>>> {
        crate::prepare_wait::waiting(|| self.read_once(table, key, at))
    }

    fn read_once(&self, table: &str, key: &[u8], at: Option<Timestamp>) -> Result<Option<Vec<u8>>> {
        let state = self.state.read();
        state.check_read(at)?;
        let t = table_ref(&state.tables, table)?;
        state.check_prepared(table, at, |k| k == key)?;
        Ok(t.get(key).and_then(|v| visible(v, at)).cloned())
    }

    fn range(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Option<Timestamp>,
    ) -> Result<Rows> {
        crate::prepare_wait::waiting(|| self.range_once(table, range, reverse, limit, at))
    }

    fn range_once(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Option<Timestamp>,
    ) -> Result<Rows> {
        let state = self.state.read();
        state.check_read(at)?;
        let t = table_ref(&state.tables, table)?;
        if range_is_empty(range) {
            return Ok(Vec::new());
        }
        let bounds = (as_slice_bound(&range.start), as_slice_bound(&range.end));
        let iter = t.range::<[u8], _>(bounds);
        let row = |(k, v): (&Vec<u8>, &Versions)| visible(v, at).map(|v| (k.clone(), v.clone()));
        let rows: Rows = if reverse {
            iter.rev().filter_map(row).take(limit).collect()
        } else {
            iter.filter_map(row).take(limit).collect()
        };
        // A prepared key the scan reached (the whole range, unless the limit stopped it
        // at its last row) is a conflict, as WiredTiger's cursor meets it.
        let last = (rows.len() == limit).then(|| rows.last().map(|(k, _)| k.clone()));
        state.check_prepared(table, at, |k| {
            range.contains(k)
                && match &last {
                    Some(Some(edge)) if reverse => k >= edge.as_slice(),
                    Some(Some(edge)) => k <= edge.as_slice(),
                    _ => true,
                }
        })?;
        Ok(rows)
    }

    fn write_at<'a>(
        &self,
        ops: impl Iterator<Item = WriteOpRef<'a>>,
        commit: Option<Timestamp>,
    ) -> Result<()> {
        let mut state = self.state.write();
        if let Some(c) = commit {
            state.check_commit(c)?;
        }
        let oldest = state.oldest;
        // Apply in place and keep an undo log, so a failing op restores every earlier one.
        let mut undo: Vec<Undo<'a>> = Vec::new();
        let mut outcome = Ok(());
        for op in ops {
            let Some(t) = state.tables.get_mut(op.table()) else {
                outcome = Err(StorageError::NoSuchTable(op.table().to_owned()));
                break;
            };
            let (key, value) = match op {
                WriteOpRef::Put { key, value, .. } => (key, Some(value)),
                WriteOpRef::Insert { table, key, value } => {
                    if t.get(key).and_then(|v| visible(v, None)).is_some() {
                        outcome = Err(StorageError::KeyExists {
                            table: table.to_owned(),
                        });
                        break;
                    }
                    (key, Some(value))
                }
                WriteOpRef::Delete { key, .. } => (key, None),
            };
            undo.push((op.table(), key, t.get(key).cloned()));
            record(t, key, value, commit, oldest);
        }
        if outcome.is_err() {
            for (table, key, previous) in undo.into_iter().rev() {
                let t = state
                    .tables
                    .get_mut(table)
                    .expect("table existed when the op ran");
                match previous {
                    Some(v) => t.insert(key.to_vec(), v),
                    None => t.remove(key),
                };
            }
        }
        outcome
    }
}

impl State {
    fn check_read(&self, at: Option<Timestamp>) -> Result<()> {
        match at {
            Some(read) if read < self.oldest => Err(StorageError::SnapshotTooOld {
                read,
                oldest: self.oldest,
            }),
            _ => Ok(()),
        }
    }

    /// A read at `at` (or without a time) that meets a key `reached` by an open prepared
    /// transaction of `table` prepared at or before `at`.
    fn check_prepared(
        &self,
        table: &str,
        at: Option<Timestamp>,
        reached: impl Fn(&[u8]) -> bool,
    ) -> Result<()> {
        let meets = self.prepared.values().any(|(p, writes)| {
            at.is_none_or(|at| at >= *p) && writes.iter().any(|(t, k, _)| t == table && reached(k))
        });
        if meets {
            return Err(StorageError::PrepareConflict {
                table: table.to_owned(),
            });
        }
        Ok(())
    }

    /// WiredTiger's rule: a commit is not older than the oldest or stable timestamp.
    fn check_commit(&self, commit: Timestamp) -> Result<()> {
        if commit < self.stable || commit < self.oldest {
            return Err(StorageError::Other(format!(
                "commit timestamp {commit:#x} is less than the stable timestamp {:#x}",
                self.stable
            )));
        }
        Ok(())
    }
}

/// Forgets the versions of one key that no read at or after `oldest` can see. Done as a
/// key is written rather than over every table when oldest moves, which the applier does
/// after every batch.
fn trim(versions: &mut Versions, oldest: Timestamp) {
    if let Some(i) = versions.iter().rposition(|(ts, _)| *ts <= oldest) {
        versions.drain(..i);
    }
}

/// The value a read at `at` sees (`None`: the newest).
fn visible(versions: &Versions, at: Option<Timestamp>) -> Option<&Vec<u8>> {
    let version = match at {
        None => versions.last(),
        Some(at) => versions.iter().rev().find(|(ts, _)| *ts <= at),
    };
    version.and_then(|(_, v)| v.as_ref())
}

/// Adds a version of `key` (`None`: a delete).
fn record(
    t: &mut Table,
    key: &[u8],
    value: Option<&[u8]>,
    commit: Option<Timestamp>,
    oldest: Timestamp,
) {
    match commit {
        Some(ts) => {
            let versions = t.entry(key.to_vec()).or_default();
            trim(versions, oldest);
            versions.push((ts, value.map(<[u8]>::to_vec)));
        }
        None => match value {
            Some(v) => {
                t.insert(key.to_vec(), vec![(0, Some(v.to_vec()))]);
            }
            None => {
                t.remove(key);
            }
        },
    }
}

impl Engine for MemoryEngine {
    fn create_table(&self, name: &str) -> Result<()> {
        self.state
            .write()
            .tables
            .entry(name.to_owned())
            .or_default();
        Ok(())
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        self.state.write().tables.remove(name);
        Ok(())
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.state.read().tables.keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read(table, key, None)
    }

    fn scan(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.range(table, range, reverse, limit, None)
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_at(batch.ops.iter().map(WriteOp::as_ref), None)
    }

    fn write_refs(&self, ops: &[WriteOpRef<'_>]) -> Result<()> {
        self.write_at(ops.iter().copied(), None)
    }

    fn get_at(&self, table: &str, key: &[u8], at: Timestamp) -> Result<Option<Vec<u8>>> {
        self.read(table, key, Some(at))
    }

    fn scan_at(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Timestamp,
    ) -> Result<Rows> {
        self.range(table, range, reverse, limit, Some(at))
    }

    fn write_refs_at(&self, ops: &[WriteOpRef<'_>], commit: Timestamp) -> Result<()> {
        self.write_at(ops.iter().copied(), Some(commit))
    }

    fn set_timestamps(&self, stable: Timestamp, oldest: Timestamp) -> Result<()> {
        let mut state = self.state.write();
        state.stable = state.stable.max(stable);
        state.oldest = oldest.min(state.stable).max(state.oldest);
        Ok(())
    }

    fn prepare(&self, id: PreparedId, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<()> {
        check_prepare(at, self.state.read().stable)?;
        self.prepare_recovered(id, ops, at)
    }

    fn prepare_recovered(
        &self,
        id: PreparedId,
        ops: &[WriteOpRef<'_>],
        at: Timestamp,
    ) -> Result<()> {
        let mut state = self.state.write();
        let mut writes = Vec::new();
        for op in ops {
            table_ref(&state.tables, op.table())?;
            let value = match op {
                WriteOpRef::Put { value, .. } | WriteOpRef::Insert { value, .. } => {
                    Some(value.to_vec())
                }
                WriteOpRef::Delete { .. } => None,
            };
            writes.push((op.table().to_owned(), op.key().to_vec(), value));
        }
        if state.prepared.contains_key(&id) {
            return Err(StorageError::Other(format!(
                "prepared transaction {id} is already open"
            )));
        }
        state.prepared.insert(id, (at, writes));
        Ok(())
    }

    /// The versions go in at `commit`, which may be before stable: only this transaction
    /// could write its keys since it was prepared.
    fn commit_prepared(&self, id: PreparedId, commit: Timestamp, durable: Timestamp) -> Result<()> {
        let mut state = self.state.write();
        let Some((at, _)) = state.prepared.get(&id) else {
            return Err(StorageError::Other(format!(
                "no prepared transaction {id} is open"
            )));
        };
        check_prepared_commit(*at, commit, durable, (state.stable, state.oldest))?;
        let (_, writes) = state.prepared.remove(&id).expect("looked up above");
        let oldest = state.oldest;
        for (table, key, value) in writes {
            if let Some(t) = state.tables.get_mut(&table) {
                record(t, &key, value.as_deref(), Some(commit), oldest);
            }
        }
        drop(state);
        crate::prepare_wait::resolved();
        Ok(())
    }

    fn abort_prepared(&self, id: PreparedId) -> Result<()> {
        let removed = self.state.write().prepared.remove(&id);
        crate::prepare_wait::resolved();
        match removed {
            Some(_) => Ok(()),
            None => Err(StorageError::Other(format!(
                "no prepared transaction {id} is open"
            ))),
        }
    }

    /// Exact: a key's newest version tells when it was last written. A key a prepared
    /// transaction writes conflicts, as WiredTiger refuses to update it.
    fn write_conflict(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool> {
        let state = self.state.read();
        for op in ops {
            let t = table_ref(&state.tables, op.table())?;
            let prepared = state.prepared.values().any(|(_, writes)| {
                writes
                    .iter()
                    .any(|(table, key, _)| table == op.table() && key == op.key())
            });
            if prepared {
                return Ok(true);
            }
            if t.get(op.key())
                .and_then(|v| v.last())
                .is_some_and(|(ts, _)| *ts > at)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn stats(&self, table: &str) -> Result<TableStats> {
        let state = self.state.read();
        let t = table_ref(&state.tables, table)?;
        let mut stats = TableStats::default();
        for (k, versions) in t {
            if let Some(v) = visible(versions, None) {
                stats.entries += 1;
                stats.bytes += (k.len() + v.len()) as u64;
            }
        }
        Ok(stats)
    }

    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }

    /// Copies the newest values under the read lock (one instant), then hands them out in
    /// pages.
    fn export(&self, page_bytes: usize, sink: &mut ExportSink<'_>) -> Result<()> {
        let mut copy: Vec<(String, Rows)> = self
            .state
            .read()
            .tables
            .iter()
            .map(|(name, t)| {
                let rows = t
                    .iter()
                    .filter_map(|(k, v)| visible(v, None).map(|v| (k.clone(), v.clone())))
                    .collect();
                (name.clone(), rows)
            })
            .collect();
        copy.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, rows) in copy {
            let (mut page, mut bytes, mut sent) = (Vec::new(), 0, false);
            for (k, v) in rows {
                bytes += k.len() + v.len();
                page.push((k, v));
                if bytes >= page_bytes {
                    sink(&name, std::mem::take(&mut page))?;
                    (bytes, sent) = (0, true);
                }
            }
            if !page.is_empty() || !sent {
                sink(&name, page)?;
            }
        }
        Ok(())
    }
}

fn table_ref<'a>(tables: &'a HashMap<String, Table>, name: &str) -> Result<&'a Table> {
    tables
        .get(name)
        .ok_or_else(|| StorageError::NoSuchTable(name.to_owned()))
}

fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// `BTreeMap::range` panics on inverted ranges (and on equal excluded bounds), while the
/// trait promises an empty result, so catch those first.
fn range_is_empty(range: &KeyRange) -> bool {
    match (&range.start, &range.end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e))
        | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
        _ => false,
    }
}
