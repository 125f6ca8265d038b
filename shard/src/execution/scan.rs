//! Executing an access path page by page. A scan keeps only a resume key between pages,
//! so a cursor holds no storage transaction or lock while the client is away.

use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bson::Document;
use query::ownership::Ownership;
use storage::{Engine, KeyRange};
use wire::MongoResult;

use super::plan::Access;
use super::write_path::decode_document;
use crate::catalog::CollectionMeta;
use crate::control::deadline::Deadline;
use crate::error::storage_to_mongo;

/// Entries read from storage per page.
pub const PAGE: usize = 256;

/// One page of a scan: record keys with their documents.
pub type Page = Vec<(Vec<u8>, Document)>;

/// Calls `f` with every row of `table` in key order (a record table's order is `_id`
/// order), reading [`PAGE`] rows at a time so that one page is in memory. The deadline
/// is checked before each page (a kill point) without yielding the read ticket: callers
/// may hold a collection lock.
pub fn each_row(
    engine: &dyn Engine,
    table: &str,
    deadline: &Deadline,
    mut f: impl FnMut(&[u8], &[u8]) -> MongoResult<()>,
) -> MongoResult<()> {
    let mut range = KeyRange::all();
    loop {
        deadline.check_holding()?;
        let page = engine
            .scan(table, &range, false, PAGE)
            .map_err(storage_to_mongo)?;
        for (k, v) in &page {
            f(k, v)?;
        }
        match page.last() {
            Some((last, _)) if page.len() == PAGE => range.start = Bound::Excluded(last.clone()),
            _ => return Ok(()),
        }
    }
}

pub struct Scan {
    table: String,
    index_table: Option<String>,
    points: VecDeque<Vec<u8>>,
    ranges: VecDeque<KeyRange>,
    reverse: bool,
    /// Record keys already returned by a multikey index scan.
    seen: Option<HashSet<Vec<u8>>>,
    /// This shard's part of a sharded collection when the scan began: documents outside
    /// it (orphans a migration left or is still copying in) are skipped.
    owner: Option<Arc<Ownership>>,
    /// The ownership the scan reads at, even one owning everything (which filters
    /// nothing): while the scan lives, the range deleter keeps what it owns.
    _reads_at: Option<Arc<Ownership>>,
    pub keys_examined: u64,
    pub docs_examined: u64,
}

impl Scan {
    pub fn new(meta: &CollectionMeta, access: &Access) -> Scan {
        let mut scan = Scan {
            table: meta.table.clone(),
            index_table: None,
            points: VecDeque::new(),
            ranges: VecDeque::new(),
            reverse: false,
            seen: None,
            owner: meta.ownership.clone().filter(|o| !o.owns_everything()),
            _reads_at: meta.ownership.clone(),
            keys_examined: 0,
            docs_examined: 0,
        };
        match access {
            Access::IdPoints(keys) => scan.points = keys.iter().cloned().collect(),
            Access::IdRange { range, reverse } => {
                scan.ranges.push_back(range.clone());
                scan.reverse = *reverse;
            }
            Access::Index { index, ranges } => {
                let index = &meta.indexes[*index];
                scan.index_table = Some(index.table.clone());
                scan.ranges = ranges.iter().cloned().collect();
                if index.multikey || ranges.len() > 1 {
                    scan.seen = Some(HashSet::new());
                }
            }
        }
        scan
    }

    /// The next page of documents (not yet filtered, but without orphans), or `None` when
    /// the scan is exhausted.
    pub fn next_page(&mut self, engine: &dyn Engine) -> MongoResult<Option<Page>> {
        let page = self.next_raw_page(engine)?;
        Ok(match (&self.owner, page) {
            (Some(owner), Some(mut page)) => {
                page.retain(|(_, d)| owner.owns(d));
                Some(page)
            }
            (_, page) => page,
        })
    }

    fn next_raw_page(&mut self, engine: &dyn Engine) -> MongoResult<Option<Page>> {
        if !self.points.is_empty() {
            let mut out = Vec::new();
            while let Some(k) = self.points.pop_front() {
                self.keys_examined += 1;
                if let Some(v) = engine.get(&self.table, &k).map_err(storage_to_mongo)? {
                    self.docs_examined += 1;
                    out.push((k, decode_document(&v)?));
                }
                if out.len() >= PAGE {
                    break;
                }
            }
            return Ok(Some(out));
        }
        loop {
            let Some(range) = self.ranges.front_mut() else {
                return Ok(None);
            };
            let table = self.index_table.as_ref().unwrap_or(&self.table);
            let page = engine
                .scan(table, range, self.reverse, PAGE)
                .map_err(storage_to_mongo)?;
            let Some((last, _)) = page.last() else {
                self.ranges.pop_front();
                continue;
            };
            // Resume after the last key on the next call.
            if self.reverse {
                range.end = Bound::Excluded(last.clone());
            } else {
                range.start = Bound::Excluded(last.clone());
            }
            if page.len() < PAGE {
                self.ranges.pop_front();
            }
            self.keys_examined += page.len() as u64;
            let mut out = Vec::with_capacity(page.len());
            if self.index_table.is_none() {
                for (k, v) in page {
                    self.docs_examined += 1;
                    out.push((k, decode_document(&v)?));
                }
            } else {
                for (_, rk) in page {
                    if let Some(seen) = &mut self.seen {
                        if !seen.insert(rk.clone()) {
                            continue;
                        }
                    }
                    if let Some(v) = engine.get(&self.table, &rk).map_err(storage_to_mongo)? {
                        self.docs_examined += 1;
                        out.push((rk, decode_document(&v)?));
                    }
                }
            }
            return Ok(Some(out));
        }
    }
}
