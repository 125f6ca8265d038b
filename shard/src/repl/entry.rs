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
}

const WRITE: u8 = 0;
const CREATE: u8 = 1;
const DROP: u8 = 2;
const PUT: u8 = 0;
const INSERT: u8 = 1;
const DELETE: u8 = 2;

impl OplogEntry {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            OplogEntry::Write(batch) => encode_write(batch),
            OplogEntry::CreateTable(t) => [&[CREATE], t.as_bytes()].concat(),
            OplogEntry::DropTable(t) => [&[DROP], t.as_bytes()].concat(),
        }
    }

    /// `None` for bytes no leader of ours wrote (a corrupt or foreign log).
    pub fn decode(bytes: &[u8]) -> Option<OplogEntry> {
        OplogEntryRef::decode(bytes).map(|e| e.to_owned())
    }
}

/// An [`OplogEntry`] that borrows from the entry's bytes: the applier hands its ops to
/// WiredTiger, which copies each row into its own pages, with no copy before that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OplogEntryRef<'a> {
    Write(Vec<WriteOpRef<'a>>),
    CreateTable(&'a str),
    DropTable(&'a str),
}

impl<'a> OplogEntryRef<'a> {
    /// `None` for bytes no leader of ours wrote (a corrupt or foreign log).
    pub fn decode(bytes: &'a [u8]) -> Option<OplogEntryRef<'a>> {
        let (&kind, rest) = bytes.split_first()?;
        match kind {
            WRITE => {
                let mut r = Reader(rest);
                let n = r.u32()? as usize;
                // Each op takes at least 7 bytes: a corrupt count cannot reserve much.
                let mut ops = Vec::with_capacity(n.min(rest.len() / 7));
                for _ in 0..n {
                    let op = r.u8()?;
                    let tlen = r.u16()? as usize;
                    let table = std::str::from_utf8(r.take(tlen)?).ok()?;
                    let klen = r.u32()? as usize;
                    let key = r.take(klen)?;
                    ops.push(match op {
                        PUT | INSERT => {
                            let vlen = r.u32()? as usize;
                            let value = r.take(vlen)?;
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
                r.0.is_empty().then_some(OplogEntryRef::Write(ops))
            }
            CREATE => Some(OplogEntryRef::CreateTable(std::str::from_utf8(rest).ok()?)),
            DROP => Some(OplogEntryRef::DropTable(std::str::from_utf8(rest).ok()?)),
            _ => None,
        }
    }

    pub fn to_owned(&self) -> OplogEntry {
        match self {
            OplogEntryRef::Write(ops) => OplogEntry::Write(WriteBatch {
                ops: ops.iter().map(WriteOpRef::to_owned).collect(),
            }),
            OplogEntryRef::CreateTable(t) => OplogEntry::CreateTable(t.to_string()),
            OplogEntryRef::DropTable(t) => OplogEntry::DropTable(t.to_string()),
        }
    }
}

/// Encodes a write batch without copying it into an `OplogEntry` first.
pub fn encode_write(batch: &WriteBatch) -> Vec<u8> {
    let size: usize = batch
        .ops
        .iter()
        .map(|op| match op {
            WriteOp::Put { table, key, value } | WriteOp::Insert { table, key, value } => {
                table.len() + key.len() + value.len() + 11
            }
            WriteOp::Delete { table, key } => table.len() + key.len() + 7,
        })
        .sum();
    let mut out = Vec::with_capacity(size + 5);
    out.push(WRITE);
    out.extend_from_slice(&(batch.ops.len() as u32).to_le_bytes());
    for op in &batch.ops {
        match op {
            WriteOp::Put { table, key, value } => put_op(&mut out, PUT, table, key, Some(value)),
            WriteOp::Insert { table, key, value } => {
                put_op(&mut out, INSERT, table, key, Some(value))
            }
            WriteOp::Delete { table, key } => put_op(&mut out, DELETE, table, key, None),
        }
    }
    out
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

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
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
        for e in [
            OplogEntry::Write(b),
            OplogEntry::Write(WriteBatch::new()),
            OplogEntry::CreateTable("c_x".into()),
            OplogEntry::DropTable("i_y".into()),
        ] {
            assert_eq!(OplogEntry::decode(&e.encode()), Some(e));
        }
    }

    #[test]
    fn rejects_truncated_and_unknown_bytes() {
        let mut b = WriteBatch::new();
        b.put("t", vec![1], vec![2, 3]);
        let bytes = OplogEntry::Write(b).encode();
        for n in 0..bytes.len() {
            assert_eq!(OplogEntry::decode(&bytes[..n]), None, "prefix of {n} bytes");
        }
        assert_eq!(OplogEntry::decode(&[9]), None);
    }
}
