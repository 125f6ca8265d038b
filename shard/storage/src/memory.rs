//! The in-memory engine: one `BTreeMap` per table behind a single `RwLock`.
//!
//! It is the reference behaviour for the conformance suite and the engine of unit tests,
//! not a performance path, so one lock for everything is fine.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use parking_lot::RwLock;

use crate::{Engine, ExportSink, KeyRange, Result, StorageError, TableStats, WriteBatch, WriteOp};

type Table = BTreeMap<Vec<u8>, Vec<u8>>;
/// (table, key, value before the op) for restoring a failed batch.
type Undo<'a> = (&'a str, &'a [u8], Option<Vec<u8>>);

#[derive(Default)]
pub struct MemoryEngine {
    tables: RwLock<HashMap<String, Table>>,
}

impl MemoryEngine {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Engine for MemoryEngine {
    fn create_table(&self, name: &str) -> Result<()> {
        self.tables.write().entry(name.to_owned()).or_default();
        Ok(())
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        self.tables.write().remove(name);
        Ok(())
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.tables.read().keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let tables = self.tables.read();
        Ok(table_ref(&tables, table)?.get(key).cloned())
    }

    fn scan(
        &self,
        table: &str,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let tables = self.tables.read();
        let t = table_ref(&tables, table)?;
        if range_is_empty(range) {
            return Ok(Vec::new());
        }
        let bounds = (as_slice_bound(&range.start), as_slice_bound(&range.end));
        let iter = t.range::<[u8], _>(bounds);
        let clone = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        Ok(if reverse {
            iter.rev().take(limit).map(clone).collect()
        } else {
            iter.take(limit).map(clone).collect()
        })
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        let mut tables = self.tables.write();
        // Apply in place and keep an undo log, so a failing op restores every earlier one.
        let mut undo: Vec<Undo<'_>> = Vec::with_capacity(batch.ops.len());
        let mut outcome = Ok(());
        for op in &batch.ops {
            let Some(t) = tables.get_mut(op.table()) else {
                outcome = Err(StorageError::NoSuchTable(op.table().to_owned()));
                break;
            };
            let (key, previous) = match op {
                WriteOp::Put { key, value, .. } => (key, t.insert(key.clone(), value.clone())),
                WriteOp::Insert { table, key, value } => {
                    if t.contains_key(key) {
                        outcome = Err(StorageError::KeyExists {
                            table: table.clone(),
                        });
                        break;
                    }
                    (key, t.insert(key.clone(), value.clone()))
                }
                WriteOp::Delete { key, .. } => (key, t.remove(key)),
            };
            undo.push((op.table(), key, previous));
        }
        if outcome.is_err() {
            for (table, key, previous) in undo.into_iter().rev() {
                let t = tables
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

    fn stats(&self, table: &str) -> Result<TableStats> {
        let tables = self.tables.read();
        let t = table_ref(&tables, table)?;
        Ok(TableStats {
            entries: t.len() as u64,
            bytes: t.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
        })
    }

    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }

    /// Copies everything under the read lock (one instant), then hands it out in pages.
    fn export(&self, page_bytes: usize, sink: &mut ExportSink<'_>) -> Result<()> {
        let mut copy: Vec<(String, Table)> = self
            .tables
            .read()
            .iter()
            .map(|(name, t)| (name.clone(), t.clone()))
            .collect();
        copy.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, table) in copy {
            let (mut page, mut bytes, mut sent) = (Vec::new(), 0, false);
            for (k, v) in table {
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
