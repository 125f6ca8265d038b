//! A blocking sort that spills to disk (`find` with `allowDiskUse`), as MongoDB's external
//! sorter does: past the stage's memory limit the documents read so far are sorted and
//! written out as a run, and the output merges the runs. Run files are anonymous
//! temporary files (unlinked when created), so neither a crash nor a dropped cursor
//! leaves one behind.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, BufWriter, Seek, SeekFrom, Write};

use bson::Document;
use query::sort::SortSpec;
use wire::{ErrorCode, MongoError, MongoResult};

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

/// Collects documents, spilling sorted runs to disk when told to.
#[derive(Default)]
pub struct ExternalSort {
    buffer: Vec<Document>,
    runs: Vec<Run>,
}

impl ExternalSort {
    pub fn push(&mut self, d: Document) {
        self.buffer.push(d);
    }

    /// Whether anything went to disk.
    pub fn spilled(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Sorts what is held and writes it out as a run.
    pub fn spill(&mut self, spec: Option<&SortSpec>) -> MongoResult<()> {
        let mut docs = std::mem::take(&mut self.buffer);
        if let Some(spec) = spec {
            docs.sort_by(|a, b| spec.compare(a, b));
        }
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
            if let Some(spec) = spec {
                self.buffer.sort_by(|a, b| spec.compare(a, b));
            }
            return Ok(Sorted::Memory(self.buffer.into()));
        }
        if !self.buffer.is_empty() {
            self.spill(spec)?;
        }
        Ok(Sorted::Merged(self.runs))
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
        let mut sorter = ExternalSort::default();
        for (n, d) in docs.iter().enumerate() {
            sorter.push(d.clone());
            if n % 97 == 96 {
                sorter.spill(Some(&spec)).unwrap();
            }
        }
        assert!(sorter.spilled());
        let mut sorted = sorter.finish(Some(&spec)).unwrap();
        let mut out = Vec::new();
        while let Some(d) = sorted.next(Some(&spec)).unwrap() {
            out.push(d);
        }
        let mut expected = docs;
        expected.sort_by(|a, b| spec.compare(a, b));
        assert_eq!(out, expected);
    }

    #[test]
    fn nothing_spilled_stays_in_memory() {
        let mut sorter = ExternalSort::default();
        sorter.push(doc! {"_id": 2});
        sorter.push(doc! {"_id": 1});
        let spec = SortSpec::new(&doc! {"_id": 1}).unwrap();
        let sorted = sorter.finish(Some(&spec)).unwrap();
        assert!(matches!(&sorted, Sorted::Memory(d) if d[0] == doc! {"_id": 1}));
    }
}
