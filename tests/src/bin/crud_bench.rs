//! CRUD benchmark: the router path (Rust driver → router → gRPC → shard → WiredTiger)
//! against raw WiredTiger through wiredtiger-sys, measured in the same run on the same
//! machine, with the ratio of each pair. Prints the median of `--runs` runs (default 3).
//!
//!   cargo run --release -p tests --bin crud-bench [-- --runs 3 --docs 100000 --lookups 20000]
//!
//! This is a program that prints figures, never a test that asserts timings.

use std::time::Instant;

use bson::{doc, Document};
use tests::TestCluster;

#[derive(Clone, Copy)]
struct Args {
    runs: usize,
    docs: usize,
    lookups: usize,
    batch: usize,
    value_size: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        runs: 3,
        docs: 100_000,
        lookups: 20_000,
        batch: 100,
        value_size: 1024,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < argv.len() {
        let v: usize = argv[i + 1].parse().expect("numeric flag value");
        match argv[i].as_str() {
            "--runs" => a.runs = v,
            "--docs" => a.docs = v,
            "--lookups" => a.lookups = v,
            "--batch" => a.batch = v,
            "--value-size" => a.value_size = v,
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Insert batch number `n` (ids `n*batch ..`), each document `{_id, p: payload}`.
fn batch_docs(n: usize, args: &Args, payload: &str) -> Vec<Document> {
    let first = (n * args.batch) as i64;
    (0..args.batch)
        .map(|k| doc! {"_id": first + k as i64, "p": payload})
        .collect()
}

/// Inserts `docs` documents of about `value_size` bytes in batches; returns docs/s.
async fn router_insert(coll: &mongodb::Collection<Document>, args: &Args) -> f64 {
    let payload = "x".repeat(args.value_size);
    let started = Instant::now();
    for n in 0..args.docs / args.batch {
        coll.insert_many(batch_docs(n, args, &payload))
            .await
            .unwrap();
    }
    (args.docs / args.batch * args.batch) as f64 / started.elapsed().as_secs_f64()
}

/// The shard's command layer alone (no driver, no router, no network): the same insert
/// batches handed straight to `Node::run_command`; returns docs/s. Shows how much of the
/// gap to raw WiredTiger is spent above the shard.
fn shard_only_insert(dir: &std::path::Path, args: &Args) -> f64 {
    let kind = shard::EngineKind::WiredTiger {
        dir: dir.to_path_buf(),
        cache_mb: 512,
    };
    let node = shard::Node::open(&kind, std::time::Duration::from_secs(600)).expect("open node");
    let payload = "x".repeat(args.value_size);
    let started = Instant::now();
    for n in 0..args.docs / args.batch {
        let cmd = doc! {"insert": "c", "documents": batch_docs(n, args, &payload)};
        let reply = node.run_command("bench", &cmd, shard::cursor::Deadline::default());
        assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "{reply}");
    }
    (args.docs / args.batch * args.batch) as f64 / started.elapsed().as_secs_f64()
}

/// Point `find_one` by `_id` on random existing ids, one client; returns ops/s.
async fn router_point_find(coll: &mongodb::Collection<Document>, args: &Args) -> f64 {
    let mut rng = storage::xorshift::Rng::new(0x9E3779B97F4A7C15);
    let inserted = (args.docs / args.batch * args.batch) as u64;
    let started = Instant::now();
    for _ in 0..args.lookups {
        let id = (rng.next() % inserted) as i64;
        let d = coll.find_one(doc! {"_id": id}).await.unwrap();
        assert!(d.is_some(), "document {id} missing");
    }
    args.lookups as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let (mut ins, mut get, mut raw_ins, mut raw_get, mut shard_ins) =
        (vec![], vec![], vec![], vec![], vec![]);
    for run in 1..=args.runs {
        let cluster = TestCluster::start().await;
        let coll = cluster
            .client()
            .await
            .database("bench")
            .collection::<Document>("c");
        let i = router_insert(&coll, &args).await;
        let g = router_point_find(&coll, &args).await;
        cluster.stop().await;

        let dir = tempfile::tempdir().unwrap();
        let (docs, lookups, vs, batch) = (args.docs, args.lookups, args.value_size, args.batch);
        let path = dir.path().to_path_buf();
        let shard_args = args;
        let (ri, rg, si) = tokio::task::spawn_blocking(move || {
            let ri = storage::rawbench::raw_insert(&path.join("ins"), docs, vs, batch);
            let rg = storage::rawbench::raw_point_get(&path.join("get"), docs, vs, lookups);
            let si = shard_only_insert(&path.join("shard"), &shard_args);
            (ri, rg, si)
        })
        .await
        .unwrap();
        println!("run {run}: router insert {i:.0} docs/s, shard-only insert {si:.0} docs/s, router find_one {g:.0} ops/s, raw WT insert {ri:.0} rows/s, raw WT get {rg:.0} ops/s");
        shard_ins.push(si);
        ins.push(i);
        get.push(g);
        raw_ins.push(ri);
        raw_get.push(rg);
    }
    let (i, g, ri, rg, si) = (
        median(ins),
        median(get),
        median(raw_ins),
        median(raw_get),
        median(shard_ins),
    );
    println!();
    println!(
        "medians of {} runs ({} docs of {} B, batches of {}, {} lookups):",
        args.runs, args.docs, args.value_size, args.batch, args.lookups
    );
    println!("  insert_many via router : {i:>12.0} docs/s");
    println!("  raw WiredTiger insert  : {ri:>12.0} rows/s");
    println!("  ratio                  : {:>12.3}", i / ri);
    println!(
        "  shard layer only       : {si:>12.0} docs/s (ratio {:.3}; no driver, router or network)",
        si / ri
    );
    println!("  find_one via router    : {g:>12.0} ops/s");
    println!("  raw WiredTiger search  : {rg:>12.0} ops/s");
    println!("  ratio                  : {:>12.3}", g / rg);
}
