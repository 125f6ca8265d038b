//! A blocking sort (`find`'s, an aggregation's `$sort`) within its memory, as MongoDB's
//! sorter: with a limit it keeps only the top k; past the stage's memory limit, with
//! `allowDiskUse`, the documents read so far are sorted and written out as a run, and the
//! output merges the runs.

use std::collections::VecDeque;

use bson::Document;
use query::memory::{approx_size, MemoryBudget, BLOCKING_STAGE_BYTES};
use query::sort::SortSpec;
use storage::Engine;
use wire::MongoResult;

use super::{DiskUse, Run};
use crate::control::deadline::Deadline;
use crate::execution::cursor::CursorSource;

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

/// Collects a blocking sort's input within its memory budget (MongoDB's 100 MB); with
/// `allowDiskUse`, what is held goes to disk as a sorted run each time the budget is
/// reached, and without it the sort fails as MongoDB's does. With a `top` (a limit
/// follows), only that many documents are kept.
pub struct ExternalSort {
    buffer: Vec<Document>,
    runs: Vec<Run>,
    budget: MemoryBudget,
    stage: &'static str,
    disk: DiskUse,
    limit: usize,
    top: Option<usize>,
}

/// Documents read between two cuts of a top-k sort to its k best, at the least.
const TOP_K_SLACK: usize = 1024;

impl ExternalSort {
    /// `stage` names the sort in errors ("Sort", "$sort").
    pub fn new(stage: &'static str, disk: &DiskUse, top: Option<usize>) -> ExternalSort {
        ExternalSort::with_limit(stage, disk, top, BLOCKING_STAGE_BYTES)
    }

    pub fn with_limit(
        stage: &'static str,
        disk: &DiskUse,
        top: Option<usize>,
        limit: usize,
    ) -> ExternalSort {
        ExternalSort {
            buffer: Vec::new(),
            runs: Vec::new(),
            budget: MemoryBudget::with_limit(stage, disk.allowed, limit),
            stage,
            disk: disk.clone(),
            limit,
            top,
        }
    }

    /// Adds a document: past the budget a top-k sort first cuts to its k, then what is
    /// held spills (or, without `allowDiskUse`, the sort fails).
    pub fn push(&mut self, d: Document, spec: Option<&SortSpec>) -> MongoResult<()> {
        if let Some(k) = self.top {
            if self.buffer.len() >= k.saturating_mul(2).max(k + TOP_K_SLACK) {
                self.cut_to_top(k, spec);
            }
        }
        let Err(e) = self.budget.hold(&d) else {
            self.buffer.push(d);
            return Ok(());
        };
        if let Some(k) = self.top.filter(|&k| self.buffer.len() > k) {
            self.cut_to_top(k, spec);
            if self.budget.hold(&d).is_ok() {
                self.buffer.push(d);
                return Ok(());
            }
        }
        if !self.disk.allowed {
            return Err(e);
        }
        self.spill(spec)?;
        self.budget = self.fresh_budget();
        self.budget.hold(&d)?;
        self.buffer.push(d);
        Ok(())
    }

    fn fresh_budget(&self) -> MemoryBudget {
        MemoryBudget::with_limit(self.stage, self.disk.allowed, self.limit)
    }

    /// Keeps the `k` first of what is held, in order (ties in arrival order, as a full
    /// sort and a limit would keep), and counts them afresh. Their count may pass the
    /// budget: the next `push` then spills or fails.
    fn cut_to_top(&mut self, k: usize, spec: Option<&SortSpec>) {
        let mut kept = in_order(std::mem::take(&mut self.buffer), spec);
        kept.truncate(k);
        self.budget = self.fresh_budget();
        for d in &kept {
            let _counted_even_past_the_limit = self.budget.hold(d);
        }
        self.buffer = kept;
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

    /// Sorts what is held and writes it out as a run (its top k only, with a `top`).
    fn spill(&mut self, spec: Option<&SortSpec>) -> MongoResult<()> {
        let mut docs = in_order(std::mem::take(&mut self.buffer), spec);
        if let Some(k) = self.top {
            docs.truncate(k);
        }
        self.runs.push(Run::write(&docs, &self.disk)?);
        Ok(())
    }

    /// Every document in `spec`'s order: from memory when nothing spilled, otherwise
    /// merged from the runs (what was still held is spilled as the last).
    pub fn finish(mut self, spec: Option<&SortSpec>) -> MongoResult<Sorted> {
        if self.runs.is_empty() {
            let mut docs = in_order(self.buffer, spec);
            if let Some(k) = self.top {
                docs.truncate(k);
            }
            return Ok(Sorted::Memory(docs.into()));
        }
        if !self.buffer.is_empty() {
            self.spill(spec)?;
        }
        Ok(Sorted::Merged(self.runs))
    }
}

/// A finished sort as a cursor's source (an aggregation's `$sort`).
pub struct SortedSource {
    sorted: Sorted,
    spec: SortSpec,
    held: usize,
}

impl SortedSource {
    pub fn new(sorted: Sorted, spec: SortSpec) -> SortedSource {
        let held = match &sorted {
            Sorted::Memory(docs) => docs.iter().map(approx_size).sum(),
            Sorted::Merged(_) => 0,
        };
        SortedSource { sorted, spec, held }
    }
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

    fn held_bytes(&self) -> usize {
        self.held
    }
}

/// Everything `source` has left, sorted by `spec` within MongoDB's budget for a blocking
/// sort (the `top` k only, when a limit follows), spilling to disk with `disk.allowed`.
pub fn sort_all(
    source: &mut dyn CursorSource,
    engine: &dyn Engine,
    deadline: &Deadline,
    spec: &SortSpec,
    top: Option<usize>,
    disk: &DiskUse,
) -> MongoResult<Sorted> {
    let mut sorter = ExternalSort::new("$sort", disk, top);
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
        let mut sorter = ExternalSort::with_limit("Sort", &DiskUse::temp(), None, 1000);
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
        let mut sorter = ExternalSort::with_limit("Sort", &DiskUse::default(), None, 100);
        let e = (0..10)
            .map(|i| sorter.push(doc! {"_id": i, "s": "0123456789"}, None))
            .find_map(Result::err)
            .expect("past the limit");
        assert_eq!(
            e.code,
            wire::ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed as i32
        );
    }

    #[test]
    fn nothing_spilled_stays_in_memory() {
        let spec = SortSpec::new(&doc! {"_id": 1}).unwrap();
        let mut sorter = ExternalSort::new("Sort", &DiskUse::temp(), None);
        sorter.push(doc! {"_id": 2}, Some(&spec)).unwrap();
        sorter.push(doc! {"_id": 1}, Some(&spec)).unwrap();
        let sorted = sorter.finish(Some(&spec)).unwrap();
        assert!(matches!(&sorted, Sorted::Memory(d) if d[0] == doc! {"_id": 1}));
    }

    #[test]
    fn a_top_k_sort_holds_its_k_and_keeps_ties_in_arrival_order() {
        let spec = SortSpec::new(&doc! {"k": 1}).unwrap();
        // 100 bytes hold about three documents: without allowDiskUse only the top k fits.
        let mut sorter = ExternalSort::with_limit("Sort", &DiskUse::default(), Some(2), 100);
        for i in 0..5000 {
            sorter
                .push(doc! {"_id": i, "k": i % 7}, Some(&spec))
                .unwrap();
        }
        let mut sorted = sorter.finish(Some(&spec)).unwrap();
        let mut out = Vec::new();
        while let Some(d) = sorted.next(Some(&spec)).unwrap() {
            out.push(d);
        }
        assert_eq!(out, vec![doc! {"_id": 0, "k": 0}, doc! {"_id": 7, "k": 0}]);
    }
}
