//! Overload benchmark (issue 6; see `docs/overload.md`):
//! how much useful work gets done when clients with 100 ms deadlines offer 130% of what
//! the server can do.
//!
//! 1. Capacity: `--clients` closed-loop clients run the operation (a filtered count that
//!    scans `--docs` documents) as fast as answers come back, for `--secs`.
//! 2. Overload: requests arrive open-loop at 1.3 × capacity, each with `maxTimeMS` 100
//!    and a 100 ms client timeout. Goodput = answers that came back in time, per second.
//!
//! Run twice in one process, side by side: with the shard's admission pools (FIFO,
//! shedding what cannot finish in time) and with admission effectively off (so many
//! tickets that nothing ever queues or is shed). Prints figures; asserts nothing.
//!
//!   cargo run --release -p tests --bin overload-bench [-- --docs 20000 --secs 5 --clients 16 --tickets 0]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use mongodb::error::ErrorKind;
use tests::TestCluster;

const DEADLINE: Duration = Duration::from_millis(100);
const OVERLOAD: f64 = 1.3;

struct Args {
    docs: usize,
    secs: u64,
    clients: usize,
    /// Read tickets for the admission run (0: the shard's default).
    tickets: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        docs: 20_000,
        secs: 5,
        clients: 16,
        tickets: 0,
    };
    for (flag, v) in tests::numeric_flags() {
        match flag.as_str() {
            "--docs" => a.docs = v as usize,
            "--secs" => a.secs = v,
            "--clients" => a.clients = v as usize,
            "--tickets" => a.tickets = v as usize,
            other => panic!("unknown flag {other} (--docs, --secs, --clients, --tickets)"),
        }
    }
    a
}

/// The operation: a count that matches nothing, so it scans every document.
async fn op(coll: &mongodb::Collection<Document>, deadline: Option<Duration>) -> Result<(), i32> {
    let mut find = coll.count_documents(doc! {"v": -1});
    if let Some(d) = deadline {
        find = find.max_time(d);
    }
    match find.await {
        Ok(_) => Ok(()),
        Err(e) => Err(match *e.kind {
            ErrorKind::Command(ref c) => c.code,
            _ => -1,
        }),
    }
}

async fn capacity(coll: &mongodb::Collection<Document>, args: &Args) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(args.secs);
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let (coll, done) = (coll.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                if op(&coll, None).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / args.secs as f64
}

#[derive(Default)]
struct Outcomes {
    in_time: AtomicU64,
    shed: AtomicU64,
    expired: AtomicU64,
    client_timeout: AtomicU64,
    other: AtomicU64,
}

async fn overload(coll: &mongodb::Collection<Document>, rate: f64, secs: u64) -> Arc<Outcomes> {
    let out = Arc::new(Outcomes::default());
    let gap = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let total = (rate * secs as f64) as u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        // Open loop: arrival i is due at i × gap whatever happened to earlier ones.
        let due = started + gap * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let (coll, out) = (coll.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            match tokio::time::timeout(DEADLINE, op(&coll, Some(DEADLINE))).await {
                Ok(Ok(())) => out.in_time.fetch_add(1, Ordering::Relaxed),
                Ok(Err(462)) => out.shed.fetch_add(1, Ordering::Relaxed),
                Ok(Err(50)) => out.expired.fetch_add(1, Ordering::Relaxed),
                Ok(Err(_)) => out.other.fetch_add(1, Ordering::Relaxed),
                Err(_) => out.client_timeout.fetch_add(1, Ordering::Relaxed),
            };
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    out
}

async fn run(label: &str, admission: bool, args: &Args) {
    let c = TestCluster::builder().start().await;
    if admission {
        c.node.admission.configure(args.tickets, 0);
    } else {
        c.node.admission.disable();
    }
    let mut opts = c.options().await;
    // Pool big enough that requests never wait in the driver: this measures the server.
    opts.max_pool_size = Some(500);
    let client = mongodb::Client::with_options(opts).unwrap();
    let coll = client.database("bench").collection::<Document>("scan");
    let payload = "x".repeat(200);
    for chunk in (0..args.docs).collect::<Vec<_>>().chunks(1000) {
        let docs: Vec<Document> = chunk
            .iter()
            .map(|i| doc! {"_id": *i as i64, "v": *i as i64, "p": &payload})
            .collect();
        coll.insert_many(docs).await.unwrap();
    }
    let cap = capacity(&coll, args).await;
    let rate = cap * OVERLOAD;
    let out = overload(&coll, rate, args.secs).await;
    let secs = args.secs as f64;
    let goodput = out.in_time.load(Ordering::Relaxed) as f64 / secs;
    println!(
        "{label:<22} capacity {cap:>7.0} ops/s | offered {rate:>7.0}/s | goodput {goodput:>7.0}/s = {:>4.0}% of capacity | shed {} expired {} client-timeout {} other {}",
        100.0 * goodput / cap,
        out.shed.load(Ordering::Relaxed),
        out.expired.load(Ordering::Relaxed),
        out.client_timeout.load(Ordering::Relaxed),
        out.other.load(Ordering::Relaxed),
    );
    c.stop().await;
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!(
            "overload: {} docs scanned per op, {} s per phase, {} closed-loop clients for capacity, {:.0}% offered, {} ms deadlines",
            args.docs,
            args.secs,
            args.clients,
            OVERLOAD * 100.0,
            DEADLINE.as_millis()
        );
        run("admission on", true, &args).await;
        run("admission off", false, &args).await;
    });
}
