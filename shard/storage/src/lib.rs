//! Bulwark's storage layer: ordered byte tables behind the [`Engine`] trait.
//!
//! Two implementations share one contract, checked by [`conformance`]:
//! * [`WiredTigerEngine`] — the production engine, embedded WiredTiger through `wiredtiger-sys`.
//! * [`MemoryEngine`] — `BTreeMap`s behind a lock, for tests and as the reference behaviour.
//!
//! [`rawbench`] measures the WiredTiger baseline directly and through the trait, so the
//! overhead of this layer stays visible.

use std::ops::Bound;

mod as_of;
pub mod conformance;
mod memory;
pub mod prepare_wait;
pub mod rawbench;
mod wt;
pub mod xorshift;

pub use as_of::AsOf;
pub use memory::MemoryEngine;
pub use wt::{CloseWatch, WiredTigerEngine, WtOptions, DEFAULT_CHECKPOINT_INTERVAL};

pub type Result<T> = std::result::Result<T, StorageError>;

/// The crate's one error type.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A `WriteOp::Insert` found its key already present; the whole batch was rolled back.
    #[error("duplicate key in table {table}")]
    KeyExists { table: String },
    #[error("no such table: {0}")]
    NoSuchTable(String),
    /// Any other WiredTiger failure, with WiredTiger's own code and message.
    #[error("wiredtiger error {code}: {message}")]
    WiredTiger { code: i32, message: String },
    /// A read at a time older than the oldest timestamp: that history is gone.
    #[error("read at timestamp {read:#x} is older than the oldest kept history ({oldest:#x})")]
    SnapshotTooOld { read: Timestamp, oldest: Timestamp },
    /// The directory was written in another on-disk format (see `wt::format`).
    #[error(
        "the data in {dir} is in storage format \"{found}\", and this build reads \"{expected}\": \
         start the build that wrote it, or move the directory aside so the member resyncs"
    )]
    Format {
        dir: String,
        found: String,
        expected: String,
    },
    /// A read met a key a prepared transaction wrote, at a time that transaction may
    /// still commit at: the read must wait for the transaction to be resolved.
    #[error("the read met a prepared transaction's write in {table}")]
    PrepareConflict { table: String },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
    /// A layer above the engine (replication) could not get the change applied; the
    /// layer's own error, which the layer's user turns into what its clients see.
    #[error("{0}")]
    Layer(Box<dyn std::error::Error + Send + Sync>),
}

/// Names a prepared transaction (`Engine::prepare`).
pub type PreparedId = u64;

/// A point in time for reads and commits: the cluster time of the replicated entry that
/// wrote a version (`secs << 32 | increment`, the layout of BSON's Timestamp). A version
/// written without a timestamp is visible at every time, and truncates the key's history.
pub type Timestamp = u64;

/// A range of keys. Bounds compare bytewise (the order of `[u8]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Bound<Vec<u8>>,
    pub end: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        KeyRange {
            start: Bound::Included(prefix.to_vec()),
            end: match prefix_successor(prefix) {
                Some(s) => Bound::Excluded(s),
                None => Bound::Unbounded,
            },
        }
    }

    /// `true` if `key` lies within the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        !self.before_start(key) && !self.after_end(key)
    }

    /// `true` if `key` sorts before the start bound.
    pub(crate) fn before_start(&self, key: &[u8]) -> bool {
        match &self.start {
            Bound::Unbounded => false,
            Bound::Included(s) => key < s.as_slice(),
            Bound::Excluded(s) => key <= s.as_slice(),
        }
    }

    /// `true` if `key` sorts after the end bound.
    pub(crate) fn after_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Unbounded => false,
            Bound::Included(e) => key > e.as_slice(),
            Bound::Excluded(e) => key >= e.as_slice(),
        }
    }
}

/// The smallest key greater than every key with this prefix, or `None` if there is none
/// (empty prefix or all `0xff`).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// One change inside a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Insert or overwrite.
    Put {
        table: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Insert; fails the whole batch with [`StorageError::KeyExists`] if the key is present
    /// (including when an earlier op of the same batch wrote it).
    Insert {
        table: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Remove; removing an absent key is not an error.
    Delete { table: String, key: Vec<u8> },
}

impl WriteOp {
    pub fn table(&self) -> &str {
        self.as_ref().table()
    }

    /// The op as borrowed slices.
    pub fn as_ref(&self) -> WriteOpRef<'_> {
        match self {
            WriteOp::Put { table, key, value } => WriteOpRef::Put { table, key, value },
            WriteOp::Insert { table, key, value } => WriteOpRef::Insert { table, key, value },
            WriteOp::Delete { table, key } => WriteOpRef::Delete { table, key },
        }
    }
}

/// A [`WriteOp`] that borrows its table, key and value, for [`Engine::write_refs`]: a
/// replicated entry is applied straight from the bytes of the log entry, not copied into
/// owned ops first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOpRef<'a> {
    Put {
        table: &'a str,
        key: &'a [u8],
        value: &'a [u8],
    },
    Insert {
        table: &'a str,
        key: &'a [u8],
        value: &'a [u8],
    },
    Delete {
        table: &'a str,
        key: &'a [u8],
    },
}

impl<'a> WriteOpRef<'a> {
    pub fn table(&self) -> &'a str {
        match *self {
            WriteOpRef::Put { table, .. }
            | WriteOpRef::Insert { table, .. }
            | WriteOpRef::Delete { table, .. } => table,
        }
    }

    pub fn key(&self) -> &'a [u8] {
        match *self {
            WriteOpRef::Put { key, .. }
            | WriteOpRef::Insert { key, .. }
            | WriteOpRef::Delete { key, .. } => key,
        }
    }

    pub fn to_owned(&self) -> WriteOp {
        match *self {
            WriteOpRef::Put { table, key, value } => WriteOp::Put {
                table: table.to_owned(),
                key: key.to_vec(),
                value: value.to_vec(),
            },
            WriteOpRef::Insert { table, key, value } => WriteOp::Insert {
                table: table.to_owned(),
                key: key.to_vec(),
                value: value.to_vec(),
            },
            WriteOpRef::Delete { table, key } => WriteOp::Delete {
                table: table.to_owned(),
                key: key.to_vec(),
            },
        }
    }
}

/// Ops applied in order, atomically, by [`Engine::write`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub ops: Vec<WriteOp>,
    /// What the ops mean to a change stream, encoded by the layer that replicates them
    /// (`shard::repl::events`): storage never reads it, and batches that merge
    /// concatenate it.
    pub events: Vec<u8>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// A batch of `ops` that means nothing to a change stream.
    pub fn of(ops: Vec<WriteOp>) -> Self {
        WriteBatch {
            ops,
            events: Vec::new(),
        }
    }

    pub fn put(
        &mut self,
        table: impl Into<String>,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.ops.push(WriteOp::Put {
            table: table.into(),
            key: key.into(),
            value: value.into(),
        });
        self
    }

    pub fn insert(
        &mut self,
        table: impl Into<String>,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.ops.push(WriteOp::Insert {
            table: table.into(),
            key: key.into(),
            value: value.into(),
        });
        self
    }

    pub fn delete(&mut self, table: impl Into<String>, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(WriteOp::Delete {
            table: table.into(),
            key: key.into(),
        });
        self
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Number of key/value pairs.
    pub entries: u64,
    /// Sum of key and value lengths (logical bytes, not on-disk size).
    pub bytes: u64,
}

/// Key/value pairs in key order.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Receives an [`Engine::export`]: a table's name and its next page of rows in key order.
pub type ExportSink<'a> = dyn FnMut(&str, Rows) -> Result<()> + 'a;

/// An ordered key/value store of named tables.
///
/// Every method may be called from any thread concurrently. Operations on a table that does
/// not exist fail with [`StorageError::NoSuchTable`] (except `create_table`/`drop_table`).
pub trait Engine: Send + Sync + 'static {
    /// Creates the table; creating an existing table is a no-op.
    fn create_table(&self, name: &str) -> Result<()>;
    /// Drops the table and its data; dropping a missing table is a no-op.
    fn drop_table(&self, name: &str) -> Result<()>;
    /// All table names, sorted.
    fn list_tables(&self) -> Result<Vec<String>>;
    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Up to `limit` entries in key order (reverse: descending) within range.
    /// `limit == 0` returns nothing; pass `usize::MAX` for no limit.
    fn scan(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Applies all ops atomically in one transaction (all or nothing).
    fn write(&self, batch: &WriteBatch) -> Result<()>;
    /// [`Engine::write`] for a caller that no longer needs the batch: layers that keep
    /// or extend it (replication, retryable-write records) take it without a copy.
    fn write_owned(&self, batch: WriteBatch) -> Result<()> {
        self.write(&batch)
    }
    /// [`Engine::write`] of borrowed ops. The default copies them into a batch; an engine
    /// that copies rows into its own pages anyway (WiredTiger) applies them as they are.
    fn write_refs(&self, ops: &[WriteOpRef<'_>]) -> Result<()> {
        self.write_owned(WriteBatch::of(
            ops.iter().map(WriteOpRef::to_owned).collect(),
        ))
    }
    /// [`Engine::get`] as of `at`: the newest version committed at or before `at`.
    /// Fails with [`StorageError::SnapshotTooOld`] if `at` is older than the oldest
    /// timestamp. Reading at a time later than the stable timestamp is the caller's error:
    /// a later commit below that time would change what was read.
    fn get_at(&self, table: &str, key: &[u8], at: Timestamp) -> Result<Option<Vec<u8>>>;
    /// [`Engine::scan`] as of `at`, as [`Engine::get_at`].
    fn scan_at(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Timestamp,
    ) -> Result<Rows>;
    /// [`Engine::write_refs`] committed at timestamp `commit`, which must be at or after
    /// the stable and oldest timestamps (an error otherwise).
    fn write_refs_at(&self, ops: &[WriteOpRef<'_>], commit: Timestamp) -> Result<()>;
    /// Moves the stable and oldest timestamps forward: a checkpoint holds the data as of
    /// stable, and history older than oldest may be discarded. A mark behind its current
    /// value stays where it is, and oldest never passes stable.
    fn set_timestamps(&self, stable: Timestamp, oldest: Timestamp) -> Result<()>;
    /// Whether a version of any key `ops` write was committed after `at`: a transaction
    /// that read as of `at` and wrote these keys would overwrite a write it never saw
    /// (first committer wins). May answer true when unsure (WiredTiger cannot tell a
    /// conflict from an eviction's rollback), never false when a newer version exists.
    fn write_conflict(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool>;
    /// Applies `ops` in a transaction prepared at `prepare` and left open, for a
    /// two-phase commit: reads before `prepare` do not see it, and reads at or after it
    /// (or without a time) meet [`StorageError::PrepareConflict`] on its keys until
    /// [`Engine::commit_prepared`] or [`Engine::abort_prepared`]. `prepare` must be after
    /// the stable timestamp. A prepared transaction does not survive a restart: the
    /// caller keeps what it needs to prepare it again. Writing a key of an open prepared
    /// transaction is the caller's error (WiredTiger refuses it until it is resolved).
    /// WiredTiger prepares only without its own log, as replica-set members run.
    fn prepare(&self, id: PreparedId, ops: &[WriteOpRef<'_>], prepare: Timestamp) -> Result<()>;
    /// [`Engine::prepare`] again after a restart, of a transaction prepared at `prepare`
    /// before it: the stable timestamp may have passed `prepare` since, and a `prepare`
    /// older than the oldest timestamp is raised to it. Only before anything else reads or
    /// writes its keys, with the same writes as the first time.
    fn prepare_recovered(
        &self,
        id: PreparedId,
        ops: &[WriteOpRef<'_>],
        prepare: Timestamp,
    ) -> Result<()>;
    /// Commits prepared transaction `id`: readers at or after `commit` (at or after its
    /// prepare time, and possibly before the stable timestamp) see it, and it is durable
    /// with the data as of `durable` (at or after `commit`, the stable and the oldest
    /// timestamps). Times that break these rules are refused before the engine sees them.
    fn commit_prepared(&self, id: PreparedId, commit: Timestamp, durable: Timestamp) -> Result<()>;
    /// Rolls prepared transaction `id` back.
    fn abort_prepared(&self, id: PreparedId) -> Result<()>;
    fn stats(&self, table: &str) -> Result<TableStats>;
    /// Makes everything written so far durable in the data files (a no-op in memory).
    fn checkpoint(&self) -> Result<()>;
    /// Reads every table as of one instant (WiredTiger: a checkpoint made for the export,
    /// so that no transaction is held open for the copy), to copy a whole member to another: for each table in name order, `sink` gets its rows in key order
    /// in pages of about `page_bytes` (a table without rows gets one empty page, so that
    /// it is created). Writers are not blocked; a table dropped meanwhile fails the export.
    fn export(&self, page_bytes: usize, sink: &mut ExportSink<'_>) -> Result<()>;
}

/// An engine wrapped around another (replication, retryable-write records, test
/// fixtures): reads go below unchanged; a layer decides what writing and table DDL mean.
/// Every `Layer` is an [`Engine`].
pub trait Layer: Send + Sync + 'static {
    /// The engine underneath.
    fn below(&self) -> &dyn Engine;

    /// [`Engine::write_owned`] for this layer.
    fn write_layered(&self, batch: WriteBatch) -> Result<()> {
        self.below().write_owned(batch)
    }

    /// [`Engine::create_table`] for this layer.
    fn create_layered(&self, name: &str) -> Result<()> {
        self.below().create_table(name)
    }

    /// [`Engine::drop_table`] for this layer.
    fn drop_layered(&self, name: &str) -> Result<()> {
        self.below().drop_table(name)
    }

    /// [`Engine::write_refs_at`] for this layer. A layer decides what writing means
    /// (replication proposes the write), and timestamped writes are the applier's, to the
    /// engine under every layer; so by default a layer refuses them.
    fn write_at_layered(&self, _ops: &[WriteOpRef<'_>], _commit: Timestamp) -> Result<()> {
        Err(StorageError::Other(
            "timestamped writes go to the engine under the layers".into(),
        ))
    }

    /// Where this layer sends prepared transactions, if it lets them through: like
    /// timestamped writes they are the applier's, so by default a layer refuses them.
    fn prepared_below(&self) -> Option<&dyn Engine> {
        None
    }
}

/// A prepare time must be after the stable timestamp (so also at or after oldest).
pub(crate) fn check_prepare(prepare: Timestamp, stable: Timestamp) -> Result<()> {
    if prepare <= stable {
        return Err(StorageError::Other(format!(
            "prepare timestamp {prepare:#x} is not after the stable timestamp {stable:#x}"
        )));
    }
    Ok(())
}

/// The rules for committing a prepared transaction, checked before the engine sees the
/// times: WiredTiger stops the whole connection when such a commit fails.
pub(crate) fn check_prepared_commit(
    prepare: Timestamp,
    commit: Timestamp,
    durable: Timestamp,
    (stable, oldest): (Timestamp, Timestamp),
) -> Result<()> {
    let refuse = |why: String| Err(StorageError::Other(why));
    if commit < prepare {
        return refuse(format!(
            "commit timestamp {commit:#x} is before the prepare timestamp {prepare:#x}"
        ));
    }
    if durable < commit || durable < stable || durable < oldest {
        return refuse(format!(
            "durable timestamp {durable:#x} is before the commit ({commit:#x}), stable \
             ({stable:#x}) or oldest ({oldest:#x}) timestamp"
        ));
    }
    Ok(())
}

/// The engine a layer sends prepared transactions to (`Layer::prepared_below`).
fn through<T: Layer>(layer: &T) -> Result<&dyn Engine> {
    layer.prepared_below().ok_or_else(|| {
        StorageError::Other("prepared transactions go to the engine under the layers".into())
    })
}

impl<T: Layer> Engine for T {
    fn create_table(&self, name: &str) -> Result<()> {
        self.create_layered(name)
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        self.drop_layered(name)
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        self.below().list_tables()
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.below().get(table, key)
    }

    fn scan(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.below().scan(table, range, reverse, limit)
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_layered(batch.clone())
    }

    fn write_owned(&self, batch: WriteBatch) -> Result<()> {
        self.write_layered(batch)
    }

    fn get_at(&self, table: &str, key: &[u8], at: Timestamp) -> Result<Option<Vec<u8>>> {
        self.below().get_at(table, key, at)
    }

    fn scan_at(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        at: Timestamp,
    ) -> Result<Rows> {
        self.below().scan_at(table, range, reverse, limit, at)
    }

    fn write_refs_at(&self, ops: &[WriteOpRef<'_>], commit: Timestamp) -> Result<()> {
        self.write_at_layered(ops, commit)
    }

    fn set_timestamps(&self, stable: Timestamp, oldest: Timestamp) -> Result<()> {
        self.below().set_timestamps(stable, oldest)
    }

    fn write_conflict(&self, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<bool> {
        self.below().write_conflict(ops, at)
    }

    fn prepare(&self, id: PreparedId, ops: &[WriteOpRef<'_>], at: Timestamp) -> Result<()> {
        through(self)?.prepare(id, ops, at)
    }

    fn prepare_recovered(
        &self,
        id: PreparedId,
        ops: &[WriteOpRef<'_>],
        at: Timestamp,
    ) -> Result<()> {
        through(self)?.prepare_recovered(id, ops, at)
    }

    fn commit_prepared(&self, id: PreparedId, commit: Timestamp, durable: Timestamp) -> Result<()> {
        through(self)?.commit_prepared(id, commit, durable)
    }

    fn abort_prepared(&self, id: PreparedId) -> Result<()> {
        through(self)?.abort_prepared(id)
    }

    fn stats(&self, table: &str) -> Result<TableStats> {
        self.below().stats(table)
    }

    fn checkpoint(&self) -> Result<()> {
        self.below().checkpoint()
    }

    fn export(&self, page_bytes: usize, sink: &mut ExportSink<'_>) -> Result<()> {
        self.below().export(page_bytes, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range() {
        let r = KeyRange::prefix(b"ab");
        assert!(r.contains(b"ab"));
        assert!(r.contains(b"ab\xff\xff"));
        assert!(!r.contains(b"ac"));
        assert!(!r.contains(b"aa\xff"));
        let r = KeyRange::prefix(b"a\xff");
        assert_eq!(r.end, Bound::Excluded(b"b".to_vec()));
        assert_eq!(KeyRange::prefix(b"\xff\xff").end, Bound::Unbounded);
        assert_eq!(
            KeyRange::prefix(b""),
            KeyRange {
                start: Bound::Included(vec![]),
                end: Bound::Unbounded
            }
        );
    }
}
