//! Prints the WiredTiger baseline and the cost of the `Engine` layer on top of it.
//!
//! `cargo run --release -p storage --example rawbench [docs] [value_size] [batch]`

use storage::rawbench::{
    engine_insert, engine_point_get, raw_insert, raw_point_get, BENCH_CACHE_MB,
};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map_or(default, |s| s.parse().expect("numeric argument"))
}

fn main() {
    let docs = arg(1, 200_000);
    let value_size = arg(2, 1024);
    let batch = arg(3, 100);
    let lookups = docs * 2;
    let run = |f: fn(&std::path::Path, usize, usize, usize) -> f64, third: usize| {
        let dir = tempfile::tempdir().expect("tempdir");
        f(dir.path(), docs, value_size, third)
    };
    println!(
        "WiredTiger {}.{}.{}, cache {BENCH_CACHE_MB} MiB, log on, no fsync; {docs} rows x {value_size} B, 16 B keys",
        wiredtiger_sys::WIREDTIGER_VERSION_MAJOR,
        wiredtiger_sys::WIREDTIGER_VERSION_MINOR,
        wiredtiger_sys::WIREDTIGER_VERSION_PATCH
    );
    let raw_i = run(raw_insert, batch);
    let eng_i = run(engine_insert, batch);
    println!("insert ({batch} rows/txn):  raw {:>10.0} rows/s   engine {:>10.0} rows/s   engine/raw {:.2}", raw_i, eng_i, eng_i / raw_i);
    let raw_g = run(raw_point_get, lookups);
    let eng_g = run(engine_point_get, lookups);
    println!("point get ({lookups} lookups): raw {:>10.0} ops/s    engine {:>10.0} ops/s    engine/raw {:.2}", raw_g, eng_g, eng_g / raw_g);
}
