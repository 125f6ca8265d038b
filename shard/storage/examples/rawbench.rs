//! Prints the WiredTiger baseline and the cost of the `Engine` layer on top of it.
//!
//! `cargo run --release -p storage --example rawbench [docs] [value_size] [batch] [rounds]`
//!
//! Raw and engine runs alternate, each in a fresh directory, and medians are printed so
//! background load affects both sides alike.

use std::path::Path;

use storage::rawbench::{
    engine_insert, engine_point_get, raw_insert, raw_point_get, BENCH_CACHE_MB,
};

type Bench = fn(&Path, usize, usize, usize) -> f64;

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map_or(default, |s| s.parse().expect("numeric argument"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let docs = arg(1, 200_000);
    let value_size = arg(2, 1024);
    let batch = arg(3, 100);
    let rounds = arg(4, 3).max(1);
    let lookups = docs * 2;
    println!(
        "WiredTiger {}.{}.{}, cache {BENCH_CACHE_MB} MiB, log on, no fsync; {docs} rows x {value_size} B, \
         16 B keys; median of {rounds}",
        wiredtiger_sys::WIREDTIGER_VERSION_MAJOR,
        wiredtiger_sys::WIREDTIGER_VERSION_MINOR,
        wiredtiger_sys::WIREDTIGER_VERSION_PATCH
    );
    let pair = |raw: Bench, engine: Bench, third: usize| {
        let (mut r, mut e) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (f, out) in [(raw, &mut r), (engine, &mut e)] {
                let dir = tempfile::tempdir().expect("tempdir");
                out.push(f(dir.path(), docs, value_size, third));
            }
        }
        (median(r), median(e))
    };
    let (raw, eng) = pair(raw_insert, engine_insert, batch);
    println!(
        "insert, {batch} rows/txn:      raw {raw:>10.0} rows/s   engine {eng:>10.0} rows/s   engine/raw {:.2}",
        eng / raw
    );
    let (raw, eng) = pair(raw_point_get, engine_point_get, lookups);
    println!(
        "point get, {lookups} lookups: raw {raw:>10.0} ops/s    engine {eng:>10.0} ops/s    engine/raw {:.2}",
        eng / raw
    );
}
