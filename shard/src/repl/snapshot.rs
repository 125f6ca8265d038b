//! Snapshot transfer: how a member that fell behind the primary's compacted log, or lost
//! its disk, gets the data back (MongoDB's initial sync does this job).
//!
//! raft-rs sends such a member a `MsgSnapshot` that carries only metadata. The member asks
//! the sender for the data (`FetchSnapshot`): the sender exports every table from one
//! WiredTiger checkpoint made for the export, and since the applied index and its term
//! are a row of `_repl` read from that same checkpoint, the data and the index agree
//! exactly. The member
//! replaces its tables with what arrives, checkpoints, and only then steps the message,
//! its metadata set to the index and term that came with the data; the sender's index
//! may have moved on since the message was made, and the entries in between follow from
//! the log as usual.
//!
//! A marker file spans the install: found at start, it means an install was cut short,
//! and the member's data and log are emptied (its vote kept) to be sent again.

use std::path::Path;

use proto::raft::SnapshotChunk;
use storage::{Engine, StorageError, WriteBatch};
use tokio::sync::mpsc::Sender;

use super::{APPLIED_KEY, REPL_TABLE};

/// Bytes of rows per chunk on the wire.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Present while a member's tables are being replaced by a snapshot.
const MARKER: &str = "snapshot-installing";

/// The applied index, the term of its entry and the newest cluster time applied with it
/// (0: none yet), as `_repl` stores them.
pub fn encode_applied(index: u64, term: u64, time: u64) -> Vec<u8> {
    let mut v = index.to_be_bytes().to_vec();
    v.extend_from_slice(&term.to_be_bytes());
    v.extend_from_slice(&time.to_be_bytes());
    v
}

/// The cluster time an applied index was stored with; 0 for data written before times
/// were stored.
pub fn decode_applied_time(v: &[u8]) -> u64 {
    v.get(16..24)
        .and_then(|t| t.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// `(index, term)`; data written before terms were stored has term 0.
pub fn decode_applied(v: &[u8]) -> Option<(u64, u64)> {
    let index = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    let term = match v.get(8..16) {
        Some(t) => u64::from_be_bytes(t.try_into().ok()?),
        None => 0,
    };
    Some((index, term))
}

/// The sending side: every table of `engine` into `tx`, a chunk at a time. Blocking (run
/// it off the runtime); the channel's bound keeps a slow receiver from filling memory.
pub fn export(
    engine: &dyn Engine,
    tx: &Sender<Result<SnapshotChunk, tonic::Status>>,
) -> Result<(), StorageError> {
    engine.export(CHUNK_BYTES, &mut |table, rows| {
        let (keys, values) = rows.into_iter().unzip();
        let chunk = SnapshotChunk {
            table: table.to_string(),
            keys,
            values,
        };
        tx.blocking_send(Ok(chunk))
            .map_err(|_| StorageError::Other("the member fetching the snapshot went away".into()))
    })
}

/// Receives chunks, in order, into a member whose tables were all dropped.
#[derive(Default)]
pub struct Installer {
    table: Option<String>,
    pub rows: u64,
    pub bytes: u64,
}

impl Installer {
    /// Marks the install as under way, then drops every table of `engine`.
    pub fn begin(engine: &dyn Engine, dir: &Path) -> Result<Installer, StorageError> {
        mark_install(dir)?;
        for t in engine.list_tables()? {
            engine.drop_table(&t)?;
        }
        Ok(Installer::default())
    }

    pub fn chunk(&mut self, engine: &dyn Engine, chunk: SnapshotChunk) -> Result<(), StorageError> {
        if self.table.as_deref() != Some(chunk.table.as_str()) {
            engine.create_table(&chunk.table)?;
            self.table = Some(chunk.table.clone());
        }
        if chunk.keys.len() != chunk.values.len() {
            return Err(StorageError::Other("malformed snapshot chunk".into()));
        }
        let mut batch = WriteBatch::new();
        for (k, v) in chunk.keys.into_iter().zip(chunk.values) {
            self.rows += 1;
            self.bytes += (k.len() + v.len()) as u64;
            batch.put(chunk.table.as_str(), k, v);
        }
        engine.write_owned(batch)
    }

    /// Makes the data durable and returns the index and term it reflects. The marker stays
    /// until the Raft log agrees ([`installed`]). The rows came without timestamps, so
    /// they are visible at every time: history before the snapshot's time is gone here,
    /// and reads before it fail as too old rather than see the newer rows.
    pub fn finish(self, engine: &dyn Engine) -> Result<(u64, u64), StorageError> {
        let applied = engine.get(REPL_TABLE, APPLIED_KEY)?;
        let (index, term) = applied
            .as_deref()
            .and_then(decode_applied)
            .filter(|&(_, term)| term > 0)
            .ok_or_else(|| StorageError::Other("the snapshot holds no applied index".into()))?;
        let time = applied.as_deref().map_or(0, decode_applied_time);
        if time > 0 {
            engine.set_timestamps(time, time)?;
        }
        engine.checkpoint()?;
        Ok((index, term))
    }
}

/// Records (durably) that this member's data is being replaced: until [`installed`], a
/// restart empties the data and the log (`recover_interrupted_install`).
pub fn mark_install(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(MARKER), b"")?;
    std::fs::File::open(dir)?.sync_all()
}

/// The Raft log now starts after the installed data: the install is complete.
pub fn installed(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(MARKER)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// True if an install was cut short (the member stopped or failed in the middle of one).
pub fn interrupted(dir: &Path) -> bool {
    dir.join(MARKER).exists()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use storage::MemoryEngine;

    use super::*;

    #[test]
    fn a_member_gets_every_table_of_another_and_the_index_they_reflect() {
        let from = Arc::new(MemoryEngine::new());
        from.create_table(REPL_TABLE).unwrap();
        from.create_table("docs").unwrap();
        from.create_table("empty").unwrap();
        let mut b = WriteBatch::new();
        b.put(REPL_TABLE, APPLIED_KEY, encode_applied(77, 4, 500 << 32));
        for i in 0..3000u32 {
            b.put("docs", i.to_be_bytes().to_vec(), vec![1u8; 1000]);
        }
        from.write(&b).unwrap();

        let to = MemoryEngine::new();
        to.create_table("stale").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut installer = Installer::begin(&to, dir.path()).unwrap();
        assert!(interrupted(dir.path()));
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let source = from.clone();
        let exporter = std::thread::spawn(move || export(source.as_ref(), &tx));
        let mut chunks = 0;
        while let Some(chunk) = rx.blocking_recv() {
            installer.chunk(&to, chunk.unwrap()).unwrap();
            chunks += 1;
        }
        exporter.join().unwrap().unwrap();
        assert!(chunks >= 3, "3 MB in chunks of 1 MB: {chunks}");
        assert_eq!(installer.finish(&to).unwrap(), (77, 4));
        assert_eq!(to.list_tables().unwrap(), ["_repl", "docs", "empty"]);
        assert_eq!(to.stats("docs").unwrap(), from.stats("docs").unwrap());
        // The data is as of the snapshot's time: readable there, refused before it.
        let key = 7u32.to_be_bytes();
        assert!(to.get_at("docs", &key, 500 << 32).unwrap().is_some());
        assert!(matches!(
            to.get_at("docs", &key, 499 << 32),
            Err(StorageError::SnapshotTooOld { .. })
        ));
        installed(dir.path()).unwrap();
        assert!(!interrupted(dir.path()));
    }

    #[test]
    fn applied_indexes_written_before_terms_still_read() {
        assert_eq!(decode_applied(&9u64.to_be_bytes()), Some((9, 0)));
        assert_eq!(decode_applied(&encode_applied(9, 2, 5)), Some((9, 2)));
        assert_eq!(decode_applied_time(&encode_applied(9, 2, 5)), 5);
        assert_eq!(decode_applied_time(&encode_applied(9, 2, 0)[..16]), 0);
        assert_eq!(decode_applied(b"bad"), None);
    }
}
