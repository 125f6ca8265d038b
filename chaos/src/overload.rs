//! `bulwark chaos overload`: an open-loop overload experiment (`docs/overload.md`), on the
//! local three-site cluster.
//!
//! 1. Capacity C: closed-loop clients look documents up by `_id` through site A's router
//!    as fast as answers come back.
//! 2. Open loop: requests arrive on a fixed schedule whatever happened to earlier ones, at
//!    50% of C, then 130% of C for 15 s, then 50% again, spread over eight client objects
//!    (one per simulated service instance, each with its own connection pool). Each has
//!    `maxTimeMS` 100 and a 100 ms client timeout that covers the pool wait too.
//! 3. Every second: sent, succeeded in time, timed out at the client, shed (462) and
//!    expired (50) at the server, router and primary CPU, and p50/p99 of each wait: the
//!    client's pool checkout, the shard's ticket queue, the shard's execution (server
//!    histograms, by power-of-ten bucket) and the whole request.
//! 4. Goodput during the burst as a fraction of C, and the time until p99 is back to
//!    normal after it.
//!
//! Three runs, each on a fresh cluster: pools of 100, tiny pools (4), and pools of 100
//! with deadline propagation and admission control switched off (what mongod does).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bson::{doc, Document};
use mongodb::error::ErrorKind;
use mongodb::event::cmap::CmapEvent;
use mongodb::event::EventHandler;
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use wire::ErrorCode;

use crate::cluster::{client, Cluster};
use crate::local::{LocalCluster, LocalOptions};
use crate::plot::{FaultMark, Timeline};
use crate::proc_stat;
use crate::raw_pool::RawPool;
use crate::refusal_cost::{self, RefusalCost};
use crate::timeline::quantile_ms;

/// The cluster runs on the last CPU and this load generator on the others (see
/// [`pin_self`]): sharing them, the generator's own CPU would be part of the capacity it
/// measures, and 130% of it would overload the generator before the cluster.
const CLUSTER_CPUS: &str = "1";
const GENERATOR_CPUS: &str = "0";
const INSTANCES: usize = 8;
const DEADLINE: Duration = Duration::from_millis(100);
const DOCS: i64 = 10_000;
const CAPACITY_SECS: u64 = 5;
/// The closed loop runs this long, unmeasured, before C is measured.
const CAPACITY_WARMUP: Duration = Duration::from_secs(3);
/// Closed-loop requests in flight per instance while capacity is measured.
const CAPACITY_CONCURRENCY: usize = 4;
const WARM_SECS: usize = 10;
const BURST_SECS: usize = 15;
const COOL_SECS: usize = 15;
const LOW: f64 = 0.5;
const BURST: f64 = 1.3;
/// A request with less than this left of its deadline once it holds a connection is not
/// sent ([`Client::KeepsConnections`]): CSOT drivers compare the remaining time with the
/// connection's minimum round trip, and a lookup's round trip here is about a millisecond.
const MIN_BUDGET: Duration = Duration::from_millis(1);
/// p99 is back to normal when it stays within this factor of the warm phase's median p99.
const NORMAL_P99_FACTOR: f64 = 2.0;
/// How far C measured after the run may be from C before it (as a fraction of the larger)
/// for the run's goodput fraction to count: on shared machines C has moved from 3,601 to
/// 5,948 within one run, and a fraction of a C that no longer holds measures the machine.
const STEADY_CAPACITY: f64 = 0.15;
const SUSTAINED_SECS: usize = 3;

/// One configuration of the experiment.
struct Setup {
    label: &'static str,
    pool: u32,
    /// Deadline propagation (router) and admission control (shards) on.
    protections: bool,
    client: Client,
}

/// How a simulated service instance waits for a connection and what it does with one
/// whose request timed out (see [`Instance`]).
#[derive(Clone, Copy, PartialEq)]
enum Client {
    /// The Rust driver as it is: requests wait in its pool's queue, and a request that
    /// times out drops its connection mid-exchange, which the driver closes and replaces
    /// with a new one (a handshake each).
    Driver,
    /// A client-side timeout as drivers with CSOT (the Go driver among them) handle it:
    /// requests wait in a FIFO gate of `pool` slots in front of the driver, a request
    /// that times out leaves its connection to finish the exchange, and the connection
    /// returns to the pool when the answer arrives, so a timeout costs no reconnect.
    KeepsConnections,
}

const SETUPS: [Setup; 6] = [
    Setup {
        label: "pools of 100",
        pool: 100,
        protections: true,
        client: Client::Driver,
    },
    Setup {
        label: "tiny pools (4)",
        pool: 4,
        protections: true,
        client: Client::Driver,
    },
    Setup {
        label: "pools of 100, deadlines and admission off",
        pool: 100,
        protections: false,
        client: Client::Driver,
    },
    // Only when asked for (`--overload-runs 3,4,5`): the same experiment from clients
    // that keep their connections across timeouts (see `Instance`).
    Setup {
        label: "pools of 100, connections kept across timeouts",
        pool: 100,
        protections: true,
        client: Client::KeepsConnections,
    },
    Setup {
        label: "tiny pools (4), connections kept across timeouts",
        pool: 4,
        protections: true,
        client: Client::KeepsConnections,
    },
    // What deadlines, shedding and admission buy those clients (`--overload-runs 5`):
    // setup 2 shows it for the Rust driver, whose reconnects decide its outcome.
    Setup {
        label: "pools of 100, connections kept across timeouts, deadlines and admission off",
        pool: 100,
        protections: false,
        client: Client::KeepsConnections,
    },
];

/// The setups run when none are named: the three with the Rust driver as it is.
const DEFAULT_SETUPS: usize = 3;

#[derive(Clone, Copy)]
enum Outcome {
    Ok,
    TimedOut,
    Shed,
    Expired,
    Other,
}

impl Outcome {
    /// A failed command's outcome by its error code.
    fn of_code(code: i32) -> Outcome {
        match ErrorCode::from_code(code) {
            Some(ErrorCode::IngressRequestRateLimitExceeded) => Outcome::Shed,
            Some(ErrorCode::MaxTimeMSExpired) => Outcome::Expired,
            _ => Outcome::Other,
        }
    }
}

/// What the collector hears: a request's outcome, its wait for a connection slot, or a
/// driver pool checkout. `at`: when it happened (the request was sent), since the clients
/// were made.
enum Sample {
    Request {
        at: Duration,
        outcome: Outcome,
        nanos: u64,
    },
    Slot {
        at: Duration,
        nanos: u64,
    },
    Checkout {
        at: Duration,
        nanos: u64,
    },
}

#[derive(Default, Serialize, Clone)]
pub struct Second {
    pub t: usize,
    pub phase: &'static str,
    pub offered_per_sec: f64,
    pub sent: u64,
    pub succeeded: u64,
    pub timed_out: u64,
    pub shed: u64,
    pub expired: u64,
    pub other_errors: u64,
    pub router_cpu_ms: f64,
    /// All five members together (the primary serves every lookup).
    pub members_cpu_ms: f64,
    /// This load generator's own CPU (its one core is 1,000 ms a second): near that, the
    /// generator and not the cluster decides what is sent and when answers are read.
    pub generator_cpu_ms: f64,
    /// Client connections the router accepted (a driver replaces each connection whose
    /// request timed out after it was sent).
    pub connections_opened: i64,
    /// Commands the router dropped because their client hung up.
    pub cancelled_by_disconnect: i64,
    /// Commands the router refused, by the rule that refused them: a deadline shorter
    /// than answers take (`answer_time`), the lag controller (`runtime_lag`), and the
    /// line for the shard's slots (`forward_gate`).
    pub refused_by_answer_time: i64,
    pub refused_by_controller: i64,
    pub refused_by_gate: i64,
    /// How late the router's runtime ran tasks at the end of the second (its hidden queue).
    pub router_lag_ms: f64,
    /// Forwarded commands' recent transit at the router (a call to the member minus the
    /// member's queue and execution) at the end of the second: what the router sheds on.
    pub router_transit_ms: f64,
    /// The time by which the router's answers are due at the end of the second: a command
    /// whose whole deadline is shorter is refused at once (`answer_time`).
    pub router_answer_due_ms: f64,
    pub latency_ms: Quantiles,
    /// Wait for one of the instance's `pool` connection slots (requests that got one).
    pub slot_wait_ms: Quantiles,
    /// The driver's checkout once a slot is held: a connection from its pool, or a new
    /// one opened and authenticated after a timeout closed the last.
    pub pool_wait_ms: Quantiles,
    /// Upper bounds of the server histogram buckets holding p50 and p99.
    pub shard_queue: BucketQuantiles,
    pub shard_exec: BucketQuantiles,
    /// The whole command at the router, from reading it to writing its answer: against
    /// the client's `request` time, what the generator and the network add.
    pub router_total: BucketQuantiles,
}

#[derive(Default, Serialize, Clone, Copy)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
}

#[derive(Default, Serialize, Clone)]
pub struct BucketQuantiles {
    pub p50: String,
    pub p99: String,
}

#[derive(Serialize)]
pub struct RunReport {
    pub label: &'static str,
    pub pool_size: u32,
    pub instances: usize,
    pub deadline_propagation_and_admission: bool,
    pub capacity_ops: f64,
    /// Capacity measured again after the run, the same way (the machines are shared).
    pub capacity_after_ops: f64,
    /// Whether C before and after agree within [`STEADY_CAPACITY`]; when they do not, the
    /// machine's speed moved during the run and its goodput fraction says little.
    pub capacity_steady: bool,
    /// What a refusal costs against a served lookup, and the goodput that bounds.
    /// None when the protections are off: nothing is refused then.
    pub refusal_cost: Option<RefusalCost>,
    pub goodput_fraction: f64,
    pub recovery_s: Option<f64>,
    pub normal_p99_ms: f64,
    pub per_sec: Vec<Second>,
}

/// Runs the setups `only` names (the first three when it is empty); writes `report` (and
/// one plot per run next to it).
pub async fn run(
    bin: &Path,
    dir: &Path,
    base_port: u16,
    report: &Path,
    only: &[usize],
) -> anyhow::Result<()> {
    pin_self()?;
    let mut runs = Vec::new();
    for (n, setup) in SETUPS.iter().enumerate() {
        if (only.is_empty() && n >= DEFAULT_SETUPS) || (!only.is_empty() && !only.contains(&n)) {
            continue;
        }
        let run_dir = dir.join(format!("run{n}"));
        let _ = std::fs::remove_dir_all(&run_dir);
        let mut options = LocalOptions {
            cpus: Some(CLUSTER_CPUS.into()),
            direct: true,
            ..Default::default()
        };
        if !setup.protections {
            options.router_env = vec![
                ("BULWARK_PROPAGATE_DEADLINES".into(), "false".into()),
                ("BULWARK_FORWARD_SLOTS".into(), "0".into()),
            ];
            options.member_settings = "admission_control = false".into();
        }
        println!("== overload: {} ({})", setup.label, run_dir.display());
        let mut cluster = LocalCluster::start(bin, &run_dir, base_port, &options)
            .await
            .context("starting the local cluster")?;
        let r = run_one(setup, &cluster).await;
        cluster.finish();
        let r = r?;
        println!(
            "{}: capacity {:.0} ops/s ({:.0} after the run{}), goodput during the burst {:.0}% of capacity, p99 back to normal ({:.1} ms) {}",
            r.label,
            r.capacity_ops,
            r.capacity_after_ops,
            if r.capacity_steady {
                ""
            } else {
                ": the machine's speed moved, this run's fraction says little"
            },
            100.0 * r.goodput_fraction,
            r.normal_p99_ms,
            r.recovery_s
                .map(|s| format!("{s:.0} s after the burst"))
                .unwrap_or_else(|| "never".into())
        );
        let plot = report.with_extension(format!("run{n}.svg"));
        crate::run::write(&plot, &crate::plot::svg(&timeline(&r)))?;
        let _ = std::fs::remove_dir_all(&run_dir);
        runs.push(r);
    }
    let doc = json!({
        "scenario": "overload",
        "target": "local",
        "deadline_ms": DEADLINE.as_millis() as u64,
        "phases_secs": { "capacity": CAPACITY_SECS, "low": WARM_SECS, "burst": BURST_SECS,
                         "low_after": COOL_SECS },
        "offered": { "low": LOW, "burst": BURST },
        "runs": &runs,
    });
    crate::run::write(report, &serde_json::to_string_pretty(&doc)?)?;
    println!("report {}", report.display());
    Ok(())
}

/// The length of the open loop: low, burst, low again.
const OPEN_LOOP_SECS: usize = WARM_SECS + BURST_SECS + COOL_SECS;

async fn run_one(setup: &Setup, cluster: &LocalCluster) -> anyhow::Result<RunReport> {
    let router = cluster.router_of("A");
    let uri = cluster.uri(router);
    let admin = client(&uri).await?;
    load_documents(&admin).await?;
    wait_for_site_a_primary(cluster, &admin).await?;
    let pids = ClusterPids::of(cluster, router);

    let started = Instant::now();
    let (tx, mut rx) = unbounded_channel::<Sample>();
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        instances.push(Instance::new(cluster, router, setup, started, tx.clone()).await?);
    }
    let capacity = measure_capacity(&instances, &pids).await?;
    let refusal_cost = price_refusals(setup, &admin, cluster, router, &pids).await?;
    let open = open_loop(&admin, pids, &instances, capacity, started, tx).await?;
    let capacity_after = closed_loop_capacity(&instances).await;
    let secs = per_second(capacity, &open, started, &mut rx);
    let burst = BurstSummary::of(&secs);
    Ok(RunReport {
        label: setup.label,
        pool_size: setup.pool,
        instances: INSTANCES,
        deadline_propagation_and_admission: setup.protections,
        capacity_ops: capacity,
        capacity_after_ops: capacity_after,
        capacity_steady: capacity_steady(capacity, capacity_after),
        refusal_cost,
        goodput_fraction: burst.goodput / capacity,
        recovery_s: burst.recovery_s,
        normal_p99_ms: burst.normal_p99_ms,
        per_sec: secs,
    })
}

/// Loads the `DOCS` documents the lookups find, a thousand at a time.
async fn load_documents(admin: &mongodb::Client) -> anyhow::Result<()> {
    let coll = admin.database("overload").collection::<Document>("docs");
    let payload = "x".repeat(100);
    for chunk in (0..DOCS).collect::<Vec<_>>().chunks(1000) {
        let docs: Vec<Document> = chunk
            .iter()
            .map(|i| doc! {"_id": *i, "v": *i, "p": &payload})
            .collect();
        coll.insert_many(docs).await.context("loading documents")?;
    }
    Ok(())
}

/// Site A's members have the highest priority: waits until one of them leads, so that
/// no priority takeover happens during the run. Bounded: 30 s, polled every 200 ms.
async fn wait_for_site_a_primary(
    cluster: &LocalCluster,
    admin: &mongodb::Client,
) -> anyhow::Result<()> {
    let settle = Instant::now() + Duration::from_secs(30);
    // (An election in progress shows no primary for a moment: that is "not yet" too.)
    loop {
        match cluster.primary(admin).await {
            Ok(p) if cluster.member_site(p) == "A" => return Ok(()),
            Ok(_) => {}
            Err(e) => anyhow::ensure!(Instant::now() < settle, "{e}"),
        }
        anyhow::ensure!(Instant::now() < settle, "no site A primary within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The cluster's processes whose CPU the run reports: site A's router and every member.
struct ClusterPids {
    router: Option<u32>,
    members: Vec<u32>,
}

impl ClusterPids {
    fn of(cluster: &LocalCluster, router: usize) -> ClusterPids {
        ClusterPids {
            router: cluster.router_pid(router),
            members: (0..cluster.member_count())
                .filter_map(|i| cluster.member_pid(i))
                .collect(),
        }
    }

    fn router_cpu_ms(&self) -> f64 {
        self.router.map(process_cpu_ms).unwrap_or(0.0)
    }

    fn members_cpu_ms(&self) -> f64 {
        self.members.iter().map(|&p| process_cpu_ms(p)).sum::<f64>()
    }

    /// The router's and the members' CPU together.
    fn cpu_ms(&self) -> f64 {
        self.router_cpu_ms() + self.members_cpu_ms()
    }
}

/// This load generator's own CPU so far.
fn generator_cpu_ms() -> f64 {
    process_cpu_ms(std::process::id())
}

/// C, measured after a warm-up pass, printed with the CPU each side spent a second.
async fn measure_capacity(instances: &[Instance], pids: &ClusterPids) -> anyhow::Result<f64> {
    // A first pass opens every connection and warms the members' caches and the
    // runtimes: measured cold, C came out at 2,300-3,500 where the same cluster served
    // 3,550-4,250 a second in the burst and after it.
    closed_loop(instances, CAPACITY_WARMUP).await;
    let cpu_before = (generator_cpu_ms(), pids.cpu_ms());
    let capacity = closed_loop_capacity(instances).await;
    anyhow::ensure!(
        capacity > 0.0,
        "no lookup succeeded while measuring capacity"
    );
    // Which side bounds C: a generator near its one core's 1,000 ms a second measures
    // itself, not the cluster.
    let per_sec = |after: f64, before: f64| (after - before) / CAPACITY_SECS as f64;
    println!(
        "  capacity {capacity:.0} lookups/s; CPU ms a second: generator {:.0}, cluster {:.0}",
        per_sec(generator_cpu_ms(), cpu_before.0),
        per_sec(pids.cpu_ms(), cpu_before.1)
    );
    Ok(capacity)
}

/// What a refusal costs against a served lookup, printed; None when the protections are
/// off.
async fn price_refusals(
    setup: &Setup,
    admin: &mongodb::Client,
    cluster: &LocalCluster,
    router: usize,
    pids: &ClusterPids,
) -> anyhow::Result<Option<RefusalCost>> {
    // With the protections off nothing is refused (the router's shedder is off, and
    // with it the fail point that takes its path), so there is no refusal to price.
    if !setup.protections {
        return Ok(None);
    }
    let cost = refusal_cost::measure(
        admin,
        cluster.router_addr(router),
        cluster.login(),
        DOCS,
        BURST,
        || pids.cpu_ms(),
    )
    .await?;
    println!(
        "  cluster CPU per lookup: served {:.0} µs ({:.0} with maxTimeMS, {:.0} over {} connections), refused {:.0} µs (a refusal costs {:.2} of an answer: goodput at {BURST} × C can reach at most {:.2} of C)",
        cost.served_us,
        cost.served_with_deadline_us,
        cost.served_spread_us,
        crate::refusal_cost::SPREAD_OVER,
        cost.refused_us,
        cost.ratio,
        cost.goodput_ceiling
    );
    Ok(Some(cost))
}

/// What the open loop leaves: when it began, the requests sent in each of its seconds,
/// and what the server side did in each.
struct OpenLoop {
    t0: Instant,
    sent: Vec<u64>,
    server: Vec<ServerSecond>,
}

/// The open loop and the once-a-second sampler, together on the clock of `t0`; returns
/// once the last requests have ended.
async fn open_loop(
    admin: &mongodb::Client,
    pids: ClusterPids,
    instances: &[Instance],
    capacity: f64,
    started: Instant,
    tx: UnboundedSender<Sample>,
) -> anyhow::Result<OpenLoop> {
    let t0 = Instant::now();
    let sampler = tokio::spawn(sample_server(admin.clone(), pids, t0, OPEN_LOOP_SECS));
    let sent = send_arrivals(instances, capacity, t0, started, &tx).await;
    drop(tx);
    // Requests still in flight end within their timeout.
    tokio::time::sleep(DEADLINE * 2).await;
    let server = sampler.await??;
    Ok(OpenLoop { t0, sent, server })
}

/// Sends requests on the fixed schedule of [`offered_rate`] from `t0`, whatever happened
/// to earlier ones, round robin over the instances; returns how many each second sent.
async fn send_arrivals(
    instances: &[Instance],
    capacity: f64,
    t0: Instant,
    started: Instant,
    tx: &UnboundedSender<Sample>,
) -> Vec<u64> {
    let mut due = 0.0f64;
    let mut i: u64 = 0;
    let mut sent = vec![0u64; OPEN_LOOP_SECS];
    while due < OPEN_LOOP_SECS as f64 {
        tokio::time::sleep_until((t0 + Duration::from_secs_f64(due)).into()).await;
        let c = instances[i as usize % INSTANCES].clone();
        // Keys spread over the collection (a multiplicative hash of the arrival number).
        let key = (i.wrapping_mul(2_654_435_761) % DOCS as u64) as i64;
        sent[due as usize] += 1;
        tokio::spawn(request(c, key, started, tx.clone()));
        i += 1;
        due += 1.0 / offered_rate(capacity, due);
    }
    sent
}

/// Requests a second at `secs` into the open loop: `BURST` × C during the burst, `LOW`
/// × C before and after it.
fn offered_rate(capacity: f64, secs: f64) -> f64 {
    let burst = (WARM_SECS as f64..(WARM_SECS + BURST_SECS) as f64).contains(&secs);
    capacity * if burst { BURST } else { LOW }
}

/// The phase second `t` of the open loop is in.
fn phase(t: usize) -> &'static str {
    if t < WARM_SECS {
        "low"
    } else if t < WARM_SECS + BURST_SECS {
        "burst"
    } else {
        "low after"
    }
}

/// The open loop's seconds, each printed: what was offered and sent, the outcomes and
/// waits the clients reported on `rx`, and what the server side did.
fn per_second(
    capacity: f64,
    open: &OpenLoop,
    started: Instant,
    rx: &mut UnboundedReceiver<Sample>,
) -> Vec<Second> {
    let mut secs: Vec<Second> = (0..OPEN_LOOP_SECS)
        .map(|t| Second {
            t,
            phase: phase(t),
            offered_per_sec: offered_rate(capacity, t as f64),
            sent: open.sent[t],
            ..Default::default()
        })
        .collect();
    let mut waits = Waits::drain(rx, &mut secs, open.t0.duration_since(started));
    for (t, x) in secs.iter_mut().enumerate() {
        x.latency_ms = quantiles(&mut waits.latencies[t]);
        x.pool_wait_ms = quantiles(&mut waits.checkouts[t]);
        x.slot_wait_ms = quantiles(&mut waits.slots[t]);
        if let Some(s) = open.server.get(t) {
            x.add_server(s);
        }
        x.print();
    }
    secs
}

/// The clients' waits in each second of the open loop, in nanoseconds: whole requests
/// that succeeded, driver checkouts, and waits for a connection slot.
struct Waits {
    latencies: Vec<Vec<u64>>,
    checkouts: Vec<Vec<u64>>,
    slots: Vec<Vec<u64>>,
}

impl Waits {
    /// Takes every sample from `rx`: outcomes are counted in `secs`, waits kept by
    /// second. `offset`: when the open loop began, since the clients were made.
    fn drain(rx: &mut UnboundedReceiver<Sample>, secs: &mut [Second], offset: Duration) -> Waits {
        // The second of the open loop a sample belongs to (samples from the capacity phase
        // have none).
        let second = |at: Duration| {
            at.checked_sub(offset)
                .map(|d| d.as_secs() as usize)
                .filter(|&t| t < OPEN_LOOP_SECS)
        };
        let mut waits = Waits {
            latencies: vec![Vec::new(); OPEN_LOOP_SECS],
            checkouts: vec![Vec::new(); OPEN_LOOP_SECS],
            slots: vec![Vec::new(); OPEN_LOOP_SECS],
        };
        while let Ok(s) = rx.try_recv() {
            match s {
                Sample::Request { at, outcome, nanos } => {
                    let Some(x) = second(at).and_then(|t| secs.get_mut(t)) else {
                        continue;
                    };
                    match outcome {
                        Outcome::Ok => {
                            x.succeeded += 1;
                            waits.latencies[x.t].push(nanos);
                        }
                        Outcome::TimedOut => x.timed_out += 1,
                        Outcome::Shed => x.shed += 1,
                        Outcome::Expired => x.expired += 1,
                        Outcome::Other => x.other_errors += 1,
                    }
                }
                Sample::Checkout { at, nanos } => {
                    if let Some(t) = second(at) {
                        waits.checkouts[t].push(nanos);
                    }
                }
                Sample::Slot { at, nanos } => {
                    if let Some(t) = second(at) {
                        waits.slots[t].push(nanos);
                    }
                }
            }
        }
        waits
    }
}

impl Second {
    /// Copies what the server side did in this second.
    fn add_server(&mut self, s: &ServerSecond) {
        self.router_cpu_ms = s.router_cpu_ms;
        self.members_cpu_ms = s.members_cpu_ms;
        self.generator_cpu_ms = s.generator_cpu_ms;
        self.connections_opened = s.connections_opened;
        self.cancelled_by_disconnect = s.cancelled_by_disconnect;
        self.refused_by_answer_time = s.refused_by_answer_time;
        self.refused_by_controller = s.refused_by_controller;
        self.refused_by_gate = s.refused_by_gate;
        self.router_lag_ms = s.router_lag_ms;
        self.router_transit_ms = s.router_transit_ms;
        self.router_answer_due_ms = s.router_answer_due_ms;
        self.shard_queue = s.shard_queue.clone();
        self.shard_exec = s.shard_exec.clone();
        self.router_total = s.router_total.clone();
    }

    /// The second as one line.
    fn print(&self) {
        let x = self;
        println!(
            "  t={:>2} {:<9} offered {:>6.0}/s sent {:>5} ok {:>5} timeout {:>5} shed {:>5} expired {:>4} other {:>3} | p50/p99 ms: request {:>6.1}/{:>6.1} slot {:>6.1}/{:>6.1} pool {:>6.1}/{:>6.1} | shard queue {}/{} exec {}/{} router {}/{} | cpu ms router {:>4.0} members {:>4.0} generator {:>4.0} | conns opened {:>4} cancelled {:>4} | refused: answer {:>5} controller {:>5} gate {:>5} | router lag {:>5.1} transit {:>5.1} answer due {:>5.1} ms",
            x.t, x.phase, x.offered_per_sec, x.sent, x.succeeded, x.timed_out, x.shed, x.expired,
            x.other_errors, x.latency_ms.p50, x.latency_ms.p99, x.slot_wait_ms.p50,
            x.slot_wait_ms.p99, x.pool_wait_ms.p50,
            x.pool_wait_ms.p99, x.shard_queue.p50, x.shard_queue.p99, x.shard_exec.p50,
            x.shard_exec.p99, x.router_total.p50, x.router_total.p99, x.router_cpu_ms, x.members_cpu_ms, x.generator_cpu_ms, x.connections_opened,
            x.cancelled_by_disconnect,
            x.refused_by_answer_time,
            x.refused_by_controller,
            x.refused_by_gate,
            x.router_lag_ms,
            x.router_transit_ms,
            x.router_answer_due_ms
        );
    }
}

/// What the burst did: goodput during it, the normal p99, and how long after it p99
/// was back to normal.
struct BurstSummary {
    goodput: f64,
    normal_p99_ms: f64,
    recovery_s: Option<f64>,
}

impl BurstSummary {
    fn of(secs: &[Second]) -> BurstSummary {
        let burst = &secs[WARM_SECS..WARM_SECS + BURST_SECS];
        let goodput = burst.iter().map(|s| s.succeeded).sum::<u64>() as f64 / BURST_SECS as f64;
        // Normal p99: the median over the low phase, its first seconds (connections opening)
        // left out.
        let mut warm: Vec<f64> = secs[2..WARM_SECS]
            .iter()
            .map(|s| s.latency_ms.p99)
            .collect();
        warm.sort_by(f64::total_cmp);
        let normal_p99_ms = warm[warm.len() / 2];
        let after = WARM_SECS + BURST_SECS;
        let normal =
            |s: &Second| s.succeeded > 0 && s.latency_ms.p99 <= normal_p99_ms * NORMAL_P99_FACTOR;
        let recovery_s = (after..=OPEN_LOOP_SECS - SUSTAINED_SECS)
            .find(|&t| secs[t..t + SUSTAINED_SECS].iter().all(normal))
            .map(|t| (t - after) as f64);
        BurstSummary {
            goodput,
            normal_p99_ms,
            recovery_s,
        }
    }
}

/// One simulated service instance: a client with its own pool of `pool` connections,
/// whose waits are timed.
///
/// Two behaviours of the Rust driver (mongodb 3.9) under timeouts decide what the
/// experiment measures, so [`Client::KeepsConnections`] models a client without them:
///
/// * Its pool's wait queue keeps the checkout requests of callers that gave up, and the
///   pool worker hands out at most one queued request per event it handles
///   (`cmap/worker.rs`). Once timed-out requests fill the queue, every arrival pushes one
///   and pops one, each new request waits behind the dead ones for longer than its
///   deadline, and the pool stays wedged at any load: with tiny pools, six of eight
///   instances served nothing even at 50% of capacity after the burst, with the router
///   idle. The model's slots are a tokio semaphore, which drops a waiter that gave up.
/// * It closes a connection whose operation was dropped mid-exchange, and the next request
///   opens and authenticates a new one: at 130% of capacity, 5,000–6,000 reconnects a
///   second from a generator with one core. Drivers with client-side operation timeouts
///   keep the connection and read the late answer before reusing it; the model lets the
///   exchange finish in a task of its own, holding its slot, after the caller has counted
///   a timeout.
///
/// The model also sends what a request has left of its deadline after the wait as
/// `maxTimeMS`, as a CSOT driver does; the Rust driver sends the full 100 ms however long
/// the request waited for a connection. Its connections are raw ones
/// ([`RawPool`](crate::raw_pool::RawPool)): the driver's own work per operation would
/// saturate the generator's core first. Capacity is measured with the driver in every
/// setup, so C is the same measurement for all of them.
#[derive(Clone)]
struct Instance {
    coll: mongodb::Collection<Document>,
    raw: Option<Arc<RawPool>>,
}

impl Instance {
    async fn new(
        cluster: &LocalCluster,
        router: usize,
        setup: &Setup,
        started: Instant,
        tx: UnboundedSender<Sample>,
    ) -> anyhow::Result<Instance> {
        let raw = match setup.client {
            Client::KeepsConnections => Some(Arc::new(
                RawPool::open(
                    cluster.router_addr(router),
                    cluster.login(),
                    setup.pool as usize,
                )
                .await
                .context("opening the instance's connections")?,
            )),
            Client::Driver => None,
        };
        Ok(Instance {
            coll: driver(&cluster.uri(router), setup, started, tx).await?,
            raw,
        })
    }
}

/// A driver client with a pool of `setup.pool`, whose checkouts are timed.
async fn driver(
    uri: &str,
    setup: &Setup,
    started: Instant,
    tx: UnboundedSender<Sample>,
) -> anyhow::Result<mongodb::Collection<Document>> {
    let mut opts = mongodb::options::ClientOptions::parse(uri).await?;
    opts.max_pool_size = Some(setup.pool);
    opts.server_selection_timeout = Some(Duration::from_secs(2));
    opts.connect_timeout = Some(Duration::from_secs(2));
    opts.cmap_event_handler = Some(EventHandler::callback(move |e: CmapEvent| {
        if let CmapEvent::ConnectionCheckedOut(e) = e {
            let _ = tx.send(Sample::Checkout {
                at: started.elapsed(),
                nanos: e.duration.as_nanos() as u64,
            });
        }
    }));
    let c = mongodb::Client::with_options(opts)?;
    Ok(c.database("overload").collection("docs"))
}

/// Closed loop, no deadlines: lookups per second when every client waits for its answer.
async fn closed_loop_capacity(instances: &[Instance]) -> f64 {
    let secs = Duration::from_secs(CAPACITY_SECS);
    closed_loop(instances, secs).await as f64 / secs.as_secs_f64()
}

/// Lookups answered in `secs` by `CAPACITY_CONCURRENCY` closed loops per instance.
async fn closed_loop(instances: &[Instance], secs: Duration) -> u64 {
    let until = Instant::now() + secs;
    let mut tasks = Vec::new();
    for (n, inst) in instances.iter().enumerate() {
        for k in 0..CAPACITY_CONCURRENCY {
            let coll = inst.coll.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                let mut key = (n * CAPACITY_CONCURRENCY + k) as i64;
                while Instant::now() < until {
                    if coll.find_one(doc! {"_id": key % DOCS}).await.is_ok() {
                        done += 1;
                    }
                    key += 7919;
                }
                done
            }));
        }
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap_or(0);
    }
    done
}

/// One arrival: a lookup with `maxTimeMS` and a client timeout of `DEADLINE`, counted in
/// the second it was sent.
async fn request(inst: Instance, key: i64, started: Instant, tx: UnboundedSender<Sample>) {
    let sent = Instant::now();
    let at = sent.duration_since(started);
    let work = async {
        let Some(pool) = inst.raw else {
            let answer = inst
                .coll
                .find_one(doc! {"_id": key})
                .max_time(DEADLINE)
                .await;
            return match answer {
                Ok(_) => Outcome::Ok,
                Err(e) => match *e.kind {
                    ErrorKind::Command(ref c) => Outcome::of_code(c.code),
                    _ => Outcome::Other,
                },
            };
        };
        let slot = pool.slot().await;
        let waited = sent.elapsed();
        let _ = tx.send(Sample::Slot {
            at,
            nanos: waited.as_nanos() as u64,
        });
        let budget = DEADLINE.saturating_sub(waited);
        if budget < MIN_BUDGET {
            // Not sent, as a CSOT driver does not send what cannot come back in time:
            // the slot goes to the next request and the caller sees its timeout.
            drop(slot);
            return std::future::pending().await;
        }
        let find = doc! {
            "find": "docs", "filter": {"_id": key}, "limit": 1, "singleBatch": true,
            "maxTimeMS": budget.as_millis().max(1) as i64, "$db": "overload",
        };
        // Finishes, and frees its slot, even after the caller stopped waiting.
        let exchange = tokio::spawn(async move { pool.run(slot, find).await });
        match exchange.await {
            Ok(Ok(reply)) if reply.get_f64("ok") == Ok(1.0) => Outcome::Ok,
            Ok(Ok(reply)) => reply
                .get_i32("code")
                .map(Outcome::of_code)
                .unwrap_or(Outcome::Other),
            _ => Outcome::Other,
        }
    };
    let outcome = tokio::time::timeout(DEADLINE, work)
        .await
        .unwrap_or(Outcome::TimedOut);
    let _ = tx.send(Sample::Request {
        at,
        outcome,
        nanos: sent.elapsed().as_nanos() as u64,
    });
}

fn quantiles(nanos: &mut [u64]) -> Quantiles {
    Quantiles {
        p50: quantile_ms(nanos, 0.5),
        p99: quantile_ms(nanos, 0.99),
    }
}

/// What the server side did in one second.
#[derive(Default)]
struct ServerSecond {
    router_cpu_ms: f64,
    members_cpu_ms: f64,
    generator_cpu_ms: f64,
    connections_opened: i64,
    cancelled_by_disconnect: i64,
    refused_by_answer_time: i64,
    refused_by_controller: i64,
    refused_by_gate: i64,
    router_lag_ms: f64,
    router_transit_ms: f64,
    /// The time by which the router's answers are due (`answer_time`).
    router_answer_due_ms: f64,
    shard_queue: BucketQuantiles,
    shard_exec: BucketQuantiles,
    router_total: BucketQuantiles,
}

/// Once a second: the router's wait histograms (differences), and the router's and the
/// members' CPU.
async fn sample_server(
    admin: mongodb::Client,
    pids: ClusterPids,
    t0: Instant,
    total: usize,
) -> anyhow::Result<Vec<ServerSecond>> {
    let cpus = || {
        (
            pids.router_cpu_ms(),
            pids.members_cpu_ms(),
            generator_cpu_ms(),
        )
    };
    let status = || async {
        admin
            .database("admin")
            .run_command(doc! {"serverStatus": 1})
            .await
    };
    let (r, m, g) = cpus();
    let mut prev = (r, m, status().await?, g);
    let mut out = Vec::new();
    for t in 1..=total {
        tokio::time::sleep_until((t0 + Duration::from_secs(t as u64)).into()).await;
        let (r, m, g) = cpus();
        let now = (r, m, status().await.unwrap_or_else(|_| prev.2.clone()), g);
        let waits = |s: &Document| {
            s.get_document("bulwark")
                .and_then(|b| b.get_document("waits"))
                .cloned()
                .unwrap_or_default()
        };
        let grew = |path: &[&str]| counter(&now.2, path) - counter(&prev.2, path);
        let (w_now, w_prev) = (waits(&now.2), waits(&prev.2));
        out.push(ServerSecond {
            router_cpu_ms: now.0 - prev.0,
            members_cpu_ms: now.1 - prev.1,
            generator_cpu_ms: now.3 - prev.3,
            shard_queue: bucket_quantiles(&w_now, &w_prev, "shardQueue"),
            shard_exec: bucket_quantiles(&w_now, &w_prev, "shardExec"),
            router_total: bucket_quantiles(&w_now, &w_prev, "total"),
            connections_opened: grew(&["connections", "totalCreated"]),
            cancelled_by_disconnect: grew(&["bulwark", "cancelledByClientDisconnect"]),
            refused_by_answer_time: grew(&["bulwark", "shedByAnswerTime"]),
            refused_by_controller: grew(&["bulwark", "shedByRouter"]),
            refused_by_gate: grew(&["bulwark", "shedByForwardGate"]),
            router_lag_ms: counter(&now.2, &["bulwark", "runtimeLagMicros"]) as f64 / 1e3,
            router_transit_ms: counter(&now.2, &["bulwark", "transitMicros"]) as f64 / 1e3,
            router_answer_due_ms: counter(&now.2, &["bulwark", "answerDueMicros"]) as f64 / 1e3,
        });
        prev = now;
    }
    Ok(out)
}

/// User and system CPU of process `pid` so far.
fn process_cpu_ms(pid: u32) -> f64 {
    proc_stat::cpu_ms(Path::new(&format!("/proc/{pid}/stat")))
        .map(|(u, s)| u + s)
        .unwrap_or(0.0)
}

/// The integer at `path` in a serverStatus reply (0 when absent).
fn counter(status: &Document, path: &[&str]) -> i64 {
    let (last, parents) = path.split_last().expect("a path");
    let mut d = status;
    for p in parents {
        match d.get_document(p) {
            Ok(inner) => d = inner,
            Err(_) => return 0,
        }
    }
    d.get_i64(last)
        .or_else(|_| d.get_i32(last).map(i64::from))
        .unwrap_or(0)
}

/// p50 and p99 of a histogram's growth between two samples, as bucket labels.
fn bucket_quantiles(now: &Document, prev: &Document, kind: &str) -> BucketQuantiles {
    let (Ok(now), Ok(prev)) = (now.get_document(kind), prev.get_document(kind)) else {
        return BucketQuantiles::default();
    };
    let counts: Vec<(&str, i64)> = now
        .iter()
        .map(|(label, n)| {
            let before = prev.get_i64(label).unwrap_or(0);
            (label.as_str(), n.as_i64().unwrap_or(0) - before)
        })
        .collect();
    let total: i64 = counts.iter().map(|c| c.1).sum();
    let at = |q: f64| {
        let mut seen = 0;
        for (label, n) in &counts {
            seen += n;
            if total > 0 && seen as f64 >= q * total as f64 {
                return label.to_string();
            }
        }
        "-".to_string()
    };
    BucketQuantiles {
        p50: at(0.5),
        p99: at(0.99),
    }
}

/// The run as the timeline plot draws it, the burst marked as the fault.
fn timeline(r: &RunReport) -> Timeline {
    Timeline {
        title: format!(
            "overload: {} (capacity {:.0}/s, goodput {:.0}%)",
            r.label,
            r.capacity_ops,
            100.0 * r.goodput_fraction
        ),
        bucket_secs: 1.0,
        ok_per_sec: r.per_sec.iter().map(|s| s.succeeded as f64).collect(),
        errors_per_sec: r
            .per_sec
            .iter()
            .map(|s| (s.timed_out + s.shed + s.expired + s.other_errors) as f64)
            .collect(),
        p99_ms: r.per_sec.iter().map(|s| s.latency_ms.p99).collect(),
        faults: vec![FaultMark {
            label: format!("{:.0}% of capacity", BURST * 100.0),
            start_secs: WARM_SECS as f64,
            end_secs: Some((WARM_SECS + BURST_SECS) as f64),
        }],
    }
}

/// Moves every thread of this process (the load generator) to `GENERATOR_CPUS`; threads
/// started later inherit it.
fn pin_self() -> anyhow::Result<()> {
    let pid = std::process::id().to_string();
    let out = std::process::Command::new("taskset")
        .args(["-a", "-c", "-p", GENERATOR_CPUS, &pid])
        .output()
        .context("running taskset (util-linux)")?;
    anyhow::ensure!(
        out.status.success(),
        "taskset: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// True when two measurements of C agree within [`STEADY_CAPACITY`] of the larger.
fn capacity_steady(before: f64, after: f64) -> bool {
    let larger = before.max(after);
    larger > 0.0 && (before - after).abs() <= STEADY_CAPACITY * larger
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_counts_only_when_capacity_held_still() {
        // Measured runs: agreeing within 4%, and C that moved by 22% and by 39% of the
        // larger measurement.
        assert!(capacity_steady(6070.0, 6292.0));
        assert!(!capacity_steady(6381.0, 4946.0));
        assert!(!capacity_steady(3601.0, 5948.0));
        assert!(!capacity_steady(5948.0, 3601.0), "either direction");
        assert!(!capacity_steady(0.0, 0.0), "no capacity measured");
    }

    #[test]
    fn bucket_quantiles_read_the_growth_between_samples() {
        let prev = doc! {"shardQueue": {"lt100us": 100_i64, "lt1ms": 5_i64, "lt10ms": 0_i64}};
        // Since `prev`: 60 under 100 µs, 39 under 1 ms, 1 under 10 ms.
        let now = doc! {"shardQueue": {"lt100us": 160_i64, "lt1ms": 44_i64, "lt10ms": 1_i64}};
        let q = bucket_quantiles(&now, &prev, "shardQueue");
        assert_eq!((q.p50.as_str(), q.p99.as_str()), ("lt100us", "lt1ms"));
        let none = bucket_quantiles(&now, &now, "shardQueue");
        assert_eq!(none.p50, "-");
        assert_eq!(bucket_quantiles(&now, &prev, "missing").p50, "");
    }
}
