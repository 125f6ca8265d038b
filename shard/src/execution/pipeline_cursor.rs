//! An aggregation's leading streaming stages over a collection scan (or over a `$sort`
//! that spilled to disk), as a cursor: each
//! batch is read, transformed and returned, so a pipeline without blocking stages holds
//! one batch however large the collection (`query::agg::Stream`). And the bounded drain
//! that feeds a blocking stage its whole input.

use std::collections::VecDeque;

use bson::Document;
use query::agg::Stream;
use query::memory::{approx_size, MemoryBudget};
use storage::Engine;
use wire::MongoResult;

use super::cursor::{CursorSource, MAX_BATCH_BYTES};
use crate::control::deadline::Deadline;

/// Documents read from storage per step.
const SCAN_BATCH: usize = 128;

pub struct PipelineCursor {
    /// A collection scan, or a sort's merged runs.
    scan: Box<dyn CursorSource>,
    stream: Stream,
    pending: VecDeque<Document>,
}

impl PipelineCursor {
    pub fn new(scan: Box<dyn CursorSource>, stream: Stream) -> PipelineCursor {
        PipelineCursor {
            scan,
            stream,
            pending: VecDeque::new(),
        }
    }

    fn source_done(&self) -> bool {
        self.stream.done() || self.scan.exhausted()
    }
}

impl CursorSource for PipelineCursor {
    fn next_batch(
        &mut self,
        engine: &dyn Engine,
        max_docs: usize,
        deadline: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        while self.pending.len() < max_docs && !self.source_done() {
            for d in self.scan.next_batch(engine, SCAN_BATCH, deadline)? {
                self.pending.extend(self.stream.push(d)?);
            }
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max_docs && bytes < MAX_BATCH_BYTES {
            let Some(d) = self.pending.pop_front() else {
                break;
            };
            bytes += approx_size(&d);
            out.push(d);
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.pending.is_empty() && self.source_done()
    }

    fn held_bytes(&self) -> usize {
        self.scan.held_bytes() + self.pending.iter().map(approx_size).sum::<usize>()
    }
}

/// Everything `source` has left, held within `budget` (MongoDB's 100 MB per blocking
/// stage): the input of a sort, `$group`, `$lookup`'s foreign collection, ...
pub fn drain_bounded(
    source: &mut dyn CursorSource,
    engine: &dyn Engine,
    deadline: &Deadline,
    mut budget: MemoryBudget,
) -> MongoResult<Vec<Document>> {
    let mut out = Vec::new();
    loop {
        let batch = source.next_batch(engine, 1024, deadline)?;
        let done = batch.is_empty() || source.exhausted();
        for d in batch {
            budget.hold(&d)?;
            out.push(d);
        }
        if done {
            return Ok(out);
        }
    }
}
