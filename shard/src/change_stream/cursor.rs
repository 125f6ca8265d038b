//! A change stream's cursor on one member: it reads the applied log from its start
//! point, turns each entry's events into documents, runs them through the stages after
//! `$changeStream`, and waits for more on `getMore` (awaitData) up to the client's
//! `maxTimeMS`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bson::{Bson, Document};
use query::agg::Stream;
use query::change_stream::{Scope, Spec, Token};
use query::memory::approx_size;
use storage::Engine;
use wire::{ErrorCode, MongoError, MongoResult};

use super::entry_events::of_entry;
use super::event_doc::{build, in_scope, invalidate, invalidates, token};
use super::log_reader::{LogReader, TimedEntry};
use crate::control::deadline::Deadline;
use crate::execution::cursor::{CursorSource, MAX_BATCH_BYTES};

/// How long a `getMore` without `maxTimeMS` waits for events (MongoDB's default).
pub const DEFAULT_AWAIT: Duration = Duration::from_secs(1);

pub struct ChangeStreamCursor {
    reader: LogReader,
    spec: Spec,
    scope: Scope,
    stages: Stream,
    /// Events at or before it are not returned (the resume point).
    after: Token,
    /// Documents ready to return, each with its token.
    ready: VecDeque<(Token, Document)>,
    /// The token of the last document returned, or the start point.
    last: Token,
    /// The time of the newest entry read (every event of it is in `ready` or done).
    scanned: u64,
    /// An `invalidate` ended the stream: nothing after it is read.
    invalidated: bool,
    /// How long the next batch may wait for events (set by `getMore`).
    await_for: Option<Duration>,
    /// The next batch returns once the stream reads further, events or not.
    on_progress: bool,
}

impl ChangeStreamCursor {
    pub fn new(
        reader: LogReader,
        (spec, scope): (Spec, Scope),
        stages: Stream,
        after: Token,
    ) -> ChangeStreamCursor {
        let scanned = after.time.saturating_sub(1);
        ChangeStreamCursor {
            reader,
            spec,
            scope,
            stages,
            last: after.clone(),
            after,
            ready: VecDeque::new(),
            scanned,
            invalidated: false,
            await_for: None,
            on_progress: false,
        }
    }

    /// Reads one entry's events into `ready`.
    fn take(&mut self, e: &TimedEntry, engine: &dyn Engine) -> MongoResult<()> {
        for ev in of_entry(&self.reader, engine, e)? {
            if !in_scope(&self.scope, &self.spec, &ev) {
                continue;
            }
            let tok = token(e.time, &ev, false);
            if tok > self.after {
                let doc = build(&ev, e.time, &self.spec, engine)?;
                self.stage(tok, doc)?;
            }
            // A stream started after this `invalidate` (`startAfter`) goes on past it.
            let tok = token(e.time, &ev, true);
            if invalidates(&self.scope, &ev) && tok > self.after {
                self.stage(tok, invalidate(&ev, e.time))?;
                self.invalidated = true;
                return Ok(());
            }
        }
        self.scanned = e.time;
        Ok(())
    }

    /// Runs an event through the stages after `$changeStream`, which must leave its `_id`.
    fn stage(&mut self, tok: Token, doc: Document) -> MongoResult<()> {
        let id = Bson::Document(tok.to_document());
        for out in self.stages.push(doc)? {
            if out.get("_id") != Some(&id) {
                return Err(MongoError::new(
                    ErrorCode::ChangeStreamFatalError,
                    "Encountered an event whose _id field, which contains the resume token, \
                     was modified by the pipeline. Modifying the _id field of an event makes \
                     it impossible to resume the stream from that point. Only transformations \
                     that retain the unmodified _id field are allowed.",
                ));
            }
            self.ready.push_back((tok.clone(), out));
        }
        Ok(())
    }

    /// Fills `out` from what is applied now; whether the log had nothing more.
    fn fill(
        &mut self,
        engine: &dyn Engine,
        out: &mut Vec<Document>,
        max: usize,
        deadline: &Deadline,
    ) -> MongoResult<bool> {
        let mut bytes = 0;
        while out.len() < max && bytes < MAX_BATCH_BYTES {
            if let Some((tok, d)) = self.ready.pop_front() {
                bytes += approx_size(&d);
                out.push(d);
                self.last = tok;
                continue;
            }
            if self.invalidated {
                return Ok(true);
            }
            deadline.check_holding()?;
            match self.reader.next_entry()? {
                Some(e) => self.take(&e, engine)?,
                None => return Ok(true),
            }
        }
        Ok(false)
    }
}

impl CursorSource for ChangeStreamCursor {
    fn next_batch(
        &mut self,
        engine: &dyn Engine,
        max_docs: usize,
        _deadline: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        let until = Instant::now() + self.await_for.take().unwrap_or_default();
        let on_progress = std::mem::take(&mut self.on_progress);
        let scanned = self.scanned;
        // The wait is the client's await time, not a deadline to fail at.
        let reading = Deadline(None);
        let mut out = Vec::new();
        loop {
            let seen = self.reader.applied();
            let caught_up = self.fill(engine, &mut out, max_docs, &reading)?;
            let left = until.saturating_duration_since(Instant::now());
            let moved = on_progress && self.scanned > scanned;
            if !out.is_empty() || !caught_up || self.invalidated || left.is_zero() || moved {
                return Ok(out);
            }
            crate::control::ops::check_interrupted()?;
            // Short waits, so that a killed operation ends soon.
            self.reader
                .wait_past(seen, left.min(Duration::from_millis(200)));
        }
    }

    fn exhausted(&self) -> bool {
        self.invalidated && self.ready.is_empty()
    }

    fn held_bytes(&self) -> usize {
        self.ready.iter().map(|(_, d)| approx_size(d)).sum()
    }

    fn await_data(&mut self, max: Option<Duration>, on_progress: bool) {
        self.await_for = Some(max.unwrap_or(DEFAULT_AWAIT));
        self.on_progress = on_progress;
    }

    fn post_batch_resume_token(&self) -> Option<Document> {
        if !self.ready.is_empty() {
            return Some(self.last.to_document());
        }
        let mark = Token::high_water_mark(self.scanned + 1);
        Some(self.last.clone().max(mark).to_document())
    }
}
