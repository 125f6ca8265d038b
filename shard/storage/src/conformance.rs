//! The contract of [`Engine`], as a suite any implementation must pass.
//!
//! Each case takes a factory and builds its own fresh, empty engine, so cases are
//! independent. `run_all` runs every case; the crate's tests call it for both engines
//! (see `tests/conformance.rs`). Failures panic with a message naming the case.

use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::sync::mpsc;
use std::sync::Barrier;

use crate::{Engine, KeyRange, Rows, StorageError, TableStats, WriteBatch, WriteOpRef};

type Kv = (Vec<u8>, Vec<u8>);

/// Runs every case against engines made by `make`.
pub fn run_all<E: Engine>(make: &dyn Fn() -> E) {
    tables(&make());
    missing_table_errors(&make());
    get_put_delete(&make());
    ordering(&make());
    ranges(&make());
    reverse_and_limits(&make());
    prefix_scan(&make());
    atomic_batches(&make());
    failing_insert_rolls_back_batch(&make());
    borrowed_ops_write_as_owned_ones_do(&make());
    drop_and_recreate(&make());
    empty_keys_and_values(&make());
    large_values(&make());
    stats(&make());
    checkpoint(&make());
    export_is_one_instant(&make());
    concurrent_writers_distinct_tables(&make());
    concurrent_writers_same_table(&make());
    drop_while_other_threads_hold_cursors(&make());
    reads_at_a_timestamp(&make());
    oldest_and_stable_timestamps(&make());
    write_conflicts_after_a_read_time(&make());
    prepared_transactions(&make());
}

pub fn tables<E: Engine>(e: &E) {
    assert_eq!(
        e.list_tables().unwrap(),
        Vec::<String>::new(),
        "fresh engine has tables"
    );
    e.create_table("b").unwrap();
    e.create_table("a").unwrap();
    e.create_table("b").unwrap(); // idempotent
                                  // Names a MongoDB namespace can contain.
    let odd = "db.coll$idx/x-y z";
    e.create_table(odd).unwrap();
    assert_eq!(
        e.list_tables().unwrap(),
        vec!["a".to_string(), "b".into(), odd.into()]
    );
    put(e, odd, b"k", b"v");
    assert_eq!(e.get(odd, b"k").unwrap(), Some(b"v".to_vec()));
    e.drop_table("a").unwrap();
    e.drop_table("a").unwrap(); // idempotent
    e.drop_table("never-existed").unwrap();
    assert_eq!(e.list_tables().unwrap(), vec!["b".to_string(), odd.into()]);
}

pub fn missing_table_errors<E: Engine>(e: &E) {
    let is_missing = |r: crate::Result<()>, what: &str| match r {
        Err(StorageError::NoSuchTable(t)) => assert_eq!(t, "nope", "{what}"),
        other => panic!("{what} on a missing table: expected NoSuchTable, got {other:?}"),
    };
    is_missing(e.get("nope", b"k").map(drop), "get");
    is_missing(
        e.scan("nope", &KeyRange::all(), false, 10).map(drop),
        "scan",
    );
    is_missing(e.stats("nope").map(drop), "stats");
    let mut b = WriteBatch::new();
    b.put("nope", b"k".to_vec(), b"v".to_vec());
    is_missing(e.write(&b), "write");
    // A batch touching a missing table after a good op leaves the good op undone.
    e.create_table("t").unwrap();
    let mut b = WriteBatch::new();
    b.put("t", b"k".to_vec(), b"v".to_vec());
    b.put("nope", b"k".to_vec(), b"v".to_vec());
    is_missing(e.write(&b), "write batch");
    assert_eq!(e.get("t", b"k").unwrap(), None, "partial batch was applied");
}

pub fn get_put_delete<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    assert_eq!(e.get("t", b"k").unwrap(), None);
    put(e, "t", b"k", b"v1");
    assert_eq!(e.get("t", b"k").unwrap(), Some(b"v1".to_vec()));
    put(e, "t", b"k", b"v2"); // overwrite
    assert_eq!(e.get("t", b"k").unwrap(), Some(b"v2".to_vec()));
    let mut b = WriteBatch::new();
    b.delete("t", b"k".to_vec());
    e.write(&b).unwrap();
    assert_eq!(e.get("t", b"k").unwrap(), None);
    e.write(&b).unwrap(); // deleting an absent key is fine
    e.write(&WriteBatch::new()).unwrap(); // empty batch
}

/// Bytewise order, including 0x00, 0xff and keys that are prefixes of each other.
pub fn ordering<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let mut keys: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        b"a\x00".to_vec(),
        b"a\x00\x00".to_vec(),
        b"ab".to_vec(),
        b"a\xff".to_vec(),
        b"b".to_vec(),
        vec![0x00],
        vec![0xff],
        vec![0xff, 0xff],
        vec![0x7f],
        vec![0x80],
    ];
    let mut rng = crate::xorshift::Rng::new(42);
    for _ in 0..200 {
        let len = (rng.next() % 6) as usize;
        keys.push((0..len).map(|_| rng.next() as u8).collect());
    }
    keys.retain(|k| !k.is_empty());
    // Write in a scrambled order, several per batch.
    let mut scrambled = keys.clone();
    for i in (1..scrambled.len()).rev() {
        scrambled.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    for chunk in scrambled.chunks(7) {
        let mut b = WriteBatch::new();
        for k in chunk {
            b.put("t", k.clone(), value_for(k));
        }
        e.write(&b).unwrap();
    }
    keys.sort();
    keys.dedup();
    let expected: Vec<Kv> = keys.iter().map(|k| (k.clone(), value_for(k))).collect();
    assert_eq!(
        e.scan("t", &KeyRange::all(), false, usize::MAX).unwrap(),
        expected,
        "forward order"
    );
    let mut rev = expected.clone();
    rev.reverse();
    assert_eq!(
        e.scan("t", &KeyRange::all(), true, usize::MAX).unwrap(),
        rev,
        "reverse order"
    );
}

/// Every bound kind, on keys present and absent, forward; checked against a filter.
pub fn ranges<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let data = numbered(&[10, 20, 30, 40, 50]);
    write_all(e, "t", &data);
    let probes: [u8; 8] = [5, 10, 15, 20, 30, 45, 50, 55];
    let mut bounds: Vec<Bound<Vec<u8>>> = vec![Unbounded];
    for p in probes {
        bounds.push(Included(key_n(p)));
        bounds.push(Excluded(key_n(p)));
    }
    for start in &bounds {
        for end in &bounds {
            let range = KeyRange {
                start: start.clone(),
                end: end.clone(),
            };
            let want: Vec<Kv> = data
                .iter()
                .filter(|(k, _)| range.contains(k))
                .cloned()
                .collect();
            let got = e.scan("t", &range, false, usize::MAX).unwrap();
            assert_eq!(got, want, "forward scan of {range:?}");
            let mut want_rev = want.clone();
            want_rev.reverse();
            let got = e.scan("t", &range, true, usize::MAX).unwrap();
            assert_eq!(got, want_rev, "reverse scan of {range:?}");
        }
    }
    // Empty table.
    e.create_table("empty").unwrap();
    for reverse in [false, true] {
        assert!(e
            .scan("empty", &KeyRange::all(), reverse, 10)
            .unwrap()
            .is_empty());
        let r = KeyRange {
            start: Included(key_n(1)),
            end: Excluded(key_n(9)),
        };
        assert!(e.scan("empty", &r, reverse, 10).unwrap().is_empty());
    }
}

pub fn reverse_and_limits<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let data = numbered(&(0..100).collect::<Vec<u8>>());
    write_all(e, "t", &data);
    let all = KeyRange::all();
    assert!(e.scan("t", &all, false, 0).unwrap().is_empty(), "limit 0");
    assert_eq!(e.scan("t", &all, false, 1).unwrap(), data[..1].to_vec());
    assert_eq!(e.scan("t", &all, false, 10).unwrap(), data[..10].to_vec());
    assert_eq!(e.scan("t", &all, false, 1000).unwrap(), data);
    let rev: Vec<Kv> = data.iter().rev().cloned().collect();
    assert_eq!(e.scan("t", &all, true, 10).unwrap(), rev[..10].to_vec());
    let r = KeyRange {
        start: Excluded(key_n(20)),
        end: Included(key_n(60)),
    };
    assert_eq!(e.scan("t", &r, false, 5).unwrap(), data[21..26].to_vec());
    let want: Vec<Kv> = data[56..61].iter().rev().cloned().collect();
    assert_eq!(e.scan("t", &r, true, 5).unwrap(), want);
}

pub fn prefix_scan<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let keys: [&[u8]; 7] = [
        b"a",
        b"ab",
        b"ab\x00",
        b"ab\xff\xff",
        b"ac",
        b"b",
        b"\xff\xff\x01",
    ];
    for k in keys {
        put(e, "t", k, b"v");
    }
    let scan_keys = |p: &[u8], reverse| -> Vec<Vec<u8>> {
        e.scan("t", &KeyRange::prefix(p), reverse, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    assert_eq!(
        scan_keys(b"ab", false),
        vec![b"ab".to_vec(), b"ab\x00".to_vec(), b"ab\xff\xff".to_vec()]
    );
    assert_eq!(
        scan_keys(b"ab", true),
        vec![b"ab\xff\xff".to_vec(), b"ab\x00".to_vec(), b"ab".to_vec()]
    );
    assert_eq!(
        scan_keys(b"\xff\xff", false),
        vec![b"\xff\xff\x01".to_vec()]
    );
    assert_eq!(scan_keys(b"", false).len(), keys.len());
    assert!(scan_keys(b"zz", false).is_empty());
}

pub fn atomic_batches<E: Engine>(e: &E) {
    e.create_table("a").unwrap();
    e.create_table("b").unwrap();
    put(e, "a", b"gone", b"x");
    let mut b = WriteBatch::new();
    b.put("a", b"k1".to_vec(), b"1".to_vec())
        .insert("b", b"k2".to_vec(), b"2".to_vec())
        .delete("a", b"gone".to_vec())
        .put("a", b"k1".to_vec(), b"1b".to_vec()); // later ops see earlier ones
    e.write(&b).unwrap();
    assert_eq!(e.get("a", b"k1").unwrap(), Some(b"1b".to_vec()));
    assert_eq!(e.get("b", b"k2").unwrap(), Some(b"2".to_vec()));
    assert_eq!(e.get("a", b"gone").unwrap(), None);
    // Delete then Insert of the same key in one batch is allowed.
    let mut b = WriteBatch::new();
    b.delete("b", b"k2".to_vec())
        .insert("b", b"k2".to_vec(), b"3".to_vec());
    e.write(&b).unwrap();
    assert_eq!(e.get("b", b"k2").unwrap(), Some(b"3".to_vec()));
}

/// An Insert of an existing key fails with KeyExists and undoes every earlier op of the
/// batch, on every table, including puts, overwrites and deletes.
pub fn failing_insert_rolls_back_batch<E: Engine>(e: &E) {
    e.create_table("a").unwrap();
    e.create_table("b").unwrap();
    put(e, "a", b"existing", b"old");
    put(e, "b", b"dup", b"orig");
    let before_a = e.scan("a", &KeyRange::all(), false, usize::MAX).unwrap();
    let before_b = e.scan("b", &KeyRange::all(), false, usize::MAX).unwrap();

    let mut b = WriteBatch::new();
    b.put("a", b"new".to_vec(), b"n".to_vec())
        .put("a", b"existing".to_vec(), b"changed".to_vec())
        .insert("b", b"fresh".to_vec(), b"f".to_vec())
        .delete("b", b"dup".to_vec())
        .put("b", b"dup".to_vec(), b"again".to_vec())
        .insert("b", b"dup".to_vec(), b"boom".to_vec()) // fails: present
        .put("a", b"after".to_vec(), b"never".to_vec());
    match e.write(&b) {
        Err(StorageError::KeyExists { table }) => assert_eq!(table, "b"),
        other => panic!("expected KeyExists, got {other:?}"),
    }
    assert_eq!(
        e.scan("a", &KeyRange::all(), false, usize::MAX).unwrap(),
        before_a,
        "table a changed"
    );
    assert_eq!(
        e.scan("b", &KeyRange::all(), false, usize::MAX).unwrap(),
        before_b,
        "table b changed"
    );

    // Two inserts of one new key in the same batch: the second fails, the first is undone.
    let mut b = WriteBatch::new();
    b.insert("a", b"twice".to_vec(), b"1".to_vec())
        .insert("a", b"twice".to_vec(), b"2".to_vec());
    assert!(matches!(e.write(&b), Err(StorageError::KeyExists { .. })));
    assert_eq!(e.get("a", b"twice").unwrap(), None);

    // The engine is still usable afterwards, and a plain insert works.
    let mut b = WriteBatch::new();
    b.insert("a", b"twice".to_vec(), b"1".to_vec());
    e.write(&b).unwrap();
    assert_eq!(e.get("a", b"twice").unwrap(), Some(b"1".to_vec()));
}

/// `write_refs` (how a member applies a replicated entry) does what `write` does with the
/// same ops: in order, atomically, and all or nothing when an insert finds its key.
pub fn borrowed_ops_write_as_owned_ones_do<E: Engine>(e: &E) {
    e.create_table("a").unwrap();
    e.create_table("b").unwrap();
    put(e, "a", b"gone", b"x");
    let ops = [
        WriteOpRef::Put {
            table: "a",
            key: b"k1",
            value: b"v1",
        },
        WriteOpRef::Insert {
            table: "b",
            key: b"k2",
            value: b"v2",
        },
        WriteOpRef::Delete {
            table: "a",
            key: b"gone",
        },
        WriteOpRef::Put {
            table: "a",
            key: b"k1",
            value: b"v1 again",
        },
    ];
    e.write_refs(&ops).unwrap();
    assert_eq!(
        e.scan("a", &KeyRange::all(), false, usize::MAX).unwrap(),
        vec![(b"k1".to_vec(), b"v1 again".to_vec())]
    );
    assert_eq!(e.get("b", b"k2").unwrap(), Some(b"v2".to_vec()));

    let failing = [
        WriteOpRef::Put {
            table: "a",
            key: b"k3",
            value: b"never",
        },
        WriteOpRef::Insert {
            table: "b",
            key: b"k2",
            value: b"dup",
        },
    ];
    match e.write_refs(&failing) {
        Err(StorageError::KeyExists { table }) => assert_eq!(table, "b"),
        other => panic!("expected KeyExists, got {other:?}"),
    }
    assert_eq!(e.get("a", b"k3").unwrap(), None, "the batch was not undone");
    assert_eq!(e.get("b", b"k2").unwrap(), Some(b"v2".to_vec()));
    e.write_refs(&[]).unwrap();
}

pub fn drop_and_recreate<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    write_all(e, "t", &numbered(&[1, 2, 3]));
    e.drop_table("t").unwrap();
    assert!(matches!(
        e.get("t", &key_n(1)),
        Err(StorageError::NoSuchTable(_))
    ));
    e.create_table("t").unwrap();
    assert_eq!(
        e.get("t", &key_n(1)).unwrap(),
        None,
        "recreated table has old data"
    );
    assert!(e.scan("t", &KeyRange::all(), false, 10).unwrap().is_empty());
    assert_eq!(e.stats("t").unwrap(), TableStats::default());
    put(e, "t", b"k", b"v");
    assert_eq!(e.get("t", b"k").unwrap(), Some(b"v".to_vec()));
    // Create on an existing table keeps its data.
    e.create_table("t").unwrap();
    assert_eq!(e.get("t", b"k").unwrap(), Some(b"v".to_vec()));
}

pub fn empty_keys_and_values<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    put(e, "t", b"", b"empty key");
    put(e, "t", b"k", b"");
    put(e, "t", b"\x00", b"zero");
    assert_eq!(e.get("t", b"").unwrap(), Some(b"empty key".to_vec()));
    assert_eq!(
        e.get("t", b"k").unwrap(),
        Some(Vec::new()),
        "empty value must read back as Some"
    );
    let all = e.scan("t", &KeyRange::all(), false, usize::MAX).unwrap();
    assert_eq!(
        all,
        vec![
            (b"".to_vec(), b"empty key".to_vec()),
            (b"\x00".to_vec(), b"zero".to_vec()),
            (b"k".to_vec(), b"".to_vec())
        ]
    );
    let r = KeyRange {
        start: Included(Vec::new()),
        end: Included(Vec::new()),
    };
    assert_eq!(
        e.scan("t", &r, false, 10).unwrap().len(),
        1,
        "range [\"\", \"\"]"
    );
    let r = KeyRange {
        start: Excluded(Vec::new()),
        end: Unbounded,
    };
    assert_eq!(
        e.scan("t", &r, false, 10).unwrap().len(),
        2,
        "range (\"\", ..)"
    );
    assert_eq!(
        e.scan("t", &r, true, 10).unwrap().len(),
        2,
        "reverse range (\"\", ..)"
    );
    let mut b = WriteBatch::new();
    b.insert("t", Vec::new(), b"x".to_vec());
    assert!(
        matches!(e.write(&b), Err(StorageError::KeyExists { .. })),
        "insert of existing empty key"
    );
    let mut b = WriteBatch::new();
    b.delete("t", Vec::new());
    e.write(&b).unwrap();
    assert_eq!(e.get("t", b"").unwrap(), None);
    assert_eq!(
        e.stats("t").unwrap(),
        TableStats {
            entries: 2,
            bytes: 1 + 4 + 1
        }
    );
}

pub fn large_values<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let mut rng = crate::xorshift::Rng::new(7);
    let big: Vec<u8> = (0..1 << 20).map(|_| rng.next() as u8).collect();
    let mut b = WriteBatch::new();
    for i in 0..4u8 {
        let mut v = big.clone();
        v[0] = i;
        b.put("t", vec![i], v);
    }
    e.write(&b).unwrap();
    for i in 0..4u8 {
        let v = e.get("t", &[i]).unwrap().expect("large value missing");
        assert_eq!(v.len(), 1 << 20);
        assert_eq!(v[0], i);
        assert_eq!(v[1..], big[1..]);
    }
    let scanned = e.scan("t", &KeyRange::all(), true, 2).unwrap();
    assert_eq!(scanned.len(), 2);
    assert_eq!(scanned[0].1.len(), 1 << 20);
    // A large key too (MongoDB keys are bounded, but nothing here should assume small).
    let big_key = vec![0xabu8; 64 * 1024];
    put(e, "t", &big_key, b"v");
    assert_eq!(e.get("t", &big_key).unwrap(), Some(b"v".to_vec()));
}

pub fn stats<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    assert_eq!(
        e.stats("t").unwrap(),
        TableStats {
            entries: 0,
            bytes: 0
        }
    );
    put(e, "t", b"ab", b"cde");
    put(e, "t", b"f", b"");
    assert_eq!(
        e.stats("t").unwrap(),
        TableStats {
            entries: 2,
            bytes: 6
        }
    );
    put(e, "t", b"ab", b"c"); // overwrite shrinks
    assert_eq!(
        e.stats("t").unwrap(),
        TableStats {
            entries: 2,
            bytes: 4
        }
    );
    let mut b = WriteBatch::new();
    b.delete("t", b"f".to_vec());
    e.write(&b).unwrap();
    assert_eq!(
        e.stats("t").unwrap(),
        TableStats {
            entries: 1,
            bytes: 3
        }
    );
}

pub fn checkpoint<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    put(e, "t", b"k", b"v");
    e.checkpoint().unwrap();
    put(e, "t", b"k2", b"v2");
    e.checkpoint().unwrap();
    assert_eq!(e.get("t", b"k").unwrap(), Some(b"v".to_vec()));
    assert_eq!(
        e.scan("t", &KeyRange::all(), false, usize::MAX)
            .unwrap()
            .len(),
        2
    );
}

/// Every table, empty ones too, in name and key order and in pages, as of the moment the
/// export began: writes made while it runs (here from inside the sink) are not in it.
pub fn export_is_one_instant<E: Engine>(e: &E) {
    for t in ["b", "a", "empty"] {
        e.create_table(t).unwrap();
    }
    put(e, "a", b"", b"empty key");
    put(e, "a", b"x", b"1");
    let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..100u32)
        .map(|i| (i.to_be_bytes().to_vec(), vec![7u8; 50]))
        .collect();
    for (k, v) in &rows {
        put(e, "b", k, v);
    }
    let mut seen: Vec<(String, Rows)> = Vec::new();
    let mut pages = 0;
    e.export(1000, &mut |table, page| {
        if pages == 0 {
            put(e, "b", b"\xff late", b"not exported");
            e.write(WriteBatch::new().delete("a", b"x".to_vec()))
                .unwrap();
        }
        pages += 1;
        match seen.last_mut() {
            Some((t, r)) if t == table => r.extend(page),
            _ => seen.push((table.to_string(), page)),
        }
        Ok(())
    })
    .unwrap();
    let names: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["a", "b", "empty"]);
    assert_eq!(
        seen[0].1,
        vec![
            (b"".to_vec(), b"empty key".to_vec()),
            (b"x".to_vec(), b"1".to_vec())
        ]
    );
    assert_eq!(seen[1].1, rows);
    assert!(seen[2].1.is_empty());
    assert!(
        pages >= 6,
        "5,400 bytes of rows in pages of 1,000: {pages} pages"
    );
    assert_eq!(e.get("a", b"x").unwrap(), None, "the writes did happen");
}

const THREADS: usize = 4;
const PER_THREAD: usize = 500;

pub fn concurrent_writers_distinct_tables<E: Engine>(e: &E) {
    for t in 0..THREADS {
        e.create_table(&format!("t{t}")).unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let table = format!("t{t}");
                for i in 0..PER_THREAD {
                    let mut b = WriteBatch::new();
                    b.insert(
                        table.as_str(),
                        (i as u32).to_be_bytes().to_vec(),
                        vec![t as u8; 100],
                    );
                    b.put(
                        table.as_str(),
                        b"counter".to_vec(),
                        (i as u32).to_be_bytes().to_vec(),
                    );
                    e.write(&b).unwrap();
                    if i % 50 == 0 {
                        assert!(e.get(&table, &(i as u32).to_be_bytes()).unwrap().is_some());
                    }
                }
            });
        }
    });
    for t in 0..THREADS {
        let table = format!("t{t}");
        let st = e.stats(&table).unwrap();
        assert_eq!(st.entries, PER_THREAD as u64 + 1, "{table}");
        assert_eq!(
            e.get(&table, b"counter").unwrap(),
            Some((PER_THREAD as u32 - 1).to_be_bytes().to_vec())
        );
    }
}

/// Four writers on one table: disjoint inserts, plus puts to shared hot keys (write
/// conflicts, which the engine must retry internally), plus concurrent scans.
pub fn concurrent_writers_same_table<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    let mut b = WriteBatch::new();
                    let key = format!("k{t}-{i:05}");
                    b.insert("t", key.into_bytes(), vec![t as u8; 64]);
                    b.put("t", format!("hot{}", i % 3).into_bytes(), vec![t as u8]);
                    e.write(&b).unwrap();
                    if i % 100 == 0 {
                        let page = e.scan("t", &KeyRange::prefix(b"k"), false, 50).unwrap();
                        assert!(
                            page.windows(2).all(|w| w[0].0 < w[1].0),
                            "scan out of order"
                        );
                    }
                }
            });
        }
    });
    let all = e
        .scan("t", &KeyRange::prefix(b"k"), false, usize::MAX)
        .unwrap();
    assert_eq!(all.len(), THREADS * PER_THREAD);
    for t in 0..THREADS {
        let mine = e
            .scan(
                "t",
                &KeyRange::prefix(format!("k{t}-").as_bytes()),
                false,
                usize::MAX,
            )
            .unwrap();
        assert_eq!(mine.len(), PER_THREAD, "thread {t}'s inserts");
        assert!(mine.iter().all(|(_, v)| v == &vec![t as u8; 64]));
    }
    for h in 0..3 {
        let v = e.get("t", format!("hot{h}").as_bytes()).unwrap().unwrap();
        assert!(v.len() == 1 && (v[0] as usize) < THREADS);
    }
}

/// Other threads keep using (and caching cursors on) a table while it is dropped and
/// recreated; the drop must not fail or hang, and they must see the new, empty table.
pub fn drop_while_other_threads_hold_cursors<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    put(e, "t", b"k", b"v");
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the busy reader however the scope's body ends: if the drop fails, the test
    /// fails instead of waiting forever for a reader nobody stops.
    struct StopOnExit<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnExit<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnExit(&stop);
        // Dropped with the body too, so idle holders wake (and fail) rather than hang.
        let mut proceeds = Vec::new();
        // Idle holders: read once (caching a cursor), then sleep until told to go on.
        for _ in 0..2 {
            let (go_tx, go_rx) = mpsc::channel::<()>();
            proceeds.push(go_tx);
            let ready_tx = ready_tx.clone();
            s.spawn(move || {
                assert_eq!(e.get("t", b"k").unwrap(), Some(b"v".to_vec()));
                let _ = e.scan("t", &KeyRange::all(), false, 10).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().expect("the drop failed");
                // After drop + recreate: the new, empty table.
                assert_eq!(e.get("t", b"k").unwrap(), None);
                put(e, "t", b"mine", b"1");
            });
        }
        // A busy reader that races with the drop; it may see either table or NoSuchTable.
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match e.get("t", b"k") {
                    Ok(_) | Err(StorageError::NoSuchTable(_)) => {}
                    Err(other) => panic!("reader during drop: {other:?}"),
                }
            }
        });
        ready_rx.recv().unwrap();
        ready_rx.recv().unwrap();
        e.drop_table("t").unwrap();
        e.create_table("t").unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for go in &proceeds {
            go.send(()).unwrap();
        }
    });
    assert_eq!(e.get("t", b"mine").unwrap(), Some(b"1".to_vec()));
    assert_eq!(e.get("t", b"k").unwrap(), None);
}

// --- helpers ----------------------------------------------------------------------------

/// Versions at times 10, 20 and 30 over one written without a timestamp: each read at a
/// time sees the newest version at or before it, and the untimestamped one at every time.
pub fn reads_at_a_timestamp<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    put(e, "t", b"base", b"always");
    let put_at = |key: &'static [u8], value: &'static [u8]| WriteOpRef::Put {
        table: "t",
        key,
        value,
    };
    e.write_refs_at(&[put_at(b"a", b"1"), put_at(b"b", b"1")], 10)
        .unwrap();
    let delete_b = WriteOpRef::Delete {
        table: "t",
        key: b"b",
    };
    e.write_refs_at(&[put_at(b"a", b"2"), delete_b], 20)
        .unwrap();
    let insert_c = WriteOpRef::Insert {
        table: "t",
        key: b"c",
        value: b"3",
    };
    e.write_refs_at(&[insert_c], 30).unwrap();

    let at = |key: &[u8], t| e.get_at("t", key, t).unwrap();
    assert_eq!(at(b"a", 5), None, "before the first version");
    assert_eq!(at(b"a", 10).as_deref(), Some(&b"1"[..]));
    assert_eq!(at(b"a", 15).as_deref(), Some(&b"1"[..]));
    assert_eq!(at(b"a", 20).as_deref(), Some(&b"2"[..]));
    assert_eq!(at(b"b", 15).as_deref(), Some(&b"1"[..]));
    assert_eq!(at(b"b", 20), None, "deleted at 20");
    assert_eq!(at(b"base", 1).as_deref(), Some(&b"always"[..]));
    assert_eq!(e.get("t", b"a").unwrap().as_deref(), Some(&b"2"[..]));

    let all = KeyRange::all();
    let kv = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
    assert_eq!(
        e.scan_at("t", &all, false, usize::MAX, 15).unwrap(),
        vec![kv(b"a", b"1"), kv(b"b", b"1"), kv(b"base", b"always")]
    );
    assert_eq!(
        e.scan_at("t", &all, true, 2, 25).unwrap(),
        vec![kv(b"base", b"always"), kv(b"a", b"2")],
        "reverse with a limit skips what is not visible"
    );
    assert_eq!(
        e.scan_at("t", &all, false, usize::MAX, 30).unwrap().len(),
        3
    );
    assert!(matches!(
        e.get_at("missing", b"a", 10),
        Err(StorageError::NoSuchTable(_))
    ));
}

/// History older than oldest is refused, marks never move back, a commit behind stable
/// fails, and a failing timestamped batch leaves nothing behind.
pub fn oldest_and_stable_timestamps<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    for (t, v) in [(10, b"10"), (20, b"20"), (30, b"30")] {
        let op = WriteOpRef::Put {
            table: "t",
            key: b"a",
            value: v,
        };
        e.write_refs_at(&[op], t).unwrap();
    }
    e.set_timestamps(30, 20).unwrap();
    let too_old = |r: crate::Result<Option<Vec<u8>>>| {
        matches!(
            r,
            Err(StorageError::SnapshotTooOld {
                read: 19,
                oldest: 20
            })
        )
    };
    assert!(
        too_old(e.get_at("t", b"a", 19)),
        "history before oldest is gone"
    );
    assert_eq!(
        e.get_at("t", b"a", 20).unwrap().as_deref(),
        Some(&b"20"[..])
    );
    assert!(matches!(
        e.scan_at("t", &KeyRange::all(), false, 10, 10),
        Err(StorageError::SnapshotTooOld { .. })
    ));
    e.set_timestamps(25, 15).unwrap();
    assert!(too_old(e.get_at("t", b"a", 19)), "oldest did not move back");

    let op = |value: &'static [u8]| WriteOpRef::Put {
        table: "t",
        key: b"b",
        value,
    };
    assert!(
        e.write_refs_at(&[op(b"late")], 25).is_err(),
        "a commit behind stable"
    );
    assert_eq!(e.get("t", b"b").unwrap(), None);
    e.write_refs_at(&[op(b"ok")], 31).unwrap();
    let clash = WriteOpRef::Insert {
        table: "t",
        key: b"a",
        value: b"again",
    };
    assert!(matches!(
        e.write_refs_at(&[op(b"rolled back"), clash], 40),
        Err(StorageError::KeyExists { .. })
    ));
    assert_eq!(
        e.get_at("t", b"b", 40).unwrap().as_deref(),
        Some(&b"ok"[..])
    );
}

/// A key written (or deleted) after a transaction's read time conflicts with its write of
/// that key; keys untouched since, or never written, do not. Checked before and after a
/// checkpoint, which moves versions out of WiredTiger's in-memory update chains.
pub fn write_conflicts_after_a_read_time<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let put = |key: &'static [u8]| WriteOpRef::Put {
        table: "t",
        key,
        value: b"v",
    };
    let delete = |key: &'static [u8]| WriteOpRef::Delete { table: "t", key };
    e.write_refs_at(&[put(b"a"), put(b"b")], 10).unwrap();
    e.write_refs_at(&[put(b"a")], 20).unwrap();
    e.write_refs_at(&[delete(b"b")], 30).unwrap();
    e.set_timestamps(30, 5).unwrap();
    for pass in ["in memory", "after a checkpoint"] {
        let conflict = |ops: &[WriteOpRef<'_>], at| e.write_conflict(ops, at).unwrap();
        assert!(conflict(&[put(b"a")], 15), "{pass}: a was written at 20");
        assert!(
            !conflict(&[put(b"a")], 20),
            "{pass}: a is unchanged since 20"
        );
        assert!(conflict(&[delete(b"b")], 25), "{pass}: b was deleted at 30");
        assert!(
            !conflict(&[put(b"b")], 30),
            "{pass}: b is unchanged since 30"
        );
        assert!(
            !conflict(&[put(b"never"), put(b"a")], 30),
            "{pass}: unwritten keys"
        );
        assert!(
            conflict(&[put(b"never"), delete(b"a")], 12),
            "{pass}: one of two"
        );
        e.checkpoint().unwrap();
    }
    assert_eq!(e.get("t", b"a").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(e.get("t", b"never").unwrap(), None, "a dry run wrote");
}

/// A prepared transaction is invisible before its prepare time and a conflict at or
/// after it until resolved; committed at a time before stable (as a two-phase commit's
/// later participants commit), reads see it from that time; an aborted one leaves
/// nothing; and times that break the rules are refused, leaving it open.
pub fn prepared_transactions<E: Engine>(e: &E) {
    e.create_table("t").unwrap();
    let put = |key: &'static [u8], value: &'static [u8]| WriteOpRef::Put {
        table: "t",
        key,
        value,
    };
    e.write_refs_at(&[put(b"a", b"1")], 10).unwrap();
    e.set_timestamps(10, 5).unwrap();
    assert!(e.prepare(1, &[put(b"a", b"x")], 10).is_err(), "at stable");
    e.prepare(1, &[put(b"a", b"2"), put(b"b", b"3")], 20)
        .unwrap();
    // Reads wait for a resolution up to their thread's limit: here, not at all.
    let now = || std::time::Instant::now();
    let conflict = |read: &dyn Fn() -> crate::Result<Option<Vec<u8>>>| {
        let r = crate::prepare_wait::with_wait_limit(now(), read);
        matches!(r, Err(StorageError::PrepareConflict { ref table }) if table == "t")
    };
    assert_eq!(e.get_at("t", b"a", 15).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(e.get_at("t", b"b", 15).unwrap(), None);
    assert!(
        conflict(&|| e.get_at("t", b"a", 25)),
        "a read after the prepare time"
    );
    assert!(conflict(&|| e.get("t", b"b")), "a read without a time");
    assert!(matches!(
        crate::prepare_wait::with_wait_limit(now(), || e.scan_at(
            "t",
            &KeyRange::all(),
            false,
            10,
            25
        )),
        Err(StorageError::PrepareConflict { .. })
    ));
    assert_eq!(
        e.scan_at("t", &KeyRange::all(), false, 10, 15)
            .unwrap()
            .len(),
        1
    );
    // Stable moves on past the prepare time while the transaction waits for a decision.
    e.set_timestamps(30, 5).unwrap();
    // A read that meets it waits, and reads the outcome once it is committed.
    let waited = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let started = now();
            let read = e.get_at("t", b"a", 40);
            (read, started.elapsed())
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            e.commit_prepared(1, 19, 31).is_err(),
            "commit before prepare"
        );
        assert!(
            e.commit_prepared(1, 25, 29).is_err(),
            "durable before stable"
        );
        assert!(e.commit_prepared(9, 25, 31).is_err(), "no such transaction");
        e.commit_prepared(1, 25, 31).unwrap();
        reader.join().unwrap()
    });
    assert_eq!(waited.0.unwrap().as_deref(), Some(&b"2"[..]));
    assert!(
        waited.1 >= std::time::Duration::from_millis(150),
        "{:?}",
        waited.1
    );
    assert!(
        waited.1 < std::time::Duration::from_secs(30),
        "{:?}",
        waited.1
    );
    assert_eq!(e.get_at("t", b"a", 24).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(e.get_at("t", b"a", 25).unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(e.get("t", b"b").unwrap().as_deref(), Some(&b"3"[..]));
    e.prepare(
        2,
        &[WriteOpRef::Delete {
            table: "t",
            key: b"b",
        }],
        40,
    )
    .unwrap();
    assert!(conflict(&|| e.get("t", b"b")));
    // A scan that waits reads what is there once the transaction is aborted.
    let rows = std::thread::scope(|scope| {
        let reader = scope.spawn(|| e.scan("t", &KeyRange::all(), false, 10));
        std::thread::sleep(std::time::Duration::from_millis(100));
        e.abort_prepared(2).unwrap();
        reader.join().unwrap()
    });
    assert_eq!(rows.unwrap().len(), 2);
    assert_eq!(e.get("t", b"b").unwrap().as_deref(), Some(&b"3"[..]));
    assert!(e.abort_prepared(2).is_err(), "aborted already");
    // A transaction left prepared is rolled back when the engine closes.
    e.prepare(3, &[put(b"c", b"left")], 50).unwrap();
}

fn put<E: Engine>(e: &E, table: &str, key: &[u8], value: &[u8]) {
    let mut b = WriteBatch::new();
    b.put(table, key.to_vec(), value.to_vec());
    e.write(&b).unwrap();
}

fn write_all<E: Engine>(e: &E, table: &str, data: &[Kv]) {
    let mut b = WriteBatch::new();
    for (k, v) in data {
        b.put(table, k.clone(), v.clone());
    }
    e.write(&b).unwrap();
}

fn key_n(n: u8) -> Vec<u8> {
    format!("key{n:03}").into_bytes()
}

fn numbered(ns: &[u8]) -> Vec<Kv> {
    ns.iter()
        .map(|&n| (key_n(n), format!("value{n}").into_bytes()))
        .collect()
}

fn value_for(k: &[u8]) -> Vec<u8> {
    let mut v = b"v:".to_vec();
    v.extend_from_slice(k);
    v
}
