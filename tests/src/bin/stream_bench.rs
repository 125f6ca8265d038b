//! Change stream benchmark: majority-acknowledged inserts from `--clients` concurrent
//! clients into a collection of one shard of a two-shard cluster on this machine (three
//! members a shard, a config server, a router), with and without one consumer watching
//! the collection through the router (`router/src/sharding/change_stream.rs`: the stream
//! is opened on both shards and merged, so the idle shard is asked to reach each event's
//! time). Runs of each are taken in turns so all see the same machine; prints medians of
//! `--runs` runs.
//!
//!   cargo run --release -p tests --bin stream-bench [-- --ops 2000 --clients 8 --runs 3]
//!
//! Reported: inserts a second with no consumer (the baseline) and with one, their ratio,
//! events a second delivered to the consumer, and the lag from an insert's
//! acknowledgement to the consumer holding its event, p50 and p99 (an event can arrive
//! before its acknowledgement: that lag counts as zero). A program that prints figures,
//! never a test that asserts timings.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bson::{doc, Document};
use futures::StreamExt;
use mongodb::Collection;
use tests::sharded::TestShardedCluster;

/// When each insert (by `_id`) was acknowledged.
type Acks = Arc<Mutex<HashMap<i64, Instant>>>;

struct Run {
    inserts_per_sec: f64,
    events_per_sec: f64,
    /// Sorted.
    lags: Vec<Duration>,
}

/// `ops` inserts from `clients` clients, ids from `first`; the rate and when each was
/// acknowledged.
async fn insert_load(
    coll: &Collection<Document>,
    (first, ops, clients): (i64, usize, usize),
) -> (f64, Acks, Instant) {
    let acks: Acks = Arc::default();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (coll, acks) = (coll.clone(), acks.clone());
            tokio::spawn(async move {
                for i in 0..ops / clients {
                    let id = first + (i * clients + c) as i64;
                    coll.insert_one(doc! {"_id": id, "pad": "x".repeat(100)})
                        .await
                        .expect("insert");
                    acks.lock().unwrap().insert(id, Instant::now());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client");
    }
    let rate = (ops / clients * clients) as f64 / started.elapsed().as_secs_f64();
    (rate, acks, started)
}

/// One run with a consumer: it must see every insert.
async fn watched(coll: &Collection<Document>, first: i64, ops: usize, clients: usize) -> Run {
    let mut stream = coll.watch().await.expect("watch");
    let expected = ops / clients * clients;
    let consumer = tokio::spawn(async move {
        let mut seen = Vec::with_capacity(expected);
        while seen.len() < expected {
            let limit = Duration::from_secs(60);
            let e = tokio::time::timeout(limit, stream.next())
                .await
                .expect("an event within 60 s")
                .expect("open")
                .expect("event");
            let id = e
                .document_key
                .and_then(|k| k.get_i64("_id").ok())
                .expect("_id");
            seen.push((id, Instant::now()));
        }
        seen
    });
    let (rate, acks, started) = insert_load(coll, (first, ops, clients)).await;
    let seen = consumer.await.expect("consumer");
    let last = seen.last().map(|(_, t)| *t).unwrap_or(started);
    let acks = acks.lock().unwrap();
    let mut lags: Vec<Duration> = seen
        .iter()
        .map(|(id, at)| at.saturating_duration_since(acks[id]))
        .collect();
    lags.sort();
    Run {
        inserts_per_sec: rate,
        events_per_sec: seen.len() as f64 / last.duration_since(started).as_secs_f64(),
        lags,
    }
}

fn median_by(runs: &mut [f64]) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

#[tokio::main]
async fn main() {
    let (ops, clients, runs) = tests::bench_flags();
    let cluster = TestShardedCluster::start_with(2, 1, 3).await;
    let client = cluster.client(0).await;
    let admin = client.database("admin");
    let primary = doc! {"enableSharding": "bench_stream", "primaryShard": "shard0"};
    admin.run_command(primary).await.expect("database");
    let coll = client
        .database("bench_stream")
        .collection::<Document>("events");
    let (mut plain, mut with, mut events) = (Vec::new(), Vec::new(), Vec::new());
    let mut watched_runs = Vec::new();
    let mut next_id = 0i64;
    for _ in 0..runs {
        plain.push(insert_load(&coll, (next_id, ops, clients)).await.0);
        next_id += ops as i64;
        let r = watched(&coll, next_id, ops, clients).await;
        next_id += ops as i64;
        with.push(r.inserts_per_sec);
        events.push(r.events_per_sec);
        watched_runs.push(r);
    }
    let (plain, with, events) = (
        median_by(&mut plain),
        median_by(&mut with),
        median_by(&mut events),
    );
    watched_runs.sort_by(|a, b| a.lags[a.lags.len() / 2].cmp(&b.lags[b.lags.len() / 2]));
    let mid = &watched_runs[watched_runs.len() / 2];
    println!("stream-bench: {clients} clients, {ops} inserts a run, medians of {runs} runs");
    println!("| measure | value |");
    println!("|---|---|");
    println!("| inserts/s, no consumer | {plain:.0} |");
    println!("| inserts/s, one consumer | {with:.0} |");
    println!("| ratio with/without consumer | {:.3} |", with / plain);
    println!("| events/s delivered to the consumer | {events:.0} |");
    println!(
        "| lag, acknowledgement to delivery, p50 | {} |",
        tests::ms(tests::percentile(&mid.lags, 0.5))
    );
    println!(
        "| lag, acknowledgement to delivery, p99 | {} |",
        tests::ms(tests::percentile(&mid.lags, 0.99))
    );
    cluster.stop().await;
}
