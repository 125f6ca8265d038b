//! Replication benchmark: insert_many of 1 KiB documents (batches of 100) through a
//! router into a three-member replica set on this machine, with `w:1` and with
//! `w:"majority"`, against raw WiredTiger (logged inserts) measured in the same run; the
//! p50/p99 latency of a batch; and the failover time (median of `--kills` primary kills).
//!
//!   cargo run --release -p tests --bin repl-bench [-- --docs 20000 --kills 5 --clients 8]
//!
//! Raw WiredTiger runs three times (before the set starts and twice after it stopped);
//! ratios are to the median of the three. Every phase starts with the members' caches
//! clean (a checkpoint of each), as every raw run starts in a fresh directory.
//!
//! `w:1` and `w:"majority"` come from one client (a batch at a time: latency-bound), and
//! `w:"majority"` again from `--clients` concurrent ones (throughput: proposals in flight
//! share the leader's log sync and the followers' round trip).
//!
//! All three members, the router and the driver share this machine's cores. A program
//! that prints figures, never a test that asserts timings.

use std::time::{Duration, Instant};

/// The allocator `bulwark` itself runs with (see `src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bson::{doc, Document};
use mongodb::options::{Acknowledgment, WriteConcern};
use tests::cpu::CpuTime;
use tests::disk_writes::DiskWrites;
use tests::replica_set::{TestReplicaSet, Tuning, THREE_SITES};

/// Inserts `docs` documents in batches of 100 from `clients` concurrent tasks (batch `n`
/// goes to task `n % clients`); returns docs/s, the sorted batch latencies and the CPU
/// the whole process (driver, router, members) used meanwhile, and the bytes it wrote
/// toward the disk.
async fn insert(
    coll: &mongodb::Collection<Document>,
    docs: usize,
    wc: WriteConcern,
    clients: usize,
) -> (f64, Vec<Duration>, CpuTime, u64) {
    let payload = "x".repeat(1024);
    let batches = docs / 100;
    // The documents are made before the clock starts, as the raw baseline's rows are: what
    // is timed is what the driver and the set do with them, not building them.
    let mut per_client: Vec<Vec<Vec<Document>>> = vec![Vec::new(); clients];
    for n in 0..batches {
        let batch = (0..100)
            .map(|k| doc! {"_id": (n * 100 + k) as i64, "p": &payload})
            .collect();
        per_client[n % clients].push(batch);
    }
    // For a profiler to attach to one phase (`perf record -p PID` once this is printed).
    eprintln!("timing {clients} client(s), w: {:?}", wc.w);
    let cpu = CpuTime::now();
    let written = DiskWrites::now();
    let started = Instant::now();
    let tasks: Vec<_> = per_client
        .into_iter()
        .map(|client_batches| {
            let (coll, wc) = (coll.clone(), wc.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                for batch in &client_batches {
                    let t = Instant::now();
                    coll.insert_many(batch)
                        .write_concern(wc.clone())
                        .await
                        .expect("insert");
                    lat.push(t.elapsed());
                }
                // Freed after the clock stops, as they were made before it started.
                (lat, client_batches)
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut sent = Vec::new();
    for t in tasks {
        let (l, batches) = t.await.expect("insert task");
        lat.extend(l);
        sent.push(batches);
    }
    let rate = (batches * 100) as f64 / started.elapsed().as_secs_f64();
    let cpu = CpuTime::now().since(cpu);
    let written = DiskWrites::now().since(written);
    lat.sort();
    (rate, lat, cpu, written)
}

/// One raw WiredTiger run of `docs` logged inserts in a fresh directory: rows/s and the
/// CPU it took (around the whole call, open and close too, which are small beside the
/// load).
async fn raw_baseline(docs: usize) -> (f64, CpuTime) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let cpu = CpuTime::now();
    let rate =
        tokio::task::spawn_blocking(move || storage::rawbench::raw_insert(&path, docs, 1024, 100))
            .await
            .unwrap();
    (rate, CpuTime::now().since(cpu))
}

/// Checkpoints every member, so that the next phase starts with clean caches, as each raw
/// run starts in a fresh directory. Without it a phase also wrote out the pages the phases
/// before it left dirty: the 8-client phase wrote 8.8-10.9 KiB a document instead of
/// 5.3-6.1, at 15.3-16.6 us of CPU a document instead of 11.7-13.4. A phase
/// still writes out its own pages: WiredTiger evicts them as its tables grow.
async fn settle(set: &TestReplicaSet) {
    for i in 0..3 {
        if let Some(m) = set.member(i) {
            let engine = m.node.engine.clone();
            tokio::task::spawn_blocking(move || engine.checkpoint())
                .await
                .expect("checkpoint task")
                .expect("checkpoint");
        }
    }
}

#[tokio::main]
async fn main() {
    let docs = tests::flag("--docs", 20_000);
    let kills = tests::flag("--kills", 5);
    let clients = tests::flag("--clients", 8).max(1);
    // The baseline is measured three times, once before the set starts and twice after it
    // stopped, and the ratios use the median: on these shared guests one raw run moved between
    // 263,000 and 807,000 rows a second within an hour, far more than the set did.
    // WiredTiger's first open in a process spends about 0.7 s of CPU once
    // (`__wt_global_once`, calibrating its clock); paid here, it would otherwise be
    // charged to the first baseline run's CPU per row (15-17 us instead of 3).
    raw_baseline(1).await;
    let mut raw_runs = vec![raw_baseline(docs).await];
    // Members get the shard's default cache, as large as the raw baseline's.
    let tuning = Tuning {
        cache_mb: storage::rawbench::BENCH_CACHE_MB,
        ..Tuning::default()
    };
    let mut set = TestReplicaSet::start_tuned(&THREE_SITES, tuning).await;
    set.wait_for_primary(Duration::from_secs(30))
        .await
        .expect("primary");
    // The highest term any member is in: a rise during the phases is an election under
    // load (a primary that stalled for about an election timeout loses its place).
    let term = |set: &TestReplicaSet| (0..3).map(|i| set.status(i).term).max().unwrap_or(0);
    let term_before = term(&set);
    let client = set.client(0, "").await;
    let db = client.database("bench");
    let w1 = WriteConcern::builder().w(Acknowledgment::Nodes(1)).build();
    settle(&set).await;
    let (r1, l1, c1, d1) = insert(&db.collection("w1"), docs, w1, 1).await;
    settle(&set).await;
    let majority = WriteConcern::majority();
    let (rm, lm, cm, dm) = insert(&db.collection("wmajority"), docs, majority.clone(), 1).await;
    settle(&set).await;
    let (rn, ln, cn, dn) = insert(&db.collection("wmajority_n"), docs, majority, clients).await;
    let term_after = term(&set);
    // Where the batches' time went, by the router's histograms (shard queue, execution,
    // replication, whole command), over all three phases.
    let status = client
        .database("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .expect("serverStatus");
    let waits = status
        .get_document("bulwark")
        .and_then(|b| b.get_document("waits"))
        .cloned()
        .unwrap_or_default();

    let mut failovers = Vec::new();
    for _ in 0..kills {
        let Some(p) = set.primary() else { break };
        let killed = Instant::now();
        set.kill(p).await;
        let (_, _) = set
            .wait_for_primary(Duration::from_secs(30))
            .await
            .expect("a new primary");
        failovers.push(killed.elapsed());
        set.restart(p).await;
        // Let the restarted member catch up before the next kill.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    set.stop().await;
    failovers.sort();

    // Never while the set runs: its idle members would take from the baseline.
    raw_runs.push(raw_baseline(docs).await);
    raw_runs.push(raw_baseline(docs).await);
    let all_raw: Vec<String> = raw_runs.iter().map(|(r, _)| format!("{r:.0}")).collect();
    raw_runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (raw, raw_cpu) = raw_runs[raw_runs.len() / 2];

    println!("three-member replica set, one router, driver in process ({docs} docs of 1 KiB, batches of 100):");
    println!(
        "  raw WiredTiger insert (logged)  : {raw:>10.0} rows/s  {}  median of [{}] (before the set, after it, after it)",
        raw_cpu.per_doc(docs),
        all_raw.join(", ")
    );
    let concurrent = format!("w:\"majority\" x{clients}");
    // `insert` writes whole batches of 100.
    let inserted = docs / 100 * 100;
    for (label, rate, lat, cpu, written) in [
        ("w:1", r1, &l1, c1, d1),
        ("w:\"majority\"", rm, &lm, cm, dm),
        (concurrent.as_str(), rn, &ln, cn, dn),
    ] {
        println!(
            "  insert_many {label:<17}  : {rate:>10.0} docs/s  ratio {:.3}  batch p50 {:?} p99 {:?}  {} (= {:.1} raw rows)  written {:.2} KiB/doc",
            rate / raw,
            tests::percentile(lat, 0.5),
            tests::percentile(lat, 0.99),
            cpu.per_doc(inserted),
            cpu.us_per_doc(inserted) / raw_cpu.us_per_doc(docs),
            written as f64 / 1024.0 / inserted as f64
        );
    }
    // Raw WiredTiger keeps both cores busy too (its eviction threads beside the inserting
    // one), so with the cores saturated the ratio is about the raw row's CPU over the
    // document's: 0.20 needs a replicated document to cost at most five raw rows, three of
    // which are the three members' own inserts.
    println!(
        "  (with the cores busy, as with 8 clients, the ratio is at most 1 / raw rows a document)"
    );
    println!(
        "  elections during the phases     : {} (highest term {term_before} -> {term_after})",
        term_after - term_before
    );
    for (name, histogram) in &waits {
        println!("  router waits {name:<13}: {histogram}");
    }
    if !failovers.is_empty() {
        println!(
            "  failover (kill primary -> new writable primary), median of {}: {:?}  (all: {:?})",
            failovers.len(),
            failovers[failovers.len() / 2],
            failovers
        );
    }
}
