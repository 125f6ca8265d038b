//! Cursors: the query executor (`FindCursor`), materialised results, and the table of
//! open cursors that `getMore` and `killCursors` use. Idle cursors time out.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::Document;
use query::matcher::Matcher;
use query::memory::approx_size;
use query::projection::Projection;
use query::sort::SortSpec;
use storage::Engine;
use wire::{ErrorCode, MongoError, MongoResult};

use super::scan::Scan;
use super::spill::{DiskUse, ExternalSort, Sorted};
use crate::catalog::CollectionMeta;
use crate::control::deadline::Deadline;

/// Largest reply batch in bytes (MongoDB leaves room for the reply envelope under 16 MiB).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024 - 16 * 1024;
/// Documents in a first batch when the client does not say (MongoDB's default).
pub const DEFAULT_FIRST_BATCH: usize = 101;

/// Anything a cursor can draw batches from.
pub trait CursorSource: Send {
    /// Up to `max_docs` more documents; an empty result with `exhausted()` means done.
    fn next_batch(
        &mut self,
        engine: &dyn Engine,
        max_docs: usize,
        deadline: &Deadline,
    ) -> MongoResult<Vec<Document>>;
    fn exhausted(&self) -> bool;
    /// About how much memory the cursor holds between batches (results computed ahead).
    fn held_bytes(&self) -> usize {
        0
    }
    /// A `getMore` of a tailable awaitData cursor (a change stream's) may wait up to
    /// `max` (its `maxTimeMS`) for results, or, `on_progress`, until it has read further;
    /// other cursors never wait.
    fn await_data(&mut self, _max: Option<std::time::Duration>, _on_progress: bool) {}
    /// A change stream's `postBatchResumeToken` after the batch just drawn.
    fn post_batch_resume_token(&self) -> Option<Document> {
        None
    }
}

/// A snapshot read's or a transaction's cursor: every batch, the first and each
/// `getMore`'s, reads through the view it opened with, whatever engine the caller passes.
pub struct AtTime {
    pub source: Box<dyn CursorSource>,
    pub engine: std::sync::Arc<dyn Engine>,
    /// The transaction whose cursor this is: it serves nothing once that ends.
    pub txn: Option<std::sync::Arc<crate::sessions::txn::Txn>>,
}

impl CursorSource for AtTime {
    fn next_batch(
        &mut self,
        _engine: &dyn Engine,
        max_docs: usize,
        deadline: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        if let Some(txn) = &self.txn {
            txn.check_open()?;
        }
        self.source
            .next_batch(self.engine.as_ref(), max_docs, deadline)
    }

    fn exhausted(&self) -> bool {
        self.source.exhausted()
    }

    fn held_bytes(&self) -> usize {
        self.source.held_bytes()
    }
}

/// Already computed results (aggregation, listCollections, ...), with about how many
/// bytes they still hold.
pub struct Materialized {
    docs: VecDeque<Document>,
    bytes: usize,
}

impl Materialized {
    pub fn new(docs: VecDeque<Document>) -> Materialized {
        let bytes = docs.iter().map(approx_size).sum();
        Materialized { docs, bytes }
    }
}

impl CursorSource for Materialized {
    fn next_batch(
        &mut self,
        _: &dyn Engine,
        max_docs: usize,
        _: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        let n = max_docs.min(self.docs.len());
        let batch: Vec<Document> = self.docs.drain(..n).collect();
        let sent: usize = batch.iter().map(approx_size).sum();
        self.bytes = self.bytes.saturating_sub(sent);
        Ok(batch)
    }

    fn exhausted(&self) -> bool {
        self.docs.is_empty()
    }

    fn held_bytes(&self) -> usize {
        self.bytes
    }
}

/// Documents an in-memory sort reads between checks of its memory.
const SORT_READ_BATCH: usize = 256;

/// A `find`: scan, filter, (blocking) sort, skip, limit, project.
pub struct FindCursor {
    pub scan: Scan,
    pub matcher: Matcher,
    pub projection: Option<Projection>,
    pub skip: u64,
    pub remaining: Option<u64>,
    /// A sort the access path does not provide; results are sorted on first use, in
    /// memory or, with `allowDiskUse` past the limit, merged from runs on disk.
    pub sort: Option<SortSpec>,
    sorted: Option<Sorted>,
    pending: VecDeque<Document>,
    scan_done: bool,
    pub returned: u64,
    /// The command's `allowDiskUse` (the sort spills to disk past its memory limit) and
    /// where to.
    pub disk: DiskUse,
    /// What the sort holds in memory (until the cursor ends).
    sorted_bytes: usize,
}

impl FindCursor {
    pub fn new(
        scan: Scan,
        matcher: Matcher,
        projection: Option<Projection>,
        skip: u64,
        limit: Option<u64>,
        sort: Option<SortSpec>,
    ) -> Self {
        FindCursor {
            scan,
            matcher,
            projection,
            skip,
            remaining: limit,
            sort,
            sorted: None,
            pending: VecDeque::new(),
            scan_done: false,
            returned: 0,
            disk: DiskUse::default(),
            sorted_bytes: 0,
        }
    }

    fn project(&self, d: Document) -> MongoResult<Document> {
        match &self.projection {
            Some(p) => {
                if p.requires_match_position() {
                    let pos = self.matcher.matches_with_position(&d).flatten();
                    p.apply_with_position(&d, pos)
                } else {
                    p.apply(&d)
                }
            }
            None => Ok(d),
        }
    }

    /// Pulls matching documents (before projection) into `pending` until `want` are there.
    fn fill(&mut self, engine: &dyn Engine, want: usize, deadline: &Deadline) -> MongoResult<()> {
        while self.pending.len() < want && !self.scan_done {
            deadline.check()?;
            match self.scan.next_page(engine)? {
                None => self.scan_done = true,
                Some(page) => {
                    for (_, d) in page {
                        // `$expr` errors (an undefined variable, a bad operand) fail the
                        // operation, as in MongoDB, rather than silently not matching.
                        if self.matcher.matches_checked(&d)? {
                            self.pending.push_back(d);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn sort_all(&mut self, engine: &dyn Engine, deadline: &Deadline) -> MongoResult<()> {
        if self.sort.is_none() || self.sorted.is_some() {
            return Ok(());
        }
        // Held within MongoDB's 100 MB for a blocking sort, counted as it is read; with
        // `allowDiskUse` what is held goes to disk as a sorted run instead.
        // With a limit only the first skip + limit in order are kept (MongoDB's top-k sort).
        let top = self
            .remaining
            .map(|l| usize::try_from(l.saturating_add(self.skip)).unwrap_or(usize::MAX));
        let mut sorter = ExternalSort::new("Sort", &self.disk, top);
        loop {
            self.fill(engine, SORT_READ_BATCH, deadline)?;
            if self.pending.is_empty() {
                break;
            }
            for d in self.pending.drain(..) {
                sorter.push(d, self.sort.as_ref())?;
            }
        }
        self.sorted_bytes = sorter.held_bytes();
        self.sorted = Some(sorter.finish(self.sort.as_ref())?);
        Ok(())
    }
}

impl CursorSource for FindCursor {
    fn next_batch(
        &mut self,
        engine: &dyn Engine,
        max_docs: usize,
        deadline: &Deadline,
    ) -> MongoResult<Vec<Document>> {
        self.sort_all(engine, deadline)?;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while out.len() < max_docs && self.remaining != Some(0) {
            let next = match &mut self.sorted {
                Some(sorted) => sorted.next(self.sort.as_ref())?,
                None => {
                    if self.pending.is_empty() {
                        self.fill(engine, 1, deadline)?;
                    }
                    self.pending.pop_front()
                }
            };
            let Some(d) = next else { break };
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            let d = self.project(d)?;
            bytes += d.iter().map(|(k, _)| k.len() + 8).sum::<usize>();
            if let Some(r) = &mut self.remaining {
                *r -= 1;
            }
            self.returned += 1;
            out.push(d);
            if bytes >= MAX_BATCH_BYTES {
                break;
            }
        }
        Ok(out)
    }

    fn held_bytes(&self) -> usize {
        self.sorted_bytes
    }

    fn exhausted(&self) -> bool {
        if self.remaining == Some(0) {
            return true;
        }
        match &self.sorted {
            Some(s) => s.is_empty(),
            None => self.scan_done && self.pending.is_empty(),
        }
    }
}

struct Parked {
    ns: String,
    source: Box<dyn CursorSource>,
    last_used: Instant,
}

/// Most cursors a member keeps open at once.
pub const MAX_OPEN_CURSORS: usize = 10_000;
/// Most memory a member's open cursors may hold between batches (computed results).
pub const MAX_HELD_BYTES: usize = 1 << 30;

/// Open cursors by id. A cursor is taken out while a getMore runs on it.
pub struct Cursors {
    open: Mutex<HashMap<i64, Parked>>,
    pub idle_timeout: Duration,
    limits: (usize, usize),
}

impl Cursors {
    pub fn new(idle_timeout: Duration) -> Arc<Cursors> {
        Cursors::with_limits(idle_timeout, MAX_OPEN_CURSORS, MAX_HELD_BYTES)
    }

    pub fn with_limits(idle_timeout: Duration, count: usize, bytes: usize) -> Arc<Cursors> {
        Arc::new(Cursors {
            open: Mutex::new(HashMap::new()),
            idle_timeout,
            limits: (count, bytes),
        })
    }

    /// Parks a cursor between batches. A new cursor (not one a getMore is returning) is
    /// refused when the member already keeps `MAX_OPEN_CURSORS` or their results would
    /// pass `MAX_HELD_BYTES`: ExceededMemoryLimit (146), rather than a member that runs
    /// out of memory for clients that open cursors and never read them.
    pub fn park(
        &self,
        id: i64,
        ns: String,
        source: Box<dyn CursorSource>,
        new: bool,
    ) -> MongoResult<()> {
        let mut open = self.open.lock();
        if new {
            let (count, bytes) = self.limits;
            if open.len() >= count {
                return Err(too_many(format!(
                    "this member keeps {count} open cursors, its limit: close cursors or let idle ones time out"
                )));
            }
            let held: usize = open.values().map(|p| p.source.held_bytes()).sum();
            if held.saturating_add(source.held_bytes()) > bytes {
                return Err(too_many(format!(
                    "open cursors would hold more than {bytes} bytes of results on this member"
                )));
            }
        }
        open.insert(
            id,
            Parked {
                ns,
                source,
                last_used: Instant::now(),
            },
        );
        Ok(())
    }

    pub fn new_id() -> i64 {
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 {
                return id;
            }
        }
    }

    pub fn take(&self, id: i64, ns: &str) -> MongoResult<Box<dyn CursorSource>> {
        let mut open = self.open.lock();
        match open.get(&id) {
            Some(p) if p.ns != ns => Err(MongoError::new(
                ErrorCode::Unauthorized,
                format!("Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}", p.ns),
            )),
            Some(_) => Ok(open.remove(&id).unwrap().source),
            None => Err(MongoError::new(ErrorCode::CursorNotFound, format!("cursor id {id} not found"))),
        }
    }

    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().remove(&id).is_some()
    }

    /// Closes cursors idle longer than the timeout; returns how many.
    pub fn reap(&self) -> usize {
        let now = Instant::now();
        let mut open = self.open.lock();
        let before = open.len();
        open.retain(|_, p| now.duration_since(p.last_used) < self.idle_timeout);
        before - open.len()
    }

    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn too_many(message: String) -> MongoError {
    MongoError::new(ErrorCode::ExceededMemoryLimit, message)
}

/// Keeps `CollectionMeta` alive for the life of a cursor even if the collection is dropped.
pub type MetaRef = Arc<CollectionMeta>;

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn idle_cursors_time_out_and_then_are_not_found() {
        let cursors = Cursors::new(Duration::from_millis(0));
        let id = Cursors::new_id();
        cursors
            .park(
                id,
                "db.c".into(),
                Box::new(Materialized::new(VecDeque::from(vec![doc! {"a": 1}]))),
                true,
            )
            .unwrap();
        assert_eq!(cursors.reap(), 1);
        let err = cursors
            .take(id, "db.c")
            .err()
            .expect("reaped cursor is gone");
        assert_eq!(err.code, ErrorCode::CursorNotFound as i32);
    }

    #[test]
    fn a_cursor_is_bound_to_its_namespace() {
        let cursors = Cursors::new(Duration::from_secs(600));
        let empty = || Box::new(Materialized::new(VecDeque::new()));
        cursors.park(7, "db.c".into(), empty(), true).unwrap();
        assert!(cursors.take(7, "db.other").is_err());
        assert!(cursors.take(7, "db.c").is_ok());
        assert_eq!(cursors.reap(), 0);
    }

    #[test]
    fn new_cursors_past_the_limits_are_refused_and_returning_ones_are_not() {
        let cursors = Cursors::with_limits(Duration::from_secs(600), 2, 1000);
        let docs = |n: usize| {
            let d = doc! {"s": "x".repeat(100)};
            Box::new(Materialized::new(vec![d; n].into()))
        };
        cursors.park(1, "db.c".into(), docs(5), true).unwrap();
        // Five more documents would hold over 1000 bytes.
        let e = cursors.park(2, "db.c".into(), docs(5), true).unwrap_err();
        assert_eq!(e.code, ErrorCode::ExceededMemoryLimit as i32);
        cursors.park(2, "db.c".into(), docs(1), true).unwrap();
        let e = cursors.park(3, "db.c".into(), docs(0), true).unwrap_err();
        assert!(e.message.contains("open cursors"), "{}", e.message);
        // A getMore puts its cursor back whatever the others hold.
        let back = cursors.take(1, "db.c").unwrap();
        cursors.park(9, "db.c".into(), docs(9), false).unwrap();
        cursors.park(1, "db.c".into(), back, false).unwrap();
        assert_eq!(cursors.len(), 3);
    }
}
