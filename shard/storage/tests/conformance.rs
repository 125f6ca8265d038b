//! The conformance suite against both engines, plus WiredTiger-only durability tests.

use std::path::Path;

use storage::conformance;
use storage::{
    Engine, KeyRange, Layer, MemoryEngine, TableStats, Timestamp, WiredTigerEngine, WriteBatch,
    WriteOpRef, WtOptions,
};

/// A WiredTiger engine in its own temporary directory, deleted after the engine closes.
struct TempWt {
    engine: WiredTigerEngine, // declared first: closes before the directory goes
    _dir: tempfile::TempDir,
}

fn temp_wt() -> TempWt {
    let dir = tempfile::tempdir().unwrap();
    // A subdirectory that does not exist yet: the engine must create it. Without
    // WiredTiger's log, as replica-set members run (the Raft log is their WAL), and as
    // prepared transactions need.
    let options = WtOptions {
        cache_mb: 64,
        log: false,
        ..WtOptions::default()
    };
    let engine = WiredTigerEngine::open_with(&dir.path().join("db"), options).unwrap();
    TempWt { engine, _dir: dir }
}

impl Layer for TempWt {
    fn below(&self) -> &dyn Engine {
        &self.engine
    }

    fn prepared_below(&self) -> Option<&dyn Engine> {
        Some(&self.engine)
    }

    fn write_at_layered(&self, ops: &[WriteOpRef<'_>], commit: Timestamp) -> storage::Result<()> {
        self.engine.write_refs_at(ops, commit)
    }
}

#[test]
fn memory_engine_conformance() {
    conformance::run_all(&MemoryEngine::new);
}

#[test]
fn wiredtiger_engine_conformance() {
    conformance::run_all(&temp_wt);
}

fn fill(e: &impl Engine, n: u32) {
    e.create_table("coll.a").unwrap();
    e.create_table("idx$b").unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.insert(
                "coll.a",
                i.to_be_bytes().to_vec(),
                vec![(i % 251) as u8; 200],
            );
            b.put("idx$b", format!("i{i}").into_bytes(), Vec::new());
        }
        e.write(&b).unwrap();
    }
}

fn check(e: &impl Engine, n: u32) {
    assert_eq!(
        e.list_tables().unwrap(),
        vec!["coll.a".to_string(), "idx$b".into()]
    );
    assert_eq!(
        e.stats("coll.a").unwrap(),
        TableStats {
            entries: n as u64,
            bytes: n as u64 * 204
        }
    );
    assert_eq!(e.stats("idx$b").unwrap().entries, n as u64);
    for i in [0, n / 2, n - 1] {
        assert_eq!(
            e.get("coll.a", &i.to_be_bytes()).unwrap(),
            Some(vec![(i % 251) as u8; 200])
        );
    }
    let last = e.scan("coll.a", &KeyRange::all(), true, 1).unwrap();
    assert_eq!(last[0].0, (n - 1).to_be_bytes().to_vec());
}

fn reopen_test(dir: &Path, options: WtOptions, explicit_checkpoint: bool) {
    let n = 5000;
    {
        let e = WiredTigerEngine::open_with(dir, options).unwrap();
        fill(&e, n);
        if explicit_checkpoint {
            e.checkpoint().unwrap();
        }
        // A write after the checkpoint must survive too (log replay, or the close's own
        // final checkpoint when logging is off).
        let mut b = WriteBatch::new();
        b.delete("coll.a", n.to_be_bytes().to_vec());
        e.write(&b).unwrap();
        // Use the engine from another thread too, so its session exists at close.
        std::thread::scope(|s| {
            s.spawn(|| check(&e, n));
        });
    }
    let e = WiredTigerEngine::open_with(dir, options).unwrap();
    check(&e, n);
    // And it is writable after reopening.
    let mut b = WriteBatch::new();
    b.insert("coll.a", n.to_be_bytes().to_vec(), vec![0; 200]);
    e.write(&b).unwrap();
    e.drop_table("idx$b").unwrap();
    drop(e);
    let e = WiredTigerEngine::open_with(dir, options).unwrap();
    assert_eq!(e.list_tables().unwrap(), vec!["coll.a".to_string()]);
    assert_eq!(e.stats("coll.a").unwrap().entries, n as u64 + 1);
}

#[test]
fn wiredtiger_reopen_persists_data_logged() {
    let dir = tempfile::tempdir().unwrap();
    reopen_test(dir.path(), WtOptions::default(), false);
}

#[test]
fn wiredtiger_reopen_persists_data_unlogged() {
    let dir = tempfile::tempdir().unwrap();
    let options = WtOptions {
        log: false,
        ..WtOptions::default()
    };
    reopen_test(dir.path(), options, true);
}

#[test]
fn wiredtiger_reopen_persists_data_synced() {
    let dir = tempfile::tempdir().unwrap();
    let options = WtOptions {
        sync: true,
        cache_mb: 32,
        ..WtOptions::default()
    };
    reopen_test(dir.path(), options, false);
}

/// What a restart keeps of prepared transactions (members run without WiredTiger's log,
/// so the data after a restart is the last checkpoint): nothing of one still prepared
/// when the checkpoint ran, though stable had passed its prepare time; all of one
/// committed with a durable time at or before the checkpoint's stable timestamp.
#[test]
fn wiredtiger_a_restart_keeps_committed_prepared_writes_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let options = WtOptions {
        log: false,
        cache_mb: 32,
        ..WtOptions::default()
    };
    let put = |key: &'static [u8], value: &'static [u8]| WriteOpRef::Put {
        table: "t",
        key,
        value,
    };
    {
        let e = WiredTigerEngine::open_with(&path, options).unwrap();
        e.create_table("t").unwrap();
        e.write_refs_at(&[put(b"a", b"1")], 10).unwrap();
        e.set_timestamps(10, 5).unwrap();
        e.prepare(1, &[put(b"a", b"committed")], 20).unwrap();
        e.prepare(2, &[put(b"b", b"prepared")], 21).unwrap();
        e.set_timestamps(30, 5).unwrap();
        e.commit_prepared(1, 21, 31).unwrap();
        e.set_timestamps(40, 5).unwrap();
        e.checkpoint().unwrap();
        let closed = e.close_watch();
        drop(e);
        assert!(closed.is_closed());
    }
    let e = WiredTigerEngine::open_with(&path, options).unwrap();
    assert_eq!(
        e.get("t", b"a").unwrap().as_deref(),
        Some(&b"committed"[..])
    );
    assert_eq!(e.get_at("t", b"a", 20).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(e.get("t", b"b").unwrap(), None, "a prepared write survived");
}

/// Two engines in one process, used from the same threads, stay independent (the
/// thread-local session lists are keyed by engine).
#[test]
fn wiredtiger_two_engines_one_thread() {
    let a = temp_wt();
    let b = temp_wt();
    for e in [&a, &b] {
        e.create_table("t").unwrap();
    }
    let mut w = WriteBatch::new();
    w.put("t", b"k".to_vec(), b"a".to_vec());
    a.write(&w).unwrap();
    assert_eq!(b.get("t", b"k").unwrap(), None);
    drop(a);
    // The first engine's sessions are gone; the second still works on this thread.
    b.write(&w).unwrap();
    assert_eq!(b.get("t", b"k").unwrap(), Some(b"a".to_vec()));
    let c = temp_wt();
    c.create_table("t").unwrap();
    assert_eq!(c.get("t", b"k").unwrap(), None);
}

/// Many short-lived threads: each opens a session that must be closed at thread exit,
/// or the connection would run out of sessions.
#[test]
fn wiredtiger_thread_churn_closes_sessions() {
    // More threads than the connection's session_max (1024), one after another.
    const ROUNDS: u32 = 1100;
    let e = temp_wt();
    e.create_table("t").unwrap();
    for round in 0..ROUNDS {
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut b = WriteBatch::new();
                b.put("t", round.to_be_bytes().to_vec(), b"v".to_vec());
                e.write(&b).unwrap();
            });
        });
    }
    assert_eq!(e.stats("t").unwrap().entries, ROUNDS as u64);
}

fn with_statistics(dir: &Path) -> WiredTigerEngine {
    let options = WtOptions {
        statistics: true,
        ..WtOptions::default()
    };
    WiredTigerEngine::open_with(dir, options).unwrap()
}

fn put_u32(e: &impl Engine, table: &str, key: &[u8], value: u32) {
    let mut b = WriteBatch::new();
    b.put(table, key.to_vec(), value.to_be_bytes().to_vec());
    e.write(&b).unwrap();
}

/// An export reads a checkpoint made for it, not a transaction. WiredTiger keeps every
/// version newer than the oldest running transaction's snapshot, so a transaction held
/// for a long copy would pin in the cache everything written meanwhile.
#[test]
fn wiredtiger_export_pins_no_transaction_while_writes_go_on() {
    const WRITES: u32 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let e = with_statistics(dir.path());
    e.create_table("t").unwrap();
    for i in 0..100u32 {
        put_u32(&e, "t", &i.to_be_bytes(), i);
    }
    let mut pinned = Vec::new();
    let mut held = Vec::new();
    let mut rows = 0;
    e.export(200, &mut |_, page| {
        if pinned.is_empty() {
            pinned.push(e.pinned_transaction_ids()?);
            for i in 0..WRITES {
                put_u32(&e, "t", b"hot", i);
            }
            pinned.push(e.pinned_transaction_ids()?);
            held = e.export_checkpoints()?;
            // The periodic checkpoint goes on beside the export's own.
            e.checkpoint()?;
        }
        rows += page.len();
        Ok(())
    })
    .unwrap();
    assert_eq!(rows, 100, "the export is of its instant: no \"hot\" row");
    assert_eq!(held.len(), 1, "one checkpoint for the export: {held:?}");
    assert!(
        pinned[1] < i64::from(WRITES) / 10,
        "transaction IDs pinned before and after {WRITES} writes during the export: {pinned:?}"
    );
    assert_eq!(e.export_checkpoints().unwrap(), Vec::<String>::new());
}

/// An export cut short by the process stopping leaves its checkpoint in the files; the
/// next open drops it, so its pages do not stay allocated for ever.
#[test]
fn wiredtiger_export_checkpoints_left_by_a_stopped_process_are_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let e = with_statistics(dir.path());
    e.create_table("t").unwrap();
    put_u32(&e, "t", b"k", 1);
    let cut_short = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.export(1000, &mut |_, _| panic!("the process stops mid-export"))
    }));
    assert!(cut_short.is_err());
    assert_eq!(e.export_checkpoints().unwrap().len(), 1);
    // A table whose name looks like one is not taken for one.
    e.create_table("bulwark_export_7").unwrap();
    drop(e);
    let e = with_statistics(dir.path());
    assert_eq!(e.export_checkpoints().unwrap(), Vec::<String>::new());
    assert_eq!(e.get("t", b"k").unwrap(), Some(1u32.to_be_bytes().to_vec()));
    assert!(e
        .list_tables()
        .unwrap()
        .contains(&"bulwark_export_7".to_string()));
}

/// A table dropped while an export reads it (the applier applying a drop on the member
/// that serves a snapshot) is dropped, not refused as busy (a refused drop would stop
/// that member's replication): the export's checkpoint does not hold it. The export then
/// fails, and the member copying it asks again.
#[test]
fn wiredtiger_a_drop_during_an_export_goes_through() {
    let dir = tempfile::tempdir().unwrap();
    let e = with_statistics(dir.path());
    for t in ["a", "b"] {
        e.create_table(t).unwrap();
        for i in 0..100u32 {
            put_u32(&e, t, &i.to_be_bytes(), i);
        }
    }
    let mut drops = Vec::new();
    let r = e.export(200, &mut |table, _| {
        if drops.is_empty() {
            assert_eq!(table, "a");
            drops.push(e.drop_table("a"));
            drops.push(e.drop_table("b"));
        }
        Ok(())
    });
    assert!(drops.iter().all(Result::is_ok), "{drops:?}");
    assert!(
        matches!(r, Err(storage::StorageError::NoSuchTable(_))),
        "{r:?}"
    );
    assert_eq!(e.list_tables().unwrap(), Vec::<String>::new());
    assert_eq!(e.export_checkpoints().unwrap(), Vec::<String>::new());
}
