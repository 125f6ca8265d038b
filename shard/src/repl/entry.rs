//! Oplog entries: what one Raft log entry asks every member to do to its storage.
//!
//! Entries are physical and document-level: the leader has already evaluated the command
//! (`$inc` became the resulting document), so applying an entry needs no query logic and
//! gives the same result on every member. A hand-rolled binary form keeps the hot insert
//! path free of a second BSON encoding of every document.

use storage::{WriteBatch, WriteOp, WriteOpRef};

/// One replicated change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OplogEntry {
    /// An atomic batch of puts, inserts and deletes.
    Write(WriteBatch),
    CreateTable(String),
    DropTable(String),
    /// A transaction's part here, prepared at the entry's time for a two-phase commit
    /// (`repl::prepared`); `side` is written at once beside it (the session's record).
    Prepare {
        txn: TxnName,
        /// The shard whose commit decides the transaction's fate (`repl::prepared`).
        coordinator: String,
        ops: WriteBatch,
        side: WriteBatch,
    },
    /// Commits the prepared transaction `txn` at `commit` (durable at the entry's time).
    CommitPrepared {
        txn: TxnName,
        commit: u64,
        side: WriteBatch,
    },
    AbortPrepared {
        txn: TxnName,
        side: WriteBatch,
    },
}

/// A transaction: its session (`sessions::retry::session_key`) and `txnNumber`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TxnName {
    pub session: Vec<u8>,
    pub number: i64,
}

const WRITE: u8 = 0;
const CREATE: u8 = 1;
const DROP: u8 = 2;
pub const PREPARE: u8 = 3;
const COMMIT_PREPARED: u8 = 4;
const ABORT_PREPARED: u8 = 5;
/// `WRITE` and `PREPARE` followed by their change events (`repl::events`): entries
/// without events keep the bytes they always had.
const WRITE_EV: u8 = 6;
const PREPARE_EV: u8 = 7;
const PUT: u8 = 0;
const INSERT: u8 = 1;
const DELETE: u8 = 2;

impl OplogEntry {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            OplogEntry::Write(batch) => encode_write(batch),
            OplogEntry::CreateTable(t) => [&[CREATE], t.as_bytes()].concat(),
            OplogEntry::DropTable(t) => [&[DROP], t.as_bytes()].concat(),
            OplogEntry::Prepare {
                txn,
                coordinator,
                ops,
                side,
            } => {
                let kind = if ops.events.is_empty() {
                    PREPARE
                } else {
                    PREPARE_EV
                };
                let mut out = txn_header(kind, txn);
                out.extend_from_slice(&(coordinator.len() as u16).to_le_bytes());
                out.extend_from_slice(coordinator.as_bytes());
                put_ops(&mut out, ops);
                put_ops(&mut out, side);
                put_events(&mut out, ops);
                out
            }
            OplogEntry::CommitPrepared { txn, commit, side } => {
                let mut out = txn_header(COMMIT_PREPARED, txn);
                out.extend_from_slice(&commit.to_le_bytes());
                put_ops(&mut out, side);
                out
            }
            OplogEntry::AbortPrepared { txn, side } => {
                let mut out = txn_header(ABORT_PREPARED, txn);
                put_ops(&mut out, side);
                out
            }
        }
    }

    /// `None` for bytes no leader of ours wrote (a corrupt or foreign log).
    pub fn decode(bytes: &[u8]) -> Option<OplogEntry> {
        let mut entry = OplogEntryRef::decode(bytes)?.to_owned();
        if let OplogEntry::Write(b) | OplogEntry::Prepare { ops: b, .. } = &mut entry {
            b.events = events_of(bytes).unwrap_or_default().to_vec();
        }
        Some(entry)
    }
}

/// An [`OplogEntry`] that borrows from the entry's bytes: the applier hands its ops to
/// WiredTiger, which copies each row into its own pages, with no copy before that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OplogEntryRef<'a> {
    Write(Vec<WriteOpRef<'a>>),
    CreateTable(&'a str),
    DropTable(&'a str),
    Prepare {
        txn: TxnName,
        coordinator: &'a str,
        ops: Vec<WriteOpRef<'a>>,
        side: Vec<WriteOpRef<'a>>,
    },
    CommitPrepared {
        txn: TxnName,
        commit: u64,
        side: Vec<WriteOpRef<'a>>,
    },
    AbortPrepared {
        txn: TxnName,
        side: Vec<WriteOpRef<'a>>,
    },
}

impl<'a> OplogEntryRef<'a> {
    /// `None` for bytes no leader of ours wrote (a corrupt or foreign log).
    pub fn decode(bytes: &'a [u8]) -> Option<OplogEntryRef<'a>> {
        let (&kind, rest) = bytes.split_first()?;
        let mut r = Reader(rest);
        let entry = match kind {
            WRITE => OplogEntryRef::Write(r.ops()?),
            WRITE_EV => {
                let ops = r.ops()?;
                r.bytes()?;
                OplogEntryRef::Write(ops)
            }
            CREATE => return Some(OplogEntryRef::CreateTable(std::str::from_utf8(rest).ok()?)),
            DROP => return Some(OplogEntryRef::DropTable(std::str::from_utf8(rest).ok()?)),
            PREPARE | PREPARE_EV => {
                let entry = OplogEntryRef::Prepare {
                    txn: r.txn()?,
                    coordinator: r.str()?,
                    ops: r.ops()?,
                    side: r.ops()?,
                };
                if kind == PREPARE_EV {
                    r.bytes()?;
                }
                entry
            }
            COMMIT_PREPARED => OplogEntryRef::CommitPrepared {
                txn: r.txn()?,
                commit: r.u64()?,
                side: r.ops()?,
            },
            ABORT_PREPARED => OplogEntryRef::AbortPrepared {
                txn: r.txn()?,
                side: r.ops()?,
            },
            _ => return None,
        };
        r.0.is_empty().then_some(entry)
    }

    pub fn to_owned(&self) -> OplogEntry {
        let batch =
            |ops: &[WriteOpRef<'_>]| WriteBatch::of(ops.iter().map(WriteOpRef::to_owned).collect());
        match self {
            OplogEntryRef::Write(ops) => OplogEntry::Write(batch(ops)),
            OplogEntryRef::CreateTable(t) => OplogEntry::CreateTable(t.to_string()),
            OplogEntryRef::DropTable(t) => OplogEntry::DropTable(t.to_string()),
            OplogEntryRef::Prepare {
                txn,
                coordinator,
                ops,
                side,
            } => OplogEntry::Prepare {
                txn: txn.clone(),
                coordinator: coordinator.to_string(),
                ops: batch(ops),
                side: batch(side),
            },
            OplogEntryRef::CommitPrepared { txn, commit, side } => OplogEntry::CommitPrepared {
                txn: txn.clone(),
                commit: *commit,
                side: batch(side),
            },
            OplogEntryRef::AbortPrepared { txn, side } => OplogEntry::AbortPrepared {
                txn: txn.clone(),
                side: batch(side),
            },
        }
    }
}
/// Encodes a write batch without copying it into an `OplogEntry` first.
pub fn encode_write(batch: &WriteBatch) -> Vec<u8> {
    let mut out = Vec::with_capacity(ops_size(batch) + batch.events.len() + 5);
    if batch.events.is_empty() {
        out.push(WRITE);
        put_ops(&mut out, batch);
    } else {
        out.push(WRITE_EV);
        put_ops(&mut out, batch);
        put_events(&mut out, batch);
    }
    out
}

/// The change events (`repl::events`) an entry's bytes carry: `Some(empty)` for an
/// entry without any, `None` for bytes no leader of ours wrote.
pub fn events_of(bytes: &[u8]) -> Option<&[u8]> {
    let (&kind, rest) = bytes.split_first()?;
    let mut r = Reader(rest);
    match kind {
        WRITE_EV => {
            r.ops()?;
        }
        PREPARE_EV => {
            r.txn()?;
            r.str()?;
            r.ops()?;
            r.ops()?;
        }
        _ => return Some(&[]),
    }
    let events = r.bytes()?;
    r.0.is_empty().then_some(events)
}

fn put_events(out: &mut Vec<u8>, batch: &WriteBatch) {
    if !batch.events.is_empty() {
        out.extend_from_slice(&(batch.events.len() as u32).to_le_bytes());
        out.extend_from_slice(&batch.events);
    }
}

/// The bytes `put_ops` writes for `batch`.
pub fn ops_size(batch: &WriteBatch) -> usize {
    4 + batch.ops.iter().map(op_size).sum::<usize>()
}

/// The bytes `put_ops` writes for `op`.
pub fn op_size(op: &WriteOp) -> usize {
    match op {
        WriteOp::Put { table, key, value } | WriteOp::Insert { table, key, value } => {
            table.len() + key.len() + value.len() + 11
        }
        WriteOp::Delete { table, key } => table.len() + key.len() + 7,
    }
}

/// A prepared-transaction entry's kind and transaction.
fn txn_header(kind: u8, txn: &TxnName) -> Vec<u8> {
    let mut out = Vec::with_capacity(txn.session.len() + 11);
    out.push(kind);
    out.extend_from_slice(&(txn.session.len() as u16).to_le_bytes());
    out.extend_from_slice(&txn.session);
    out.extend_from_slice(&txn.number.to_le_bytes());
    out
}

/// Appends `batch`: its op count, then each op.
pub fn put_ops(out: &mut Vec<u8>, batch: &WriteBatch) {
    out.reserve(ops_size(batch));
    out.extend_from_slice(&(batch.ops.len() as u32).to_le_bytes());
    for op in &batch.ops {
        match op {
            WriteOp::Put { table, key, value } => put_op(out, PUT, table, key, Some(value)),
            WriteOp::Insert { table, key, value } => put_op(out, INSERT, table, key, Some(value)),
            WriteOp::Delete { table, key } => put_op(out, DELETE, table, key, None),
        }
    }
}

fn put_op(out: &mut Vec<u8>, op: u8, table: &str, key: &[u8], value: Option<&Vec<u8>>) {
    out.push(op);
    out.extend_from_slice(&(table.len() as u16).to_le_bytes());
    out.extend_from_slice(table.as_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    if let Some(v) = value {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
}

/// Reads what `encode`, `put_ops` and `txn_header` write.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    /// A batch of ops as `put_ops` writes it.
    pub fn ops(&mut self) -> Option<Vec<WriteOpRef<'a>>> {
        let n = self.u32()? as usize;
        // Each op takes at least 7 bytes: a corrupt count cannot reserve much.
        let mut ops = Vec::with_capacity(n.min(self.0.len() / 7));
        for _ in 0..n {
            let op = self.u8()?;
            let tlen = self.u16()? as usize;
            let table = std::str::from_utf8(self.take(tlen)?).ok()?;
            let klen = self.u32()? as usize;
            let key = self.take(klen)?;
            ops.push(match op {
                PUT | INSERT => {
                    let vlen = self.u32()? as usize;
                    let value = self.take(vlen)?;
                    if op == PUT {
                        WriteOpRef::Put { table, key, value }
                    } else {
                        WriteOpRef::Insert { table, key, value }
                    }
                }
                DELETE => WriteOpRef::Delete { table, key },
                _ => return None,
            });
        }
        Some(ops)
    }

    /// Bytes with a 32-bit length.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// A string with a 16-bit length.
    pub fn str(&mut self) -> Option<&'a str> {
        let len = self.u16()? as usize;
        std::str::from_utf8(self.take(len)?).ok()
    }

    fn txn(&mut self) -> Option<TxnName> {
        let len = self.u16()? as usize;
        let session = self.take(len)?.to_vec();
        let number = i64::from_le_bytes(self.take(8)?.try_into().ok()?);
        Some(TxnName { session, number })
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        let mut b = WriteBatch::new();
        b.put("t1", vec![1, 2], vec![3; 300])
            .insert("t2", vec![9], vec![])
            .delete("t1", vec![7, 7, 7]);
        let mut with_events = b.clone();
        with_events.events = vec![4; 33];
        for e in [
            OplogEntry::Write(with_events.clone()),
            OplogEntry::Prepare {
                txn: TxnName {
                    session: vec![2; 4],
                    number: 1,
                },
                coordinator: "a".into(),
                ops: with_events.clone(),
                side: b.clone(),
            },
            OplogEntry::Write(b.clone()),
            OplogEntry::Write(WriteBatch::new()),
            OplogEntry::CreateTable("c_x".into()),
            OplogEntry::DropTable("i_y".into()),
            OplogEntry::Prepare {
                txn: TxnName {
                    session: vec![5; 20],
                    number: 9,
                },
                coordinator: "shard-b".into(),
                ops: b.clone(),
                side: b.clone(),
            },
            OplogEntry::CommitPrepared {
                txn: TxnName {
                    session: vec![1],
                    number: -3,
                },
                commit: u64::MAX - 7,
                side: WriteBatch::new(),
            },
            OplogEntry::AbortPrepared {
                txn: TxnName {
                    session: vec![],
                    number: 0,
                },
                side: b.clone(),
            },
        ] {
            assert_eq!(OplogEntry::decode(&e.encode()), Some(e));
        }
    }

    #[test]
    fn rejects_truncated_and_unknown_bytes() {
        let mut b = WriteBatch::new();
        b.put("t", vec![1], vec![2, 3]);
        let plain = OplogEntry::Write(b.clone()).encode();
        b.events = vec![1, 2, 3];
        let with_events = OplogEntry::Write(b).encode();
        assert_eq!(events_of(&with_events), Some(&[1, 2, 3][..]));
        assert_eq!(events_of(&plain), Some(&[][..]));
        for bytes in [plain, with_events] {
            for n in 0..bytes.len() {
                assert_eq!(OplogEntry::decode(&bytes[..n]), None, "prefix of {n} bytes");
            }
        }
        assert_eq!(OplogEntry::decode(&[9]), None);
    }
}
