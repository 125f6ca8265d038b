//! CRUD benchmark: the router path (Rust driver → router → shard → WiredTiger; the shard
//! reached in-process as in `bulwark local`, and over gRPC as separate processes do)
//! against raw WiredTiger through wiredtiger-sys, measured in the same run on the same
//! machine, with the ratio of each pair. Prints the median of `--runs` runs (default 3).
//! Inserts are measured from one client (every stage waits for the one before it, so the
//! figure is a latency) and from `--clients` concurrent ones (throughput, both cores).
//!
//!   cargo run --release -p tests --bin crud-bench [-- --runs 3 --docs 100000 --lookups 20000
//!                                                    --clients 4 --insert-only 0]
//!
//! This is a program that prints figures, never a test that asserts timings.

use std::time::Instant;

/// Threads of the second raw insert baseline: one per core of the 2-core machines the
/// figures come from, so N router clients (which use both cores) are compared with raw
/// WiredTiger using both cores too.
const RAW_THREADS: usize = 2;

/// The allocator `bulwark` itself runs with (see `src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bson::{doc, Document};
use tests::cpu::CpuTime;
use tests::{Link, Storage, TestCluster};

#[derive(Clone, Copy)]
struct Args {
    runs: usize,
    docs: usize,
    lookups: usize,
    batch: usize,
    value_size: usize,
    /// Concurrent inserting clients for the second insert figure.
    clients: usize,
    /// `--insert-only 1`: only the N-client insert through the in-process router, for
    /// profiling that path alone.
    insert_only: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        runs: 3,
        docs: 100_000,
        lookups: 20_000,
        batch: 100,
        value_size: 1024,
        clients: 4,
        insert_only: false,
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
            "--clients" => a.clients = v,
            "--insert-only" => a.insert_only = v != 0,
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

/// Inserts `docs` documents of about `value_size` bytes in batches from `clients`
/// concurrent tasks (batch `n` goes to task `n % clients`); returns docs/s. The documents
/// are built before the clock starts, as the raw baseline's values are: the figure is
/// the driver's encoding, the router, the shard and storage, not the making of test data.
/// Also returns the CPU the whole process used meanwhile, in microseconds per document.
async fn router_insert(
    coll: &mongodb::Collection<Document>,
    args: &Args,
    clients: usize,
) -> (f64, f64) {
    let batches = args.docs / args.batch;
    let payload = "x".repeat(args.value_size);
    let work: Vec<Vec<Vec<Document>>> = (0..clients)
        .map(|c| {
            (c..batches)
                .step_by(clients)
                .map(|n| batch_docs(n, args, &payload))
                .collect()
        })
        .collect();
    if args.insert_only {
        // For a profiler attached now (see docs/benchmarks.md): setup is over.
        eprintln!("timing inserts");
    }
    let cpu = CpuTime::now();
    let started = Instant::now();
    let tasks: Vec<_> = work
        .into_iter()
        .map(|batches| {
            let coll = coll.clone();
            tokio::spawn(async move {
                for batch in &batches {
                    coll.insert_many(batch).await.unwrap();
                }
                // Freed after the clock stops, as they were made before it started.
                batches
            })
        })
        .collect();
    let mut sent = Vec::with_capacity(tasks.len());
    for t in tasks {
        sent.push(t.await.unwrap());
    }
    let rate = (batches * args.batch) as f64 / started.elapsed().as_secs_f64();
    let cpu = CpuTime::now().since(cpu);
    drop(sent);
    (rate, cpu.us_per_doc(batches * args.batch))
}

/// The shard's command layer alone (no driver, no router, no network): the same insert
/// batches handed straight to `Node::run_command`; returns docs/s. Shows how much of the
/// gap to raw WiredTiger is spent above the shard.
fn shard_only_insert(dir: &std::path::Path, args: &Args) -> f64 {
    let kind = shard::EngineKind::WiredTiger {
        dir: dir.to_path_buf(),
        cache_mb: storage::rawbench::BENCH_CACHE_MB,
    };
    let node = shard::Node::open(&kind, std::time::Duration::from_secs(600)).expect("open node");
    let payload = "x".repeat(args.value_size);
    let started = Instant::now();
    for n in 0..args.docs / args.batch {
        let cmd = doc! {"insert": "c", "documents": batch_docs(n, args, &payload)};
        let reply = node.run_command("bench", &cmd, shard::control::deadline::Deadline::default());
        assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "{reply}");
    }
    (args.docs / args.batch * args.batch) as f64 / started.elapsed().as_secs_f64()
}

/// `ping` answered by the router itself, one client; returns ops/s. The driver + router
/// round trip without the shard hop: the floor under every other figure.
async fn router_ping(db: &mongodb::Database, args: &Args) -> f64 {
    let started = Instant::now();
    for _ in 0..args.lookups {
        db.run_command(doc! {"ping": 1}).await.unwrap();
    }
    args.lookups as f64 / started.elapsed().as_secs_f64()
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

/// The shard's WiredTiger cache is the raw baseline's (and the shard's default), so both
/// sides evict (or not) alike.
fn bench_storage() -> Storage {
    Storage::WiredTigerCache(storage::rawbench::BENCH_CACHE_MB)
}

/// Figures of one run, by name, in print order.
type Figures = Vec<(&'static str, f64)>;

/// Insert, find_one and ping through a router whose shard link is `link`.
async fn router_figures(link: Link, args: &Args, out: &mut Figures) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = TestCluster::start_with(dir.path(), bench_storage(), link).await;
    let db = cluster.client().await.database("bench");
    let coll = db.collection::<Document>("c");
    let (insert, insert_n, find, ping) = match link {
        Link::InProcess => ("insert", "insert xN", "find_one", "ping"),
        Link::Grpc => (
            "insert (gRPC)",
            "insert xN (gRPC)",
            "find_one (gRPC)",
            "ping (gRPC)",
        ),
    };
    out.push((insert, router_insert(&coll, args, 1).await.0));
    coll.drop().await.unwrap();
    let (rate, cpu) = router_insert(&coll, args, args.clients).await;
    out.push((insert_n, rate));
    if link == Link::InProcess {
        out.push(("cpu insert xN", cpu));
    }
    out.push((find, router_point_find(&coll, args).await));
    out.push((ping, router_ping(&db, args).await));
    cluster.stop().await;
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    if args.insert_only {
        let dir = tempfile::tempdir().unwrap();
        let cluster = TestCluster::start_with(dir.path(), bench_storage(), Link::InProcess).await;
        let coll = cluster.client().await.database("bench").collection("c");
        let (rate, cpu) = router_insert(&coll, &args, args.clients).await;
        println!(
            "insert_many, {} clients: {rate:.0} docs/s, {cpu:.1} us CPU per document",
            args.clients
        );
        cluster.stop().await;
        return;
    }
    let mut runs: Vec<Figures> = Vec::new();
    for run in 1..=args.runs {
        let mut f = Figures::new();
        router_figures(Link::InProcess, &args, &mut f).await;
        router_figures(Link::Grpc, &args, &mut f).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let a = args;
        let raw = tokio::task::spawn_blocking(move || {
            // Around the whole call, as `router_insert` measures around its whole load.
            let cpu = CpuTime::now();
            let raw_1 =
                storage::rawbench::raw_insert(&path.join("ins"), a.docs, a.value_size, a.batch);
            let raw_1_cpu = CpuTime::now().since(cpu).us_per_doc(a.docs);
            let cpu = CpuTime::now();
            let raw_n = storage::rawbench::raw_insert_threads(
                &path.join("insn"),
                a.docs,
                a.value_size,
                a.batch,
                RAW_THREADS,
            );
            let raw_n_cpu = CpuTime::now().since(cpu).us_per_doc(a.docs);
            [
                ("raw insert", raw_1),
                ("cpu raw insert", raw_1_cpu),
                ("raw insert xN", raw_n),
                ("cpu raw insert xN", raw_n_cpu),
                (
                    "raw get",
                    storage::rawbench::raw_point_get(
                        &path.join("get"),
                        a.docs,
                        a.value_size,
                        a.lookups,
                    ),
                ),
                (
                    "shard-only insert",
                    shard_only_insert(&path.join("shard"), &a),
                ),
            ]
        })
        .await
        .unwrap();
        f.extend(raw);
        let line: Vec<String> = f.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
        println!("run {run}: {}", line.join(", "));
        runs.push(f);
    }
    let m = |name: &str| {
        median(
            runs.iter()
                .flat_map(|f| f.iter().filter(|(k, _)| *k == name).map(|(_, v)| *v))
                .collect(),
        )
    };
    let (raw_ins, raw_get) = (m("raw insert"), m("raw get"));
    println!();
    println!(
        "medians of {} runs ({} docs of {} B, batches of {}, {} lookups, N = {} clients):",
        args.runs, args.docs, args.value_size, args.batch, args.lookups, args.clients
    );
    println!("  raw WiredTiger insert          : {raw_ins:>10.0} rows/s");
    println!(
        "  raw WiredTiger insert, {RAW_THREADS} thr.  : {:>10.0} rows/s",
        m("raw insert xN")
    );
    println!("  raw WiredTiger search          : {raw_get:>10.0} ops/s");
    // The ratio is the median of each run's own ratio: the raw baseline moves with the
    // machine's other load (it varied by 1.6x between runs here), so a figure is only
    // compared with the baseline measured next to it.
    let ratio = |name: &str, base: &str| {
        let get = |f: &Figures, n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        median(
            runs.iter()
                .filter_map(|f| Some(get(f, name)? / get(f, base)?))
                .collect(),
        )
    };
    for (label, name, base) in [
        ("insert_many via router", "insert", "raw insert"),
        (
            "insert_many via router, gRPC",
            "insert (gRPC)",
            "raw insert",
        ),
        ("insert_many, N clients", "insert xN", "raw insert"),
        (
            "insert_many, N clients / raw xN",
            "insert xN",
            "raw insert xN",
        ),
        (
            "insert_many, N clients, gRPC",
            "insert xN (gRPC)",
            "raw insert",
        ),
        (
            "shard layer only (no router)",
            "shard-only insert",
            "raw insert",
        ),
        ("find_one via router", "find_one", "raw get"),
        ("find_one via router, gRPC", "find_one (gRPC)", "raw get"),
    ] {
        println!(
            "  {label:<30} : {:>10.0} /s   ratio to raw {:.3}",
            m(name),
            ratio(name, base)
        );
    }
    println!("  ping (router only)             : {:>10.0} /s", m("ping"));
    println!(
        "  ping (router only), gRPC setup : {:>10.0} /s",
        m("ping (gRPC)")
    );
    // CPU per document moves less with the host than throughput does (time the host gives
    // other guests is no one's CPU here), so it compares two builds in fewer runs.
    // Printed as raw / router, like the throughput ratios: the router path's share of
    // raw WiredTiger's efficiency.
    println!(
        "  CPU per document, N clients    : {:>10.1} us   raw {:.1} us (ratio {:.3}), raw xN {:.1} us (ratio {:.3})",
        m("cpu insert xN"),
        m("cpu raw insert"),
        m("cpu raw insert") / m("cpu insert xN"),
        m("cpu raw insert xN"),
        m("cpu raw insert xN") / m("cpu insert xN")
    );
}
