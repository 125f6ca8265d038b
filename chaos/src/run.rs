//! `bulwark chaos <scenario>`: start the target, run the workload, apply the fault, let
//! the cluster recover, check, and write the report and the timeline plot.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bson::doc;
use clap::ValueEnum;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::api_workload;
use crate::bank_workload;
use crate::check::linearizable::Verdict;
use crate::check::{bank, effects, errors, lost_writes, members_agree, recovery, txn_lists};
use crate::cluster::{client, Cluster, SITES};
use crate::compose::ComposeCluster;
use crate::history::History;
use crate::local::{Layout, LocalCluster, LocalOptions};
use crate::scenario::{self, FaultRun, Scenario};
use crate::timeline;
use crate::txn_workload;
use crate::workload::{self, Clock, Shape};

/// How long the members may take to agree after the run (they have stopped being
/// written to; a member restarted late may still be catching up).
const MEMBERS_AGREE_WITHIN: Duration = Duration::from_secs(60);
/// Each data member's filesystem in `disk-full`: room for a run's data many times over.
const SMALL_DISK_MB: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// Separate processes on loopback, started and torn down by the runner.
    Local,
    /// The docker-compose cluster of deploy/ (make cluster-up).
    Compose,
}

#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    #[arg(value_enum)]
    pub scenario: Scenario,
    #[arg(long, value_enum, default_value_t = Target::Local)]
    pub target: Target,
    /// The local target's layout: one replica set, or a sharded cluster (two shards and
    /// the config servers), where the transactional workloads span both shards.
    #[arg(long, value_enum, default_value_t = Layout::ReplicaSet)]
    pub layout: Layout,
    /// Seeds the workload's choices (keys, operation mix).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds of the whole run: a quarter before the fault, a quarter of fault, the rest
    /// to recover.
    #[arg(long, default_value_t = 40)]
    pub duration: u64,
    /// The JSON report; the plot goes next to it (.svg) and the history too (.history.json).
    #[arg(long, default_value = "chaos-report.json")]
    pub report: PathBuf,
    /// First port of the local cluster (it uses about 250 above it).
    #[arg(long, default_value_t = 29000)]
    pub base_port: u16,
    /// Where the local cluster keeps data and logs (default: a new temporary directory,
    /// removed when the run passes).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Concurrent clients in the storm scenarios.
    #[arg(long, default_value_t = 2000)]
    pub storm_clients: usize,
    /// Extra `BULWARK_*` settings for every router, e.g.
    /// `--router-env BULWARK_MAX_CONCURRENT_HANDSHAKES=100000` to compare without the
    /// handshake gate.
    #[arg(long = "router-env", value_name = "KEY=VALUE")]
    pub router_env: Vec<String>,
    /// Which overload runs, comma-separated: with the Rust driver's clients 0 (pools of
    /// 100), 1 (tiny pools of 4) and 2 (pools of 100, protections off), the default; with
    /// CSOT-like clients 3, 4 and 5, the same three.
    #[arg(long, value_delimiter = ',')]
    pub overload_runs: Vec<usize>,
    /// Seconds after the fault within which throughput must be back.
    #[arg(long, default_value_t = 30.0)]
    pub recovery_bound: f64,
}

/// Runs the scenario; `Ok(true)` when every checker passed.
pub async fn run(args: ChaosArgs, bin: &Path) -> anyhow::Result<bool> {
    let fds = crate::proc_stat::raise_fd_limit(args.storm_clients as u64 * 2 + 4096);
    let started = Instant::now();
    if args.scenario == Scenario::Overload {
        if args.target != Target::Local {
            bail!("overload runs on the local target only");
        }
        let dir = args.dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("bulwark-overload-{}", std::process::id()))
        });
        crate::overload::run(bin, &dir, args.base_port, &args.report, &args.overload_runs).await?;
        return Ok(true);
    }
    match args.target {
        Target::Local => {
            let dir = match &args.dir {
                Some(d) => d.clone(),
                None => std::env::temp_dir().join(format!("bulwark-chaos-{}", std::process::id())),
            };
            let _ = std::fs::remove_dir_all(&dir);
            println!(
                "chaos {:?}: local {:?} cluster in {} (ports {}+), seed {}, open files {fds}",
                args.scenario,
                args.layout,
                dir.display(),
                args.base_port,
                args.seed
            );
            let router_env = args
                .router_env
                .iter()
                .map(|kv| {
                    kv.split_once('=')
                        .filter(|(k, _)| k.starts_with("BULWARK_"))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .with_context(|| format!("--router-env {kv}: expected BULWARK_KEY=VALUE"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let options = LocalOptions {
                router_env,
                replication_settings: replication_settings(args.scenario),
                small_disks_mb: (args.scenario == Scenario::DiskFull).then_some(SMALL_DISK_MB),
                layout: args.layout,
                ..Default::default()
            };
            let mut cluster = LocalCluster::start(bin, &dir, args.base_port, &options)
                .await
                .context("starting the local cluster")?;
            let passed = run_on(&args, &mut cluster, started).await;
            cluster.finish();
            if matches!(passed, Ok(true)) && args.dir.is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            passed
        }
        Target::Compose => {
            if !args.router_env.is_empty() {
                bail!("--router-env applies to the local target: the compose routers' settings are in deploy/docker-compose.yml");
            }
            if args.layout != Layout::ReplicaSet {
                bail!("--layout applies to the local target: the compose target is the replica set of deploy/docker-compose.yml");
            }
            println!(
                "chaos {:?}: the docker-compose cluster (make cluster-up), seed {}, open files {fds}",
                args.scenario, args.seed
            );
            let mut cluster = ComposeCluster::attach()
                .await
                .context("attaching to the compose cluster")?;
            let passed = run_on(&args, &mut cluster, started).await;
            cluster.finish();
            passed
        }
    }
}

/// Runs a setup step again while the set is still settling: a healthy cluster can still
/// hand its primary over to the preferred member (a priority takeover) in its first
/// seconds, and DDL is not retried by the driver. Bounded: 40 tries, 250 ms apart.
async fn until_settled<T, F, Fut>(step: F) -> mongodb::error::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = mongodb::error::Result<T>>,
{
    // InterruptedDueToReplStateChange, NotWritablePrimary, NotPrimaryNoSecondaryOk,
    // PrimarySteppedDown, InterruptedAtShutdown, ShutdownInProgress.
    const SETTLING: [i32; 6] = [11602, 10107, 13435, 189, 11600, 91];
    let mut tries = 0;
    loop {
        match step().await {
            Err(e) if tries < 40 => {
                let settling = match e.kind.as_ref() {
                    mongodb::error::ErrorKind::Command(c) => SETTLING.contains(&c.code),
                    mongodb::error::ErrorKind::Io(_) => true,
                    _ => false,
                };
                if !settling {
                    return Err(e);
                }
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other,
        }
    }
}

/// Empties the API workload's collections (the compose cluster keeps an earlier run's)
/// and indexes its documents: `u` unique, `tags` multikey.
async fn prepare_api_collections(admin: &mongodb::Client) -> anyhow::Result<()> {
    let db = admin.database(api_workload::DB);
    for name in [api_workload::COUNTERS, api_workload::DOCS] {
        let c = db.collection::<bson::Document>(name);
        until_settled(|| std::future::IntoFuture::into_future(c.drop()))
            .await
            .with_context(|| format!("dropping chaos.{name} before the run"))?;
    }
    let scratch = admin.database(api_workload::DDL_DB);
    until_settled(|| std::future::IntoFuture::into_future(scratch.drop()))
        .await
        .context("dropping the DDL worker's database before the run")?;
    let docs = db.collection::<bson::Document>(api_workload::DOCS);
    for (keys, unique) in [(bson::doc! {"u": 1}, true), (bson::doc! {"tags": 1}, false)] {
        let index = || {
            let options = mongodb::options::IndexOptions::builder()
                .unique(unique)
                .build();
            let model = mongodb::IndexModel::builder()
                .keys(keys.clone())
                .options(options)
                .build();
            std::future::IntoFuture::into_future(docs.create_index(model))
        };
        until_settled(index)
            .await
            .context("indexing chaos.docs before the run")?;
    }
    Ok(())
}

/// The scenario on a healthy cluster: workload, fault, recovery, checks, report.
/// `started`: when the runner began bringing the cluster up.
async fn run_on<C: Cluster>(
    args: &ChaosArgs,
    cluster: &mut C,
    started: Instant,
) -> anyhow::Result<bool> {
    println!(
        "cluster healthy after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let phases = Phases::of(args.duration);
    println!(
        "{}s + {}s fault + {}s",
        phases.pre, phases.fault, phases.post
    );
    let admin = client(&cluster.uri(cluster.router_of("A"))).await?;
    prepare_history_collections(&admin, cluster.sharded()).await?;
    prepare_api_collections(&admin).await?;
    let run = run_workload(args, cluster, &admin, &phases).await?;
    let checks = Checks::run(args, cluster, &admin, &run).await?;
    let (counts, svg) = write_outputs(args, cluster.target(), &phases, &run, &checks)?;
    print_summary(args, &counts, &run, &checks, &svg)?;
    Ok(checks.passed)
}

/// Seconds of the run: a quarter before the fault, a quarter of fault, the rest to
/// recover, with at least 5, 5 and 10.
struct Phases {
    pre: u64,
    fault: u64,
    post: u64,
}

impl Phases {
    fn of(duration: u64) -> Phases {
        let pre = (duration / 4).max(5);
        let fault = (duration / 4).max(5);
        let post = duration.saturating_sub(pre + fault).max(10);
        Phases { pre, fault, post }
    }
}

/// Empties the collections the histories' workload writes and indexes them; fills the
/// transactional workloads' collections, split over both shards in a sharded cluster.
async fn prepare_history_collections(admin: &mongodb::Client, sharded: bool) -> anyhow::Result<()> {
    // The histories' values are unique within a run only: start from empty collections
    // (the compose cluster keeps an earlier run's data). Each gets a secondary index (the
    // lists' is multikey), whose upkeep through the fault `validate` checks afterwards.
    for (coll, field) in [("lists", "vals"), ("registers", "v")] {
        let c = admin.database("chaos").collection::<bson::Document>(coll);
        until_settled(|| std::future::IntoFuture::into_future(c.drop()))
            .await
            .with_context(|| format!("dropping chaos.{coll} before the run"))?;
        let index = || {
            let model = mongodb::IndexModel::builder()
                .keys(bson::doc! {field: 1})
                .build();
            std::future::IntoFuture::into_future(c.create_index(model))
        };
        until_settled(index)
            .await
            .with_context(|| format!("indexing chaos.{coll} before the run"))?;
    }
    let filled = [
        (
            txn_workload::collection(admin),
            txn_workload::initial_lists(),
            i64::from(txn_workload::TXN_KEYS / 2),
        ),
        (
            bank_workload::collection(admin),
            bank_workload::initial_accounts(),
            bank_workload::ACCOUNTS / 2,
        ),
    ];
    for (coll, docs, middle) in filled {
        let ns = coll.namespace();
        until_settled(|| std::future::IntoFuture::into_future(coll.drop()))
            .await
            .with_context(|| format!("dropping {ns} before the run"))?;
        let fill = || std::future::IntoFuture::into_future(coll.insert_many(docs.clone()));
        until_settled(fill)
            .await
            .with_context(|| format!("filling {ns} before the run"))?;
        if sharded {
            split_over_shards(admin, &ns.to_string(), middle).await?;
        }
    }
    Ok(())
}

/// Shards `ns` on `_id`: below `middle` on shard0, the rest on shard1.
async fn split_over_shards(admin: &mongodb::Client, ns: &str, middle: i64) -> anyhow::Result<()> {
    let db = ns.split('.').next().unwrap_or(ns);
    let steps = [
        doc! {"enableSharding": db},
        doc! {"shardCollection": ns, "key": {"_id": 1}},
        doc! {"split": ns, "middle": {"_id": middle}},
        doc! {"moveChunk": ns, "find": {"_id": 0_i64}, "to": "shard0"},
        doc! {"moveChunk": ns, "find": {"_id": middle}, "to": "shard1"},
    ];
    let a = admin.database("admin");
    for step in steps {
        until_settled(|| std::future::IntoFuture::into_future(a.run_command(step.clone())))
            .await
            .with_context(|| format!("{step} before the run"))?;
    }
    Ok(())
}

/// What the workload saw through the fault and the recovery.
struct WorkloadRun {
    history: History,
    /// The transactional workload's transactions.
    txns: Vec<crate::check::si::Txn>,
    /// The bank's transfers and snapshot reads.
    bank: Vec<bank_workload::Step>,
    clock: Clock,
    fault: FaultRun,
    /// When the fault began, in seconds on the workload clock.
    fault_start: f64,
    /// Whole seconds the workload ran.
    total: usize,
}

/// Runs the workload through every site's router: `phases.pre` seconds, then the fault,
/// then `phases.post` seconds to recover.
async fn run_workload<C: Cluster>(
    args: &ChaosArgs,
    cluster: &mut C,
    admin: &mongodb::Client,
    phases: &Phases,
) -> anyhow::Result<WorkloadRun> {
    let mut clients = Vec::new();
    for site in SITES {
        clients.push(client(&cluster.uri(cluster.router_of(site))).await?);
    }
    let clock = Clock(Instant::now());
    let stop = CancellationToken::new();
    let shape = Shape {
        workers_per_site: 3,
        think: Duration::from_millis(20),
    };
    // One list-append worker and one bank worker per site, beside the single-document
    // workload.
    let stopping = &stop;
    let per_site = |base: u32| {
        clients.iter().enumerate().map(move |(site, c)| {
            let id = base + site as u32;
            workload::Worker {
                id,
                client: c.clone(),
                seed: args.seed ^ u64::from(id),
                clock,
                think: shape.think,
                stop: stopping.clone(),
            }
        })
    };
    let txn_work: Vec<_> = per_site(1000)
        .map(|w| tokio::spawn(txn_workload::worker(w)))
        .collect();
    // The bank's steps are transactions of several statements: paced at a third of the
    // other workers' rate, so the single-document workload, whose throughput the
    // recovery checker judges, keeps most of the two cores on the compose target.
    let bank_work: Vec<_> = per_site(2000)
        .map(|mut w| {
            w.think *= 3;
            tokio::spawn(bank_workload::worker(w))
        })
        .collect();
    let work = tokio::spawn(workload::run(
        clients,
        shape,
        args.seed,
        clock,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(phases.pre)).await;
    let fault_start = clock.now() as f64 / 1e9;
    let fault = scenario::fault(
        args.scenario,
        cluster,
        admin,
        phases.fault,
        args.storm_clients,
        clock,
    )
    .await
    .context("applying the fault")?;
    println!(
        "fault '{}' from {fault_start:.1}s to {:.1}s",
        fault.label, fault.ended_at
    );
    tokio::time::sleep(Duration::from_secs(phases.post)).await;
    stop.cancel();
    let history = work.await?;
    let mut txns = Vec::new();
    for w in txn_work {
        txns.extend(w.await?);
    }
    let mut bank = Vec::new();
    for w in bank_work {
        bank.extend(w.await?);
    }
    let total = (clock.now() / 1_000_000_000) as usize;
    Ok(WorkloadRun {
        history,
        txns,
        bank,
        fault,
        fault_start,
        total,
        clock,
    })
}

/// Every checker's verdict on a run.
struct Checks {
    healed: Duration,
    lost: lost_writes::Report,
    rec: recovery::Report,
    lin: Vec<(u32, Verdict)>,
    lin_ok: bool,
    storm_ok: bool,
    fx: effects::Report,
    errs: errors::Report,
    agree: members_agree::Report,
    txn: txn_lists::Report,
    bank: bank::Report,
    passed: bool,
}

impl Checks {
    async fn run<C: Cluster>(
        args: &ChaosArgs,
        cluster: &C,
        admin: &mongodb::Client,
        run: &WorkloadRun,
    ) -> anyhow::Result<Checks> {
        let history = &run.history;
        // The cluster must be healthy again by itself before its contents are judged.
        let healed = cluster.wait_healthy().await.context("after the fault")?;
        let lists = workload::read_lists(admin).await?;
        let lost = lost_writes::check(history, &lists);
        let rec = recovery::check(
            history,
            2,
            run.fault_start as usize,
            run.fault.ended_at.ceil() as usize,
            run.total,
            args.recovery_bound,
        );
        let lin = crate::check::linearizable::check(history);
        let lin_ok = lin.is_empty();
        let storm_ok = run.fault.storm_checks.iter().all(|s| s.ok());
        let (counters, docs) = api_workload::read_state(admin).await?;
        let fx = effects::check(history, &counters, &docs);
        let errs = errors::check(history);
        let agree = members_agree::check(cluster, MEMBERS_AGREE_WITHIN).await;
        let last = txn_workload::final_reads(admin, run.clock.now()).await?;
        let txn = txn_lists::check(run.txns.clone(), last);
        let bank = bank::check(&run.bank, &bank_workload::final_balances(admin).await?);
        let passed = lost.ok()
            && rec.ok()
            && lin_ok
            && storm_ok
            && agree.ok()
            && fx.ok()
            && errs.ok()
            && txn.ok()
            && bank.ok();
        Ok(Checks {
            healed,
            lost,
            rec,
            lin,
            lin_ok,
            storm_ok,
            fx,
            errs,
            agree,
            txn,
            bank,
            passed,
        })
    }
}

/// Writes the JSON report, the timeline plot next to it (.svg) and the history
/// (.history.json); returns the operation counts and the plot's path.
fn write_outputs(
    args: &ChaosArgs,
    target: &str,
    phases: &Phases,
    run: &WorkloadRun,
    checks: &Checks,
) -> anyhow::Result<(String, PathBuf)> {
    let (history, f, c) = (&run.history, &run.fault, checks);
    let tl = timeline::from_history(
        history,
        run.total,
        &format!("{:?} (seed {})", args.scenario, args.seed),
        vec![crate::plot::FaultMark {
            label: f.label.clone(),
            start_secs: run.fault_start,
            end_secs: Some(f.ended_at),
        }],
    );
    let counts = timeline::counts(history);
    let report = json!({
        "scenario": args.scenario,
        "target": target,
        "layout": args.layout,
        "seed": args.seed,
        "router_env": &args.router_env,
        "passed": c.passed,
        "phases": { "before_secs": phases.pre, "fault_secs": phases.fault,
                    "after_secs": phases.post,
                    "fault_started_at": run.fault_start, "fault_ended_at": f.ended_at },
        "fault": { "label": f.label, "details": f.details },
        "operations": counts,
        "checkers": {
            "no_lost_or_duplicated_writes": { "passed": c.lost.ok(), "report": c.lost },
            "linearizable_registers": { "passed": c.lin_ok, "violations": c.lin },
            "recovery": { "passed": c.rec.ok(), "report": c.rec },
            "storm_served": { "passed": c.storm_ok, "reports": f.storm_checks },
            "members_agree": { "passed": c.agree.ok(), "report": &c.agree },
            "effects": { "passed": c.fx.ok(), "report": &c.fx },
            "errors_explained": { "passed": c.errs.ok(), "report": &c.errs },
            "snapshot_isolation": { "passed": c.txn.ok(), "report": &c.txn },
            "bank": { "passed": c.bank.ok(), "report": &c.bank },
        },
        "healthy_again_after_secs": c.healed.as_secs_f64(),
        "timeline": &tl,
    });
    write(&args.report, &serde_json::to_string_pretty(&report)?)?;
    let svg = args.report.with_extension("svg");
    write(&svg, &crate::plot::svg(&tl))?;
    write(
        &args.report.with_extension("history.json"),
        &serde_json::to_string(history)?,
    )?;
    Ok((counts, svg))
}

/// The run's outcome for a human: the checkers' findings, the fault's details, where the
/// report and plot are, and PASSED or FAILED.
fn print_summary(
    args: &ChaosArgs,
    counts: &str,
    run: &WorkloadRun,
    checks: &Checks,
    svg: &Path,
) -> anyhow::Result<()> {
    let Checks {
        lost,
        rec,
        lin,
        agree,
        fx,
        errs,
        passed,
        ..
    } = checks;
    println!(
        "operations {}; lost {} duplicated {} unexpected {} of {} acknowledged appends; linearizability violations {}; baseline {:.0} ops/s, recovered {} after the fault (bound {}s), longest outage {:.1}s",
        counts,
        lost.lost.len(),
        lost.duplicated.len(),
        lost.unexpected.len(),
        lost.acknowledged,
        lin.len(),
        rec.baseline_ops,
        rec.recovered_after_secs
            .map(|s| format!("{s:.0}s"))
            .unwrap_or_else(|| "never".into()),
        args.recovery_bound,
        rec.longest_outage_secs
    );
    println!("{}", agree.summary());
    println!("{}", fx.summary());
    println!("{}", checks.txn.summary());
    println!("{}", checks.bank.summary());
    println!(
        "errors: {} failed operations, {} not explained by the fault{}",
        errs.failures,
        errs.unexplained.len(),
        errs.unexplained
            .iter()
            .take(5)
            .map(|u| format!("\n  {u}"))
            .collect::<String>()
    );
    if let Some(storm) = run.fault.details.as_object() {
        println!(
            "fault details: {}",
            serde_json::to_string(storm)?
                .chars()
                .take(600)
                .collect::<String>()
        );
    }
    println!(
        "report {} ; plot {} ; {}",
        args.report.display(),
        svg.display(),
        if *passed { "PASSED" } else { "FAILED" }
    );
    Ok(())
}

pub(crate) fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The members' extra `[replication]` settings for `scenario`.
fn replication_settings(scenario: Scenario) -> String {
    // Every write of a transaction takes a log entry of its own (`repl::txn_parts`), so
    // the transactional workloads drive the path of transactions split over several
    // entries through every fault.
    let mut settings = "txn_entry_kb = 0\n".to_string();
    if scenario == Scenario::PowerLoss {
        // Power losses find the most to replay with a checkpoint every second: one often
        // falls between a collection's creation and its drop.
        settings.push_str("compact_interval_secs = 1\n");
    }
    settings
}
