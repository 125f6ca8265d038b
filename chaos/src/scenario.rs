//! The scenarios: each is a fault, run against a cluster while the workload records its
//! history; the checkers then judge the history and what the cluster holds.

use std::time::Duration;

use anyhow::Context;
use bson::doc;
use clap::ValueEnum;
use serde::Serialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::check;
use crate::cluster::Cluster;
use crate::raw_client::Login;
use crate::storm;
use crate::workload::Clock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Thousands of clients connect, authenticate (SCRAM-SHA-256), run one command and
    /// disconnect, with 500 ms timeouts, against site A's router.
    ConnectionStorm,
    /// The same storm against a router reading /dev/urandom for every nonce
    /// (nonce_source = "os") and against the default, one after the other.
    NonceContention,
    /// Site B's router answers every command 600 ms late (failCommand fail point) while
    /// 500 ms clients storm it; then the fail point is lifted.
    SlowRouter,
    /// SIGKILL the primary (of every replica set, in the sharded layout); restart it
    /// when the fault ends.
    KillPrimary,
    /// SIGSTOP the primary (of every replica set); SIGCONT when the fault ends.
    PausePrimary,
    /// Cut the (first shard's) primary's site off from the other two; heal when the
    /// fault ends.
    PartitionSite,
    /// Restart every member in turn (SIGTERM), secondaries first, the primary last.
    RollingRestart,
    /// SIGKILL every member at once, moments after DDL (a collection created, written and
    /// dropped), restart them all, wait until the set serves again; repeated through the
    /// fault window.
    PowerLoss,
    /// The primary's filesystem fills up (each data member's directory is a small
    /// filesystem of its own): it must stop acknowledging and the set fail over; when the
    /// fault ends the space is freed and the member restarted (local target, as root).
    DiskFull,
    /// Not a fault: the open-loop experiment of "Where a MongoDB request waits" (50%,
    /// 130%, 50% of measured capacity with 100 ms deadlines), with pools of 100, tiny
    /// pools, and deadlines and admission switched off (local target).
    Overload,
}

/// What a fault did, for the report.
pub struct FaultRun {
    pub label: String,
    pub details: Value,
    /// When the fault actually ended (seconds on the workload clock).
    pub ended_at: f64,
    /// Storms the router must have kept serving (the default-nonce router's, and the
    /// slow router's once its fail point is lifted).
    pub storm_checks: Vec<crate::check::storm::Report>,
}

/// Applies `scenario` to the cluster for about `secs`, then lifts it.
pub async fn fault<C: Cluster>(
    scenario: Scenario,
    cluster: &mut C,
    admin: &mongodb::Client,
    secs: u64,
    storm_clients: usize,
    clock: Clock,
) -> anyhow::Result<FaultRun> {
    let window = Duration::from_secs(secs);
    let login = cluster.login();
    let now_secs = || clock.now() as f64 / 1e9;
    let mut storm_checks = Vec::new();
    let (label, details) = match scenario {
        Scenario::ConnectionStorm => {
            let r = cluster.router_of("A");
            let report = storm_for(cluster, r, storm_clients, login, window).await;
            storm_checks.push(check::storm::check(&report.per_sec));
            (
                format!("storm {storm_clients} clients"),
                json!({ "storm": report }),
            )
        }
        Scenario::NonceContention => {
            let half = window / 2;
            let default = cluster.router_of("A");
            let os = (0..cluster.router_count())
                .find(|&r| cluster.router_nonce_source(r) == "os")
                .context("this target has no router with nonce_source = \"os\" (the local target has one)")?;
            let user = storm_for(cluster, default, storm_clients, login.clone(), half).await;
            storm_checks.push(check::storm::check(&user.per_sec));
            let os = storm_for(cluster, os, storm_clients, login, half).await;
            let ratio = user.handshakes_per_sec / os.handshakes_per_sec.max(1e-9);
            (
                "storm: user nonces, then os nonces".into(),
                json!({ "user": user, "os": os, "handshakes_ratio_user_over_os": ratio }),
            )
        }
        Scenario::SlowRouter => {
            let r = cluster.router_of("B");
            let b = crate::cluster::client(&cluster.uri(r)).await?;
            b.database("admin")
                .run_command(doc! {
                    "configureFailPoint": "failCommand", "mode": "alwaysOn",
                    "data": {"failCommands": ["ping", "find", "update", "insert"],
                             "blockConnection": true, "blockTimeMS": 600},
                })
                .await
                .context("setting the failCommand fail point (the router needs enable_test_commands, which the local target sets)")?;
            let stop = CancellationToken::new();
            let (addr, pid) = (cluster.router_addr(r), cluster.router_pid(r));
            let storm = tokio::spawn(storm::run(
                addr,
                pid,
                storm_clients / 4,
                login,
                stop.clone(),
            ));
            tokio::time::sleep(window).await;
            // Lifting it is itself a command that must get through the storm.
            b.database("admin")
                .run_command(doc! {"configureFailPoint": "failCommand", "mode": "off"})
                .await?;
            let lifted_at = now_secs();
            // Keep storming for a while: the router must serve it again by itself.
            tokio::time::sleep(window).await;
            stop.cancel();
            let mut report = storm.await?;
            report.nonce_source = "user".into();
            let after = report.per_sec.iter().rev().take(3).sum::<u64>();
            // Judged from the first whole second after the lift.
            let lifted = secs as usize + 1;
            storm_checks.push(check::storm::check(
                report.per_sec.get(lifted..).unwrap_or_default(),
            ));
            (
                "site B router +600 ms".into(),
                json!({ "storm": report, "lifted_at_secs": lifted_at,
                        "handshakes_in_last_3s": after }),
            )
        }
        Scenario::KillPrimary | Scenario::PausePrimary | Scenario::PartitionSite => {
            // Every replica set's primary at once: in a sharded cluster a transaction's
            // coordinator, its other participants and the config servers all fail over.
            let primaries = cluster.elected_primaries(admin).await?;
            let ids: Vec<u64> = primaries.iter().map(|&p| cluster.member_id(p)).collect();
            let site = cluster.member_site(primaries[0]).to_string();
            let names = ids
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let label = match scenario {
                Scenario::KillPrimary => {
                    for &p in &primaries {
                        cluster.kill_member(p)?;
                    }
                    format!("SIGKILL member {names}")
                }
                Scenario::PausePrimary => {
                    for &p in &primaries {
                        cluster.pause_member(p, true)?;
                    }
                    format!("SIGSTOP member {names}")
                }
                _ => {
                    cluster.partition(&site)?;
                    format!("site {site} cut off")
                }
            };
            tokio::time::sleep(window).await;
            for &p in &primaries {
                match scenario {
                    Scenario::KillPrimary => cluster.start_member(p)?,
                    Scenario::PausePrimary => cluster.pause_member(p, false)?,
                    _ => {}
                }
            }
            if scenario == Scenario::PartitionSite {
                cluster.heal()?;
            }
            (label, json!({ "primaries_before": ids, "site": site }))
        }
        Scenario::Overload => anyhow::bail!("overload runs on its own (overload::run)"),
        Scenario::PowerLoss => {
            let rounds = power_losses(cluster, admin, window, now_secs).await?;
            (
                "power loss of every member".into(),
                json!({ "rounds": rounds }),
            )
        }
        Scenario::DiskFull => {
            let p = cluster.elected_primary(admin).await?;
            let id = cluster.member_id(p);
            cluster.fill_disk(p, true)?;
            tokio::time::sleep(window).await;
            cluster.fill_disk(p, false)?;
            // A member that stopped on a failed write resumes only from a restart, as
            // mongod does once its disk has room again.
            cluster.stop_member(p)?;
            cluster.start_member(p)?;
            cluster.wait_member_up(admin, p).await?;
            (format!("disk of member {id} full"), json!({ "member": id }))
        }
        Scenario::RollingRestart => {
            let p = cluster.elected_primary(admin).await?;
            let mut order: Vec<usize> = (0..cluster.member_count()).filter(|&i| i != p).collect();
            order.push(p);
            let mut restarts = Vec::new();
            for i in order {
                let t0 = now_secs();
                cluster.stop_member(i)?;
                cluster.start_member(i)?;
                cluster.wait_member_up(admin, i).await?;
                let healthy = cluster.wait_healthy().await?;
                restarts.push(json!({ "member": cluster.member_id(i), "at_secs": t0,
                                      "healthy_after_secs": healthy.as_secs_f64() }));
            }
            ("rolling restart".into(), json!({ "restarts": restarts }))
        }
    };
    Ok(FaultRun {
        label,
        details,
        ended_at: now_secs(),
        storm_checks,
    })
}

/// How long after the DDL each power loss comes, in turn: at once, while the drop may be
/// replicating, and after it.
const POWER_LOSS_DELAYS_MS: [u64; 4] = [0, 20, 150, 600];

/// Power losses until `window` has passed (at least one): DDL, a pause, every member
/// killed, every member restarted, then the set must be healthy again.
async fn power_losses<C: Cluster>(
    cluster: &mut C,
    admin: &mongodb::Client,
    window: Duration,
    now_secs: impl Fn() -> f64,
) -> anyhow::Result<Vec<Value>> {
    let started = std::time::Instant::now();
    let mut rounds = Vec::new();
    while rounds.is_empty() || started.elapsed() < window {
        let n = rounds.len();
        let delay = Duration::from_millis(POWER_LOSS_DELAYS_MS[n % POWER_LOSS_DELAYS_MS.len()]);
        let ddl = ddl_before_power_loss(admin, n).await;
        tokio::time::sleep(delay).await;
        let at = now_secs();
        for i in 0..cluster.member_count() {
            cluster.kill_member(i)?;
        }
        for i in 0..cluster.member_count() {
            cluster.start_member(i)?;
        }
        for i in 0..cluster.member_count() {
            cluster.wait_member_up(admin, i).await?;
        }
        let healthy = cluster.wait_healthy().await?;
        rounds.push(
            json!({ "at_secs": at, "after_ddl_ms": delay.as_millis() as u64,
                            "ddl": ddl, "healthy_after_secs": healthy.as_secs_f64() }),
        );
    }
    Ok(rounds)
}

/// Longer than the members' checkpoint interval in this scenario (`run.rs`).
const CHECKPOINT_GAP: Duration = Duration::from_millis(1500);

/// A collection created, indexed, written and dropped, and a second one created and
/// written: what a crash right after must replay. Says how far it got (a command may fail
/// while the set is still recovering from the previous round).
async fn ddl_before_power_loss(admin: &mongodb::Client, n: usize) -> String {
    let db = admin.database("chaos_ddl");
    let steps = async {
        let gone = db.collection::<bson::Document>(&format!("dropped{n}"));
        gone.insert_one(doc! {"_id": n as i64, "k": 1}).await?;
        db.run_command(doc! {"createIndexes": format!("dropped{n}"),
        "indexes": [{"key": {"k": 1}, "name": "k_1", "unique": true}]})
            .await?;
        // A checkpoint (every second in this scenario) between the create and the drop:
        // the replay then starts after the create and meets the dropped table.
        tokio::time::sleep(CHECKPOINT_GAP).await;
        gone.insert_one(doc! {"_id": -(n as i64) - 1, "k": 2})
            .await?;
        gone.drop().await?;
        let kept = db.collection::<bson::Document>(&format!("kept{n}"));
        kept.insert_one(doc! {"_id": n as i64}).await?;
        Ok::<_, mongodb::error::Error>(())
    };
    match steps.await {
        Ok(()) => "done".into(),
        Err(e) => format!("failed: {e}"),
    }
}

async fn storm_for<C: Cluster>(
    cluster: &C,
    r: usize,
    clients: usize,
    login: Login,
    window: Duration,
) -> storm::StormReport {
    let stop = CancellationToken::new();
    let task = tokio::spawn(storm::run(
        cluster.router_addr(r),
        cluster.router_pid(r),
        clients,
        login,
        stop.clone(),
    ));
    tokio::time::sleep(window).await;
    stop.cancel();
    let mut report = task.await.unwrap_or_default();
    report.nonce_source = cluster.router_nonce_source(r).into();
    report
}
