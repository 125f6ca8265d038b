//! A blocking sort that spills to disk (`find`, and an aggregation's `$sort`, with
//! `allowDiskUse`), as MongoDB's external sorter does: past the stage's memory limit the documents read so far are sorted and
//! written out as a run, and the output merges the runs. Run files are anonymous
//! temporary files (unlinked when created), so neither a crash nor a dropped cursor
//! leaves one behind.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, BufWriter, Seek, SeekFrom, Write};

use bson::Document;
use query::memory::{MemoryBudget, BLOCKING_STAGE_BYTES};
use query::sort::SortSpec;
use storage::Engine;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::cursor::{CursorSource, Deadline};

fn in_order(docs: Vec<Document>, spec: Option<&SortSpec>) -> Vec<Document> {
    match spec {
        Some(spec) => spec.sort_stable(docs),
        None => docs,
    }
}

/// Sorted documents: all in memory, or merged from runs on disk.
pub enum Sorted {
    Memory(VecDeque<Document>),
    Merged(Vec<Run>),
}

impl Sorted {
    pub fn is_empty(&self) -> bool {
        match self {
            Sorted::Memory(docs) => docs.is_empty(),
            Sorted::Merged(runs) => runs.iter().all(|r| r.head.is_none()),
        }
    }

    /// The next document in `spec`'s order.
    pub fn next(&mut self, spec: Option<&SortSpec>) -> MongoResult<Option<Document>> {
        match self {
            Sorted::Memory(docs) => Ok(docs.pop_front()),
            Sorted::Merged(runs) => {
                let mut best: Option<usize> = None;
                for (i, run) in runs.iter().enumerate() {
                    let Some(head) = &run.head else { continue };
                    let better = match (best, spec) {
                        (None, _) => true,
                        (Some(b), Some(spec)) => {
                            let current = runs[b].head.as_ref().expect("a run with a head");
                            spec.compare(head, current).is_lt()
                        }
                        (Some(_), None) => false,
                    };
                    if better {
                        best = Some(i);
                    }
                }
                match best {
                    None => Ok(None),
                    Some(i) => runs[i].advance(),
                }
            }
        }
    }
}

/// One sorted run on disk, read back one document at a time.
pub struct Run {
    reader: BufReader<File>,
    left: usize,
    head: Option<Document>,
}

impl Run {
    /// Returns the current head and reads the next.
    fn advance(&mut self) -> MongoResult<Option<Document>> {
        let next = if self.left == 0 {
            None
        } else {
            self.left -= 1;
            Some(
                Document::from_reader(&mut self.reader)
                    .map_err(|e| MongoError::internal(format!("reading back a sort run: {e}")))?,
            )
        };
        Ok(std::mem::replace(&mut self.head, next))
    }
}

/// Collects a blocking sort's input within its memory budget (MongoDB's 100 MB); with
/// `allowDiskUse`, what is held goes to disk as a sorted run each time the budget is
/// reached, and without it the sort fails as MongoDB's does.
pub struct ExternalSort {
    buffer: Vec<Document>,
    runs: Vec<Run>,
    budget: MemoryBudget,
    stage: &'static str,
    allow_disk_use: bool,
    limit: usize,
}

impl ExternalSort {
    /// `stage` names the sort in errors ("Sort", "$sort").
    pub fn new(stage: &'static str, allow_disk_use: bool) -> ExternalSort {
        ExternalSort::with_limit(stage, allow_disk_use, BLOCKING_STAGE_BYTES)
    }

    pub fn with_limit(stage: &'static str, allow_disk_use: bool, limit: usize) -> ExternalSort {
        ExternalSort {
            buffer: Vec::new(),
            runs: Vec::new(),
            budget: MemoryBudget::with_limit(stage, allow_disk_use, limit),
            stage,
            allow_disk_use,
            limit,
        }
    }

    /// Adds a document, spilling what is held first when it would pass the budget.
    pub fn push(&mut self, d: Document, spec: Option<&SortSpec>) -> MongoResult<()> {
        if let Err(e) = self.budget.hold(&d) {
            if !self.allow_disk_use {
                return Err(e);
            }
            self.spill(spec)?;
            self.budget = MemoryBudget::with_limit(self.stage, true, self.limit);
            self.budget.hold(&d)?;
        }
        self.buffer.push(d);
        Ok(())
    }

    /// What the sort holds in memory: all it read, or nothing once it spilled (the
    /// merge holds one document per run).
    pub fn held_bytes(&self) -> usize {
        if self.runs.is_empty() {
            self.budget.used()
        } else {
            0
        }
    }

    /// Sorts what is held and writes it out as a run.
    fn spill(&mut self, spec: Option<&SortSpec>) -> MongoResult<()> {
        let docs = in_order(std::mem::take(&mut self.buffer), spec);
        let file = tempfile::tempfile().map_err(io_error)?;
        let mut w = BufWriter::new(file);
        for d in &docs {
            d.to_writer(&mut w)
                .map_err(|e| MongoError::internal(format!("writing a sort run: {e}")))?;
        }
        w.flush().map_err(io_error)?;
        let mut file = w.into_inner().map_err(|e| io_error(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io_error)?;
        let mut run = Run {
            reader: BufReader::new(file),
            left: docs.len(),
            head: None,
        };
        run.advance()?;
        self.runs.push(run);
        Ok(())
    }

    /// Every document in `spec`'s order: from memory when nothing spilled, otherwise
    /// merged from the runs (what was still held is spilled as the last).
    pub fn finish(mut self, spec: Option<&SortSpec>) -> MongoResult<Sorted> {
        if self.runs.is_empty() {
            return Ok(Sorted::Memory(in_order(self.buffer, spec).into()));
        }
        if !self.buffer.is_empty() {
            self.spill(spec)?;
        }
        Ok(Sorted::Merged(self.runs))
    }
}

/// A finished sort as a cursor's source (an aggregation's `$sort` that spilled).
pub struct SortedSource {
    pub sorted: Sorted,
    pub spec: SortSpec,
}

impl CursorSource for SortedSource {
    fn next_batch(
        &mut self,
        _: &dyn Engine,
        max_docs: usize,
        deadline: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        let mut out = Vec::new();
        while out.len() < max_docs {
            deadline.check()?;
            match self.sorted.next(Some(&self.spec))? {
                Some(d) => out.push(d),
                None => break,
            }
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.sorted.is_empty()
    }
}

/// Everything `source` has left, sorted by `spec` within MongoDB's budget for a blocking
/// sort, spilling to disk with `allow_disk_use`.
pub fn sort_all(
    source: &mut dyn CursorSource,
    engine: &dyn Engine,
    deadline: &Deadline,
    spec: &SortSpec,
    allow_disk_use: bool,
) -> MongoResult<Sorted> {
    let mut sorter = ExternalSort::new("$sort", allow_disk_use);
    loop {
        let batch = source.next_batch(engine, 1024, deadline)?;
        let done = batch.is_empty() || source.exhausted();
        for d in batch {
            sorter.push(d, Some(spec))?;
        }
        if done {
            return sorter.finish(Some(spec));
        }
    }
}

fn io_error(e: std::io::Error) -> MongoError {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        return MongoError::new(
            ErrorCode::OutOfDiskSpace,
            format!("spilling a sort to disk: {e}"),
        );
    }
    MongoError::internal(format!("spilling a sort to disk: {e}"))
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn runs_merge_into_the_order_of_an_in_memory_sort() {
        let spec = SortSpec::new(&doc! {"k": -1, "_id": 1}).unwrap();
        let docs: Vec<Document> = (0..1000)
            .map(|i| doc! {"_id": i, "k": (i * 7919) % 113})
            .collect();
        // About 40 documents a run.
        let mut sorter = ExternalSort::with_limit("Sort", true, 1000);
        for d in &docs {
            sorter.push(d.clone(), Some(&spec)).unwrap();
        }
        assert_eq!(sorter.held_bytes(), 0, "it spilled");
        let mut sorted = sorter.finish(Some(&spec)).unwrap();
        assert!(matches!(&sorted, Sorted::Merged(runs) if runs.len() > 10));
        let mut out = Vec::new();
        while let Some(d) = sorted.next(Some(&spec)).unwrap() {
            out.push(d);
        }
        let mut expected = docs;
        expected.sort_by(|a, b| spec.compare(a, b));
        assert_eq!(out, expected);
    }

    #[test]
    fn without_allow_disk_use_the_budget_is_the_limit() {
        let mut sorter = ExternalSort::with_limit("Sort", false, 100);
        let e = (0..10)
            .map(|i| sorter.push(doc! {"_id": i, "s": "0123456789"}, None))
            .find_map(Result::err)
            .expect("past the limit");
        assert_eq!(
            e.code,
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed as i32
        );
    }

    #[test]
    fn nothing_spilled_stays_in_memory() {
        let spec = SortSpec::new(&doc! {"_id": 1}).unwrap();
        let mut sorter = ExternalSort::new("Sort", true);
        sorter.push(doc! {"_id": 2}, Some(&spec)).unwrap();
        sorter.push(doc! {"_id": 1}, Some(&spec)).unwrap();
        let sorted = sorter.finish(Some(&spec)).unwrap();
        assert!(matches!(&sorted, Sorted::Memory(d) if d[0] == doc! {"_id": 1}));
    }
}
