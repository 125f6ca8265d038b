//! Transaction benchmark: one-document updates against two-document transactions on one
//! shard (a three-member replica set on this machine, through a router), both
//! majority-acknowledged, from `--clients` concurrent clients on documents of their own
//! (no conflicts). Prints throughput, p50 and p99 latency, and the transactions' ratios to
//! the updates measured in the same run, as medians of `--runs` runs of each, taken in
//! turns so both see the same machine.
//!
//!   cargo run --release -p tests --bin txn-bench [-- --ops 2000 --clients 8 --runs 3]
//!
//! An update is one round trip and one replicated entry. A two-document transaction is
//! three round trips (two statements and the commit) and one replicated entry (the
//! commit). Transactions across shards are not built yet (statements reaching a second
//! shard are refused), so there is no cross-shard row. A program that prints figures,
//! never a test that asserts timings.

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bson::{doc, Document};
use mongodb::{Client, Collection};
use tests::replica_set::{TestReplicaSet, Tuning, THREE_SITES};

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

/// One unit of work by client `c`, its `i`th.
#[derive(Clone, Copy)]
enum Work {
    Update,
    Transaction,
}

async fn one(client: &Client, coll: &Collection<Document>, work: Work, c: usize) {
    let (a, b) = (c as i64 * 2, c as i64 * 2 + 1);
    match work {
        Work::Update => {
            coll.update_one(doc! {"_id": a}, doc! {"$inc": {"n": 1}})
                .await
                .expect("update");
        }
        Work::Transaction => {
            let mut s = client.start_session().await.expect("session");
            s.start_transaction().await.expect("start");
            for id in [a, b] {
                coll.update_one(doc! {"_id": id}, doc! {"$inc": {"n": 1}})
                    .session(&mut s)
                    .await
                    .expect("statement");
            }
            s.commit_transaction().await.expect("commit");
        }
    }
}

/// `ops` units of `work` spread over `clients` concurrent clients.
async fn run(
    client: &Client,
    coll: &Collection<Document>,
    work: Work,
    ops: usize,
    clients: usize,
) -> Run {
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (client, coll) = (client.clone(), coll.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..ops / clients {
                    let t = Instant::now();
                    one(&client, &coll, work, c).await;
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

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let ops = tests::flag("--ops", 2000);
    let clients = tests::flag("--clients", 8).max(1);
    let runs = tests::flag("--runs", 3).max(1);
    let tuning = Tuning {
        cache_mb: storage::rawbench::BENCH_CACHE_MB,
        ..Tuning::default()
    };
    let set = TestReplicaSet::start_tuned(&THREE_SITES, tuning).await;
    set.wait_for_primary(Duration::from_secs(30))
        .await
        .expect("primary");
    let client = set.client(0, "").await;
    let coll = client.database("bench").collection::<Document>("txn");
    let docs: Vec<Document> = (0..clients as i64 * 2)
        .map(|id| doc! {"_id": id, "n": 0})
        .collect();
    coll.insert_many(docs).await.expect("documents");
    let (mut updates, mut txns) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        updates.push(run(&client, &coll, Work::Update, ops, clients).await);
        txns.push(run(&client, &coll, Work::Transaction, ops, clients).await);
    }
    let (u, t) = (median(updates), median(txns));
    println!("txn-bench: {clients} clients, {ops} units a run, medians of {runs} runs");
    println!("| work | per second | p50 | p99 | round trips | replicated entries |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| one-document update | {:.0} | {} | {} | 1 | 1 |",
        u.rate,
        ms(u.percentile(0.5)),
        ms(u.percentile(0.99))
    );
    println!(
        "| two-document transaction, one shard | {:.0} | {} | {} | 3 | 1 |",
        t.rate,
        ms(t.percentile(0.5)),
        ms(t.percentile(0.99))
    );
    println!(
        "ratio transactions/updates: {:.3} per second, {:.3} documents per second",
        t.rate / u.rate,
        2.0 * t.rate / u.rate
    );
}
