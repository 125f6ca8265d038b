//! The performance baseline: WiredTiger measured directly, and through [`Engine`].
//!
//! `raw_*` drive WiredTiger through the crate's one-to-one FFI wrappers (no trait, no
//! per-thread session lookup, no batch allocation), with the engine's default connection
//! configuration (log on, no fsync). `engine_*` do the same work through
//! [`WiredTigerEngine`], so the ratio between the two is the cost of this layer.
//!
//! Each function opens its own database in `dir` (which should be empty), loads or writes
//! its data, and returns operations per second for the timed phase only (not open, load,
//! or close). Figures are printed by `examples/rawbench.rs`; tests never assert timings.

use std::path::Path;
use std::time::Instant;

use crate::wt::{Code, Connection, Cursor, Session};
use crate::{Engine, WiredTigerEngine, WriteBatch, WtOptions};

/// Cache size for every benchmark connection, raw and engine alike.
pub const BENCH_CACHE_MB: usize = 512;

const TABLE: &str = "bench";
const RAW_URI: &str = "table:bench";

/// Inserts `docs` rows of `value_size` bytes with 16-byte ascending keys, one transaction
/// per `batch` rows. Returns rows per second.
pub fn raw_insert(dir: &Path, docs: usize, value_size: usize, batch: usize) -> f64 {
    let raw = RawDb::open(dir);
    let (mut session, mut cursor) = raw.session_and_cursor();
    let value = vec![0x5au8; value_size];
    let start = Instant::now();
    raw_load(&mut session, &mut cursor, docs, &value, batch);
    let rate = docs as f64 / start.elapsed().as_secs_f64();
    drop(cursor);
    drop(session);
    rate
}

/// [`raw_insert`] from `threads` threads at once, each with its own session and cursor on
/// the one connection, inserting every `threads`-th batch (disjoint keys): what raw
/// WiredTiger does with every core, the fair baseline for a router path that uses them
/// all. Returns rows per second.
pub fn raw_insert_threads(
    dir: &Path,
    docs: usize,
    value_size: usize,
    batch: usize,
    threads: usize,
) -> f64 {
    let raw = RawDb::open(dir);
    // Create the table once before the clock; each thread then opens its own session.
    // (A cursor must close before its session.)
    let (session, cursor) = raw.session_and_cursor();
    drop(cursor);
    drop(session);
    let value = vec![0x5au8; value_size];
    let batch = batch.max(1);
    let threads = threads.max(1);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (raw, value) = (&raw, &value);
            scope.spawn(move || {
                let (mut session, mut cursor) = raw.session_and_cursor();
                let mut first = t * batch;
                while first < docs {
                    let end = (first + batch).min(docs);
                    raw_load_range(&mut session, &mut cursor, first..end, value);
                    first += threads * batch;
                }
            });
        }
    });
    docs as f64 / start.elapsed().as_secs_f64()
}

/// Loads `rows` rows, then times `lookups` point searches of random present keys.
/// Returns lookups per second.
pub fn raw_point_get(dir: &Path, rows: usize, value_size: usize, lookups: usize) -> f64 {
    let raw = RawDb::open(dir);
    let (mut session, mut cursor) = raw.session_and_cursor();
    raw_load(
        &mut session,
        &mut cursor,
        rows,
        &vec![0x5au8; value_size],
        1000,
    );
    let mut rng = crate::xorshift::Rng::new(0x9e3779b97f4a7c15);
    let mut checksum = 0usize;
    let start = Instant::now();
    for _ in 0..lookups {
        let k = key(rng.next() as usize % rows);
        loop {
            match cursor.search(&k) {
                Ok(v) => {
                    // Touch the value as a caller would, so the read isn't optimized away.
                    checksum += v.expect("loaded key is missing").len();
                    break;
                }
                Err(Code::ROLLBACK) => continue,
                Err(e) => panic!("search: {}", e.message()),
            }
        }
        cursor.reset().expect("reset");
    }
    let rate = lookups as f64 / start.elapsed().as_secs_f64();
    assert_eq!(checksum, lookups * value_size);
    rate
}

/// [`raw_insert`] through the trait: one `WriteBatch` of `Put`s per transaction, built
/// inside the timed loop as a caller would.
pub fn engine_insert(dir: &Path, docs: usize, value_size: usize, batch: usize) -> f64 {
    let engine = bench_engine(dir);
    let value = vec![0x5au8; value_size];
    let start = Instant::now();
    engine_load(&engine, docs, &value, batch);
    docs as f64 / start.elapsed().as_secs_f64()
}

/// [`raw_point_get`] through the trait.
pub fn engine_point_get(dir: &Path, rows: usize, value_size: usize, lookups: usize) -> f64 {
    let engine = bench_engine(dir);
    engine_load(&engine, rows, &vec![0x5au8; value_size], 1000);
    let mut rng = crate::xorshift::Rng::new(0x9e3779b97f4a7c15);
    let mut checksum = 0usize;
    let start = Instant::now();
    for _ in 0..lookups {
        let k = key(rng.next() as usize % rows);
        checksum += engine
            .get(TABLE, &k)
            .expect("get")
            .expect("loaded key is missing")
            .len();
    }
    let rate = lookups as f64 / start.elapsed().as_secs_f64();
    assert_eq!(checksum, lookups * value_size);
    rate
}

// --- helpers ----------------------------------------------------------------------------

/// 16-byte keys: 8 zero bytes (a stand-in for a collection prefix) + big-endian index.
fn key(i: usize) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[8..].copy_from_slice(&(i as u64).to_be_bytes());
    k
}

fn bench_options() -> WtOptions {
    WtOptions {
        cache_mb: BENCH_CACHE_MB,
        ..WtOptions::default()
    }
}

fn bench_engine(dir: &Path) -> WiredTigerEngine {
    // No background checkpoints: the raw side has none either.
    let engine =
        WiredTigerEngine::open_with_interval(dir, bench_options(), None).expect("open engine");
    engine.create_table(TABLE).expect("create table");
    engine
}

fn engine_load(engine: &WiredTigerEngine, docs: usize, value: &[u8], batch: usize) {
    let mut i = 0;
    while i < docs {
        let end = (i + batch.max(1)).min(docs);
        let mut b = WriteBatch {
            ops: Vec::with_capacity(end - i),
            events: Vec::new(),
        };
        for n in i..end {
            b.put(TABLE, key(n).to_vec(), value.to_vec());
        }
        engine.write(&b).expect("write");
        i = end;
    }
}

struct RawDb {
    // Field order: nothing else here, but sessions made from it must drop first, which
    // the callers above do explicitly.
    conn: Connection,
}

impl RawDb {
    fn open(dir: &Path) -> RawDb {
        std::fs::create_dir_all(dir).expect("create bench dir");
        let conn =
            Connection::open(dir, &bench_options().config_string()).expect("wiredtiger_open");
        RawDb { conn }
    }

    fn session_and_cursor(&self) -> (Session, Cursor) {
        let mut s = self
            .conn
            .open_session("isolation=snapshot")
            .expect("open_session");
        s.create(RAW_URI, "key_format=u,value_format=u")
            .expect("create");
        let c = s.open_cursor(RAW_URI, None).expect("open_cursor");
        (s, c)
    }
}

fn raw_load(session: &mut Session, cursor: &mut Cursor, docs: usize, value: &[u8], batch: usize) {
    let mut i = 0;
    while i < docs {
        let end = (i + batch.max(1)).min(docs);
        raw_load_range(session, cursor, i..end, value);
        i = end;
    }
}

/// Inserts rows `range` in one transaction, retried whole on WT_ROLLBACK, as any
/// WiredTiger writer must.
fn raw_load_range(
    session: &mut Session,
    cursor: &mut Cursor,
    range: std::ops::Range<usize>,
    value: &[u8],
) {
    'txn: loop {
        session.begin().expect("begin");
        for n in range.clone() {
            match cursor.insert(&key(n), value) {
                Ok(()) => {}
                Err(Code::ROLLBACK) => {
                    session.rollback().expect("rollback");
                    continue 'txn;
                }
                Err(e) => panic!("insert: {}", e.message()),
            }
        }
        match session.commit() {
            Ok(()) => return,
            Err(Code::ROLLBACK) => continue,
            Err(e) => panic!("commit: {}", e.message()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs every benchmark on tiny inputs so they keep working; no timing is checked.
    #[test]
    fn benches_run() {
        for f in [raw_insert, engine_insert] {
            let dir = tempfile::tempdir().unwrap();
            assert!(f(dir.path(), 1000, 100, 10) > 0.0);
        }
        // Threaded: every row lands once, whatever the threads' interleaving.
        let dir = tempfile::tempdir().unwrap();
        assert!(raw_insert_threads(dir.path(), 1005, 100, 10, 3) > 0.0);
        let raw = RawDb::open(dir.path());
        let (session, mut cursor) = raw.session_and_cursor();
        let mut rows = Vec::new();
        while cursor.next().unwrap() {
            rows.push(cursor.key().unwrap().to_vec());
        }
        drop(cursor);
        drop(session);
        let expected: Vec<Vec<u8>> = (0..1005).map(|n| key(n).to_vec()).collect();
        assert_eq!(rows, expected);
        for f in [raw_point_get, engine_point_get] {
            let dir = tempfile::tempdir().unwrap();
            assert!(f(dir.path(), 1000, 100, 1000) > 0.0);
        }
    }
}
