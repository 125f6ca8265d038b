//! Sharding benchmark: for clusters of 1 to `--max-shards` shards (each a one-member
//! replica set; routers reach them over gRPC, as separate processes do), on a collection
//! sharded by a hashed `_id`:
//!
//! * targeted point reads (`find_one` by `_id`) from `--clients` concurrent clients, as
//!   operations per second (the 1-shard figure is the baseline of the ratio);
//! * scatter-gather latency: a query on a field that is not the key, which every shard
//!   answers (p50 and p99 of `--queries` sequential queries);
//! * on the 1-shard cluster, the router's added latency: the same point read sent by the
//!   driver through the router, and sent straight to the shard member over gRPC.
//!
//! * a migration on a 2-shard cluster (ranged key): the time to move a chunk of
//!   `--move-docs` documents (documents per second), and the latency of targeted writes
//!   into the moving chunk while it moves against the same writes before it (p50, p99
//!   and the longest: the critical section shows as the longest wait).
//!
//! Each figure is the median of `--runs` runs (default 3).
//!
//!   cargo run --release -p tests --bin shard-bench [-- --runs 3 --max-shards 4 --docs 5000
//!                                                     --clients 8 --secs 3 --queries 300
//!                                                     --move-docs 50000]
//!
//! This is a program that prints figures, never a test that asserts timings. All shards
//! share this machine's cores: more shards add parallel work, not CPU.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use router::shard_client::{Forward, ShardHandle};
use tests::sharded::TestShardedCluster;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    runs: usize,
    max_shards: usize,
    docs: i32,
    clients: usize,
    secs: u64,
    queries: usize,
    move_docs: i32,
}

fn parse_args() -> Args {
    let mut a = Args {
        runs: 3,
        max_shards: 4,
        docs: 5000,
        clients: 8,
        secs: 3,
        queries: 300,
        move_docs: 50_000,
    };
    for (flag, v) in tests::numeric_flags() {
        match flag.as_str() {
            "--runs" => a.runs = v as usize,
            "--max-shards" => a.max_shards = v as usize,
            "--docs" => a.docs = v as i32,
            "--clients" => a.clients = v as usize,
            "--secs" => a.secs = v,
            "--queries" => a.queries = v as usize,
            "--move-docs" => a.move_docs = v as i32,
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The `p` quantile of sorted latencies, in milliseconds.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    tests::percentile(sorted, p).as_secs_f64() * 1e3
}

/// Point reads by `_id` from `clients` tasks for `secs`: operations per second.
async fn point_reads(
    coll: &mongodb::Collection<Document>,
    docs: i32,
    clients: usize,
    secs: u64,
) -> f64 {
    let stop = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let coll = coll.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut id = c as i32 * 7919;
            while Instant::now() < stop {
                id = (id + 104_729) % docs;
                let found = coll.find_one(doc! {"_id": id}).await.expect("point read");
                assert!(found.is_some(), "document {id} is missing");
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("reader");
    }
    total as f64 / secs as f64
}

/// Sequential queries every shard must answer: (p50, p99) in ms.
async fn scatter(coll: &mongodb::Collection<Document>, queries: usize) -> (f64, f64) {
    use futures::TryStreamExt;
    let mut times = Vec::with_capacity(queries);
    for i in 0..queries {
        let started = Instant::now();
        let found: Vec<Document> = coll
            .find(doc! {"v": (i % 100) as i32})
            .limit(5)
            .await
            .expect("scatter query")
            .try_collect()
            .await
            .expect("scatter batch");
        times.push(started.elapsed());
        assert!(!found.is_empty());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// Sequential point reads through the router and straight to the shard: p50 of each, ms.
async fn router_overhead(
    cluster: &TestShardedCluster,
    coll: &mongodb::Collection<Document>,
    docs: i32,
    n: usize,
) -> (f64, f64) {
    let member = cluster.shard_hosts[0].split_once('/').unwrap().1;
    let direct = ShardHandle::connect_lazy(member, "A").expect("shard handle");
    let fwd = Forward::default();
    let mut via_router = Vec::with_capacity(n);
    let mut straight = Vec::with_capacity(n);
    for i in 0..n {
        let id = (i as i32 * 31) % docs;
        let started = Instant::now();
        coll.find_one(doc! {"_id": id}).await.expect("via router");
        via_router.push(started.elapsed());
        let cmd = doc! {"find": "c", "filter": {"_id": id}, "limit": 1, "singleBatch": true};
        let started = Instant::now();
        direct
            .run("bench", &cmd, &fwd, "bench")
            .await
            .expect("direct");
        straight.push(started.elapsed());
    }
    via_router.sort();
    straight.sort();
    (percentile(&via_router, 0.5), percentile(&straight, 0.5))
}

struct Figures {
    reads_per_sec: f64,
    scatter_p50: f64,
    scatter_p99: f64,
    overhead: Option<(f64, f64)>,
}

async fn one_run(shards: usize, a: &Args) -> Figures {
    let cluster = TestShardedCluster::start(shards, 1).await;
    let client = cluster.client(0).await;
    client
        .database("admin")
        .run_command(doc! {"shardCollection": "bench.c", "key": {"_id": "hashed"}})
        .await
        .expect("shardCollection");
    let coll = client.database("bench").collection::<Document>("c");
    let docs: Vec<Document> = (0..a.docs)
        .map(|i| doc! {"_id": i, "v": i % 100, "pad": "x".repeat(100)})
        .collect();
    for batch in docs.chunks(1000) {
        coll.insert_many(batch.to_vec()).await.expect("load");
    }
    let reads_per_sec = point_reads(&coll, a.docs, a.clients, a.secs).await;
    let (scatter_p50, scatter_p99) = scatter(&coll, a.queries).await;
    let overhead = if shards == 1 {
        Some(router_overhead(&cluster, &coll, a.docs, 2000).await)
    } else {
        None
    };
    drop(coll);
    drop(client);
    cluster.stop().await;
    Figures {
        reads_per_sec,
        scatter_p50,
        scatter_p99,
        overhead,
    }
}

/// Latencies of targeted updates into keys `[0, docs)` until `stop`, in ms, sorted.
async fn writes_until(
    coll: mongodb::Collection<Document>,
    docs: i32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<f64> {
    let mut times = Vec::new();
    let mut k = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        k = (k + 7919) % docs;
        let started = Instant::now();
        coll.update_one(doc! {"k": k}, doc! {"$inc": {"n": 1}})
            .await
            .expect("write during the migration");
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times
}

struct Move {
    docs_per_sec: f64,
    idle: (f64, f64, f64),
    moving: (f64, f64, f64),
}

/// (p50, p99, max) of sorted latencies.
fn spread(t: &[f64]) -> (f64, f64, f64) {
    let at = |p: f64| t[((t.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99), t[t.len() - 1])
}

async fn migration_run(a: &Args) -> Move {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let cluster = TestShardedCluster::start(2, 1).await;
    let client = cluster.client(0).await;
    let coll = client.database("bench").collection::<Document>("m");
    let docs: Vec<Document> = (0..a.move_docs)
        .map(|i| doc! {"_id": i, "k": i, "n": 0, "pad": "x".repeat(100)})
        .collect();
    for batch in docs.chunks(1000) {
        coll.insert_many(batch.to_vec()).await.expect("load");
    }
    tests::sharded::shard_by_k(&client, &coll).await;
    let admin = client.database("admin");
    let chunk = client
        .database("config")
        .collection::<Document>("chunks")
        .find_one(doc! {"ns": "bench.m"})
        .await
        .expect("chunk")
        .expect("one chunk");
    let from = chunk.get_str("shard").expect("shard").to_string();
    let to = if from == "shard0" { "shard1" } else { "shard0" };
    let measure =
        |stop: Arc<AtomicBool>| tokio::spawn(writes_until(coll.clone(), a.move_docs, stop));
    let stop = Arc::new(AtomicBool::new(false));
    let idle = measure(stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let idle = idle.await.expect("idle writer");
    let stop = Arc::new(AtomicBool::new(false));
    let moving = measure(stop.clone());
    let started = Instant::now();
    admin
        .run_command(doc! {"moveChunk": "bench.m", "find": {"k": 0}, "to": to})
        .await
        .expect("moveChunk");
    let took = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let moving = moving.await.expect("writer during the move");
    drop(coll);
    drop(client);
    cluster.stop().await;
    Move {
        docs_per_sec: a.move_docs as f64 / took,
        idle: spread(&idle),
        moving: spread(&moving),
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = parse_args();
    println!(
        "shard-bench: {} docs, {} clients x {} s of point reads, {} scatter queries, median of {} runs",
        a.docs, a.clients, a.secs, a.queries, a.runs
    );
    println!("shards  point reads/s  vs 1 shard  scatter p50 ms  scatter p99 ms");
    let mut baseline = None;
    let mut overhead = Vec::new();
    for shards in 1..=a.max_shards {
        let mut runs = Vec::new();
        for _ in 0..a.runs {
            runs.push(one_run(shards, &a).await);
        }
        let reads = median(runs.iter().map(|f| f.reads_per_sec).collect());
        let p50 = median(runs.iter().map(|f| f.scatter_p50).collect());
        let p99 = median(runs.iter().map(|f| f.scatter_p99).collect());
        overhead.extend(runs.iter().filter_map(|f| f.overhead));
        let base = *baseline.get_or_insert(reads);
        println!(
            "{shards:>6}  {reads:>13.0}  {:>10.2}  {p50:>14.2}  {p99:>14.2}",
            reads / base
        );
    }
    if !overhead.is_empty() {
        let routed = median(overhead.iter().map(|o| o.0).collect());
        let direct = median(overhead.iter().map(|o| o.1).collect());
        println!(
            "router added latency (1 shard, point read p50): via router {routed:.3} ms, straight to the shard over gRPC {direct:.3} ms, added {:.3} ms",
            routed - direct
        );
    }
    let mut moves = Vec::new();
    for _ in 0..a.runs {
        moves.push(migration_run(&a).await);
    }
    let m = |f: &dyn Fn(&Move) -> f64| median(moves.iter().map(f).collect());
    println!(
        "migration (2 shards, {} docs of ~130 B in one chunk): {:.0} docs/s moved; targeted writes into it \
         before: p50 {:.2} ms p99 {:.2} ms max {:.1} ms; while it moves: p50 {:.2} ms p99 {:.2} ms max {:.1} ms",
        a.move_docs,
        m(&|x| x.docs_per_sec),
        m(&|x| x.idle.0),
        m(&|x| x.idle.1),
        m(&|x| x.idle.2),
        m(&|x| x.moving.0),
        m(&|x| x.moving.1),
        m(&|x| x.moving.2),
    );
}
