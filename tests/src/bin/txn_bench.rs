//! Transaction benchmark: one-document updates against two-document transactions on one
//! shard and across two, all majority-acknowledged, on a cluster on this machine (two
//! shards of three members each, a config server and a router), from `--clients`
//! concurrent clients on documents of their own (no conflicts). Prints throughput, p50
//! and p99 latency, and the transactions' ratios to the updates measured in the same run,
//! as medians of `--runs` runs of each, taken in turns so all see the same machine.
//!
//!   cargo run --release -p tests --bin txn-bench [-- --ops 2000 --clients 8 --runs 3]
//!
//! An update is one client round trip and one replicated entry. A two-document
//! transaction is three client round trips (two statements and the commit); on one shard
//! its commit is one replicated entry. Across shards the commit is three router→shard
//! steps one after the other (the prepares, the coordinator's commit with the decision,
//! the other commit), each a replicated entry: four entries in all. A program that prints
//! figures, never a test that asserts timings.

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bson::{doc, Document};
use mongodb::{Client, Collection};
use tests::sharded::TestShardedCluster;

/// Throughput (units a second) and the sorted latencies of one run.
struct Run {
    rate: f64,
    latencies: Vec<Duration>,
}

impl Run {
    fn percentile(&self, p: f64) -> Duration {
        tests::percentile(&self.latencies, p)
    }
}

/// One unit of work.
#[derive(Clone, Copy, Debug)]
enum Work {
    Update,
    /// Two documents of shard 0.
    OneShard,
    /// A document of each shard.
    TwoShards,
}

/// Client `c`'s unit of `work` on `colls` (a collection on each shard).
async fn one(client: &Client, colls: &[Collection<Document>; 2], work: Work, c: usize) {
    let (a, b) = (c as i64 * 2, c as i64 * 2 + 1);
    let inc = doc! {"$inc": {"n": 1}};
    let docs = match work {
        Work::Update => {
            colls[0]
                .update_one(doc! {"_id": a}, inc)
                .await
                .expect("update");
            return;
        }
        Work::OneShard => [(&colls[0], a), (&colls[0], b)],
        Work::TwoShards => [(&colls[0], a), (&colls[1], a)],
    };
    // Run again whole on an error that says so, as the drivers' callback API does (a
    // change of primary aborts open transactions): counted, never hidden.
    loop {
        match transaction(client, &docs, &inc).await {
            Ok(()) => return,
            Err(e) if e.contains_label(mongodb::error::TRANSIENT_TRANSACTION_ERROR) => {
                RETRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => panic!("{work:?}: {e}"),
        }
    }
}

/// Transactions run again after a transient error.
static RETRIED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn transaction(
    client: &Client,
    docs: &[(&Collection<Document>, i64); 2],
    inc: &Document,
) -> mongodb::error::Result<()> {
    let mut s = client.start_session().await?;
    s.start_transaction().await?;
    for (coll, id) in docs {
        coll.update_one(doc! {"_id": *id}, inc.clone())
            .session(&mut s)
            .await?;
    }
    s.commit_transaction().await
}

/// `ops` units of `work` spread over `clients` concurrent clients.
async fn run(
    client: &Client,
    colls: &[Collection<Document>; 2],
    work: Work,
    ops: usize,
    clients: usize,
) -> Run {
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (client, colls) = (client.clone(), colls.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..ops / clients {
                    let t = Instant::now();
                    one(&client, &colls, work, c).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("client"));
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    Run { rate, latencies }
}

fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs.swap_remove(runs.len() / 2)
}

#[tokio::main]
async fn main() {
    let (ops, clients, runs) = tests::bench_flags();
    let cluster = TestShardedCluster::start_with(2, 1, 3).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    for k in 0..2 {
        let primary =
            doc! {"enableSharding": format!("bench_{k}"), "primaryShard": format!("shard{k}")};
        admin.run_command(primary).await.expect("database");
    }
    let colls = [0, 1].map(|k| {
        client
            .database(&format!("bench_{k}"))
            .collection::<Document>("txn")
    });
    let docs: Vec<Document> = (0..clients as i64 * 2)
        .map(|id| doc! {"_id": id, "n": 0})
        .collect();
    for coll in &colls {
        coll.insert_many(docs.clone()).await.expect("documents");
    }
    let mut results: [Vec<Run>; 3] = Default::default();
    for _ in 0..runs {
        for (i, work) in [Work::Update, Work::OneShard, Work::TwoShards]
            .into_iter()
            .enumerate()
        {
            results[i].push(run(&client, &colls, work, ops, clients).await);
        }
    }
    let [u, one, two] = results.map(median);
    println!("txn-bench: {clients} clients, {ops} units a run, medians of {runs} runs");
    println!("| work | per second | p50 | p99 | client round trips | replicated entries |");
    println!("|---|---|---|---|---|---|");
    for (name, r, trips, entries) in [
        ("one-document update", &u, 1, 1),
        ("two-document transaction, one shard", &one, 3, 1),
        ("two-document transaction, two shards", &two, 3, 4),
    ] {
        println!(
            "| {name} | {:.0} | {} | {} | {trips} | {entries} |",
            r.rate,
            tests::ms(r.percentile(0.5)),
            tests::ms(r.percentile(0.99))
        );
    }
    println!(
        "ratio transactions/updates: one shard {:.3}, two shards {:.3} per second",
        one.rate / u.rate,
        two.rate / u.rate
    );
    println!(
        "ratio two shards/one shard: {:.3} per second, p50 {:.2}x",
        two.rate / one.rate,
        two.percentile(0.5).as_secs_f64() / one.percentile(0.5).as_secs_f64()
    );
    println!(
        "transactions run again after a transient error: {}",
        RETRIED.load(std::sync::atomic::Ordering::Relaxed)
    );
    cluster.stop().await;
}
