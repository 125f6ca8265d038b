//! The rollback directory: where a member keeps writes a new primary erased.
//!
//! A member applies only committed entries, so nothing it applied is ever undone and no
//! acknowledged write is lost. But a primary that lost its majority may have appended
//! proposals that never committed (their clients got an error or a timeout, never an
//! acknowledgement); when it rejoins, the new primary's log overwrites them. Like mongod,
//! which writes the documents a rollback undoes to `<dbpath>/rollback/`, the member
//! saves the documents those proposals would have written, so an operator can see what
//! was attempted and reapply it by hand: `rollback/<db.collection>/removed.<time>.<index>.bson`,
//! readable with `bsondump` or any BSON reader. Deletes and index entries are not saved
//! (a delete that never happened left the document in place).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use raft::eraftpb::{Entry, EntryType};
use storage::WriteOp;
use tracing::warn;

use super::entry::OplogEntry;

/// Maps a storage table to the namespace of the collection it holds (`None` for index and
/// internal tables).
pub type NamespaceOf = Box<dyn Fn(&str) -> Option<String> + Send>;

pub struct RollbackDir {
    pub dir: PathBuf,
    pub namespace_of: NamespaceOf,
}

impl RollbackDir {
    /// Saves the documents `replaced` would have written; returns how many.
    pub fn save(&self, replaced: &[Entry]) -> std::io::Result<usize> {
        let mut by_ns: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut saved = 0;
        for e in replaced {
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            let Some(OplogEntry::Write(batch)) = OplogEntry::decode(&e.data) else {
                continue;
            };
            for op in batch.ops {
                let (WriteOp::Put { table, value, .. } | WriteOp::Insert { table, value, .. }) = op
                else {
                    continue;
                };
                let Some(ns) = (self.namespace_of)(&table) else {
                    continue;
                };
                if bson::RawDocument::from_bytes(&value).is_ok() {
                    by_ns.entry(ns).or_default().extend_from_slice(&value);
                    saved += 1;
                }
            }
        }
        let first = replaced.first().map_or(0, |e| e.index);
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        for (ns, docs) in by_ns {
            let dir = self.dir.join(&ns);
            std::fs::create_dir_all(&dir)?;
            let path = dir.join(format!("removed.{secs}.{first}.bson"));
            let mut f = std::fs::File::create(&path)?;
            f.write_all(&docs)?;
            f.sync_all()?;
            warn!(ns, path = %path.display(), "saved writes a new primary erased");
        }
        Ok(saved)
    }
}

#[cfg(test)]
mod tests {
    use storage::WriteBatch;

    use super::*;

    #[test]
    fn saves_the_documents_of_erased_writes_by_collection() {
        let dir = tempfile::tempdir().unwrap();
        let rollback = RollbackDir {
            dir: dir.path().to_path_buf(),
            namespace_of: Box::new(|t| (t == "c1").then(|| "test.p".to_string())),
        };
        let doc = bson::to_vec(&bson::doc! {"_id": "lost", "x": 1}).unwrap();
        let mut batch = WriteBatch::new();
        batch.insert("c1", b"k".to_vec(), doc.clone());
        batch.put("i1", b"index".to_vec(), Vec::new());
        batch.delete("c1", b"gone".to_vec());
        let entry = Entry {
            index: 7,
            term: 2,
            data: OplogEntry::Write(batch).encode().into(),
            ..Default::default()
        };
        let noop = Entry {
            index: 8,
            term: 2,
            ..Default::default()
        };
        assert_eq!(rollback.save(&[entry, noop]).unwrap(), 1);
        let files: Vec<_> = std::fs::read_dir(dir.path().join("test.p"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        assert!(files[0].to_string_lossy().ends_with(".7.bson"));
        assert_eq!(std::fs::read(&files[0]).unwrap(), doc);
    }
}
