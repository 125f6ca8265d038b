//! Records queued for the Raft log's next write, without copying entry payloads.
//!
//! An entry's payload (a batch of documents, up to 16 MB) is already in memory as
//! `Bytes`, which raft-rs and the log store share. Encoding the entry with protobuf and
//! then appending the result to a buffer copied every payload twice before the kernel
//! copied it a third time into the page cache; in the replicated-insert profile those two
//! copies were about 5% of all CPU. Here the small parts of a record (its header and the
//! entry's other fields) are copied into `inline` and the payload is kept by reference, and
//! `write_to` hands both to one `writev`. The bytes on disk are the same as before: the
//! protobuf encoding of the entry, framed as `log.rs` describes.

use std::io::{IoSlice, Write};

use bytes::{BufMut, Bytes, BytesMut};
use protobuf::{Message as _, ProtobufEnum as _};
use raft::eraftpb::Entry;

use super::log_store::{invalid, HEADER};

/// Payloads shorter than this are copied: an iovec costs more than a short copy.
const SHARE_FROM: usize = 512;

#[derive(Default)]
pub struct Pending {
    /// Inline bytes not yet moved into `parts`.
    inline: BytesMut,
    /// Everything before `inline`, in order.
    parts: Vec<Bytes>,
    len: usize,
}

impl Pending {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.inline.clear();
        self.parts.clear();
        self.len = 0;
    }

    /// Queues a record whose payload is `payload` (copied).
    pub fn record(&mut self, kind: u8, payload: &[u8]) {
        self.header(kind, payload.len(), crc32fast::hash(payload));
        self.inline.put_slice(payload);
        self.len += payload.len();
    }

    /// Queues an entry record: the same bytes as `record(kind, &e.write_to_bytes()?)`,
    /// with the payload shared instead of copied.
    pub fn entry(&mut self, kind: u8, e: &Entry) -> std::io::Result<()> {
        if e.data.len() < SHARE_FROM || e.get_unknown_fields().fields.is_some() {
            let payload = e.write_to_bytes().map_err(invalid)?;
            self.record(kind, &payload);
            return Ok(());
        }
        let mut before = Vec::with_capacity(40);
        if e.entry_type.value() != 0 {
            field_varint(&mut before, 1, e.entry_type.value() as i64 as u64);
        }
        if e.term != 0 {
            field_varint(&mut before, 2, e.term);
        }
        if e.index != 0 {
            field_varint(&mut before, 3, e.index);
        }
        varint(&mut before, 4 << 3 | 2);
        varint(&mut before, e.data.len() as u64);
        let mut after = Vec::new();
        if !e.context.is_empty() {
            varint(&mut after, 6 << 3 | 2);
            varint(&mut after, e.context.len() as u64);
            after.extend_from_slice(&e.context);
        }
        if e.sync_log {
            field_varint(&mut after, 5, 1);
        }
        let len = before.len() + e.data.len() + after.len();
        if len > u32::MAX as usize {
            return Err(invalid("a raft entry larger than 4 GiB"));
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&before);
        crc.update(&e.data);
        crc.update(&after);
        self.header(kind, len, crc.finalize());
        self.inline.put_slice(&before);
        self.parts.push(self.inline.split().freeze());
        self.parts.push(e.data.clone());
        self.inline.put_slice(&after);
        self.len += len;
        Ok(())
    }

    fn header(&mut self, kind: u8, len: usize, crc: u32) {
        self.inline.put_u8(kind);
        self.inline.put_u32_le(len as u32);
        self.inline.put_u32_le(crc);
        self.len += HEADER;
    }

    /// Writes everything queued to `out` (as few `writev` calls as it takes) and empties
    /// the queue. After an error the queue still holds everything, some of which may
    /// have reached `out`.
    pub fn write_to(&mut self, mut out: impl Write) -> std::io::Result<()> {
        if !self.inline.is_empty() {
            self.parts.push(self.inline.split().freeze());
        }
        let mut slices: Vec<IoSlice<'_>> = self.parts.iter().map(|p| IoSlice::new(p)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            match out.write_vectored(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        drop(slices);
        self.clear();
        Ok(())
    }
}

fn field_varint(out: &mut Vec<u8>, field: u32, v: u64) {
    varint(out, u64::from(field) << 3);
    varint(out, v);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::EntryType;

    /// The record as the log wrote it before: the entry encoded, then framed.
    fn copied(kind: u8, e: &Entry) -> Vec<u8> {
        copied_raw(kind, &e.write_to_bytes().unwrap())
    }

    fn written(p: &mut Pending) -> Vec<u8> {
        let mut out = Vec::new();
        p.write_to(&mut out).unwrap();
        out
    }

    #[test]
    fn a_shared_entry_is_byte_for_byte_the_protobuf_record() {
        let big = Bytes::from(vec![7u8; 100_000]);
        let mut cases = Vec::new();
        for (entry_type, context, sync_log) in [
            (EntryType::EntryNormal, Bytes::new(), false),
            (
                EntryType::EntryConfChangeV2,
                Bytes::from_static(b"ctx"),
                true,
            ),
            (EntryType::EntryConfChange, Bytes::new(), true),
        ] {
            for (term, index) in [(0, 0), (1, 1), (300, u64::MAX)] {
                cases.push(Entry {
                    entry_type,
                    term,
                    index,
                    data: big.clone(),
                    context: context.clone(),
                    sync_log,
                    ..Default::default()
                });
            }
        }
        cases.push(Entry {
            index: 9,
            data: Bytes::from_static(b"short"),
            ..Default::default()
        });

        let mut all = Pending::default();
        let mut expected = Vec::new();
        for e in &cases {
            let mut one = Pending::default();
            one.entry(1, e).unwrap();
            let want = copied(1, e);
            assert_eq!(one.len(), want.len());
            assert_eq!(written(&mut one), want, "entry {e:?}");
            assert!(one.is_empty());
            all.entry(1, e).unwrap();
            all.record(2, b"between");
            expected.extend_from_slice(&want);
            expected.extend_from_slice(&copied_raw(2, b"between"));
        }
        assert_eq!(all.len(), expected.len());
        assert_eq!(written(&mut all), expected);
    }

    fn copied_raw(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A writer that takes at most 3 bytes per call: partial vectored writes resume
    /// mid-slice.
    struct Trickle(Vec<u8>);

    impl Write for Trickle {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = b.len().min(3);
            self.0.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let e = Entry {
            index: 5,
            data: Bytes::from(vec![3u8; 2000]),
            ..Default::default()
        };
        let mut p = Pending::default();
        p.record(4, b"start");
        p.entry(1, &e).unwrap();
        let mut t = Trickle(Vec::new());
        p.write_to(&mut t).unwrap();
        let mut want = copied_raw(4, b"start");
        want.extend_from_slice(&copied(1, &e));
        assert_eq!(t.0, want);
    }
}
