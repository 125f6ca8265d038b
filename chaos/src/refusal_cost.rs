//! What one refusal costs the cluster against one served lookup, measured in the same
//! run as the overload experiment it bounds.
//!
//! A cluster offered `k` × C that refuses exactly the excess still pays for every
//! refusal. If a refusal costs a share `r` of a served lookup's CPU, a full core serves
//! at most `(1 − k·r) / (1 − r)` of C: 0.70 of C at r = 0.5 and k = 1.3, 0.85 needs
//! r ≤ 1/3. So the goodput a shedder can reach is decided by `r` as much as by how well
//! it picks what to refuse, and `r` is measured here rather than guessed from a profile.
//!
//! How: closed loops of `_id` lookups over raw connections to one router, alternating
//! windows in which every lookup is served and windows in which the router refuses
//! every one (the router's `shedCommands` fail point, on lookups with `maxTimeMS` 100:
//! the router reads and decodes each, refuses it by the path its shedder takes, answers
//! 462 with the overload labels and never forwards, which is what a shed command
//! costs). The cluster's CPU per command in each window, medians over the rounds. The
//! machine's speed moves between windows seconds apart, so the rounds alternate and the
//! figure is a median.
//!
//! Two more served windows tell the closed loop's price apart from the burst's: the same
//! lookups with `maxTimeMS` (the deadline's handling), and taking turns over 800
//! connections instead of 32 (the spread of a burst from eight pools of 100).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bson::{doc, Document};
use serde::Serialize;

use crate::raw_client::Login;
use crate::raw_pool::RawPool;

/// Commands in flight in each window: enough to keep the cluster's core full.
const IN_FLIGHT: usize = 32;
const WINDOW: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 3;
/// Connections the spread window's lookups take turns over: eight pools of 100.
pub const SPREAD_OVER: usize = 800;
/// What the shedder answers (`MongoError::overloaded`).
const OVERLOADED: i32 = wire::ErrorCode::IngressRequestRateLimitExceeded as i32;

#[derive(Debug, Clone, Serialize)]
pub struct RefusalCost {
    /// The cluster's CPU per served lookup, median over the rounds.
    pub served_us: f64,
    /// The same with `maxTimeMS` 100 on every lookup, as the experiment's requests carry:
    /// what the deadline's handling (its split, timers, the gate's line) adds.
    pub served_with_deadline_us: f64,
    /// The same lookups taking turns over `SPREAD_OVER` connections, as a burst from
    /// eight pools of 100 spreads them: what a wide spread of connections adds.
    pub served_spread_us: f64,
    /// The cluster's CPU per refused lookup, median over the rounds.
    pub refused_us: f64,
    /// `refused_us / served_us`.
    pub ratio: f64,
    /// The most of C a cluster offered [`crate::overload`]'s burst can serve at this
    /// ratio, refusing exactly the excess.
    pub goodput_ceiling: f64,
}

impl RefusalCost {
    fn new(served: [f64; 3], refused_us: f64, offered: f64) -> RefusalCost {
        let [served_us, with_deadline, spread] = served;
        let ratio = refused_us / served_us;
        RefusalCost {
            served_us,
            served_with_deadline_us: with_deadline,
            served_spread_us: spread,
            refused_us,
            ratio,
            goodput_ceiling: ceiling(ratio, offered),
        }
    }
}

/// The share of C served when `offered` × C arrive, the excess is refused, and a refusal
/// costs `ratio` of a served lookup (at most all of C; nothing once refusing the excess
/// alone would take the whole core).
pub fn ceiling(ratio: f64, offered: f64) -> f64 {
    if offered <= 1.0 {
        return 1.0;
    }
    if ratio >= 1.0 {
        return 0.0;
    }
    ((1.0 - offered * ratio) / (1.0 - ratio)).clamp(0.0, 1.0)
}

/// Measures [`RefusalCost`] through the router at `addr`; `cluster_cpu` is the CPU in
/// milliseconds every process of the cluster has used so far.
pub async fn measure(
    admin: &mongodb::Client,
    addr: SocketAddr,
    login: Login,
    docs: i64,
    offered: f64,
    cluster_cpu: impl Fn() -> f64,
) -> anyhow::Result<RefusalCost> {
    let spread_login = login.clone();
    let pool = Arc::new(
        RawPool::open(addr, login, IN_FLIGHT)
            .await
            .context("opening the refusal-cost connections")?,
    );
    let spread = Arc::new(
        RawPool::open_rotating(addr, spread_login, IN_FLIGHT, SPREAD_OVER)
            .await
            .context("opening the spread connections")?,
    );
    let (mut served, mut timed, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    let mut spread_us = Vec::new();
    for _ in 0..ROUNDS {
        served.push(cpu_per_command(&pool, docs, Window::Served, &cluster_cpu).await?);
        spread_us.push(cpu_per_command(&spread, docs, Window::Served, &cluster_cpu).await?);
        timed.push(cpu_per_command(&pool, docs, Window::WithDeadline, &cluster_cpu).await?);
        refuse_finds(admin, true).await?;
        let r = cpu_per_command(&pool, docs, Window::Refused, &cluster_cpu).await;
        refuse_finds(admin, false).await?;
        refused.push(r?);
    }
    Ok(RefusalCost::new(
        [
            median(&mut served),
            median(&mut timed),
            median(&mut spread_us),
        ],
        median(&mut refused),
        offered,
    ))
}

/// Sets or lifts the fail point that makes the router shed every command with a
/// deadline.
async fn refuse_finds(admin: &mongodb::Client, on: bool) -> anyhow::Result<()> {
    let cmd = doc! {
        "configureFailPoint": "shedCommands", "mode": if on { "alwaysOn" } else { "off" },
    };
    admin
        .database("admin")
        .run_command(cmd)
        .await
        .context("setting the failCommand fail point (needs enable_test_commands)")?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Window {
    Served,
    /// Served, each lookup with `maxTimeMS` 100.
    WithDeadline,
    /// Each lookup with `maxTimeMS` 100, refused with [`OVERLOADED`] by the shedder
    /// (forced by the fail point).
    Refused,
}

/// One window's closed loop; the cluster's CPU in microseconds per command that ended
/// as the window expects.
async fn cpu_per_command(
    pool: &Arc<RawPool>,
    docs: i64,
    window: Window,
    cluster_cpu: &impl Fn() -> f64,
) -> anyhow::Result<f64> {
    let cpu_before = cluster_cpu();
    let until = Instant::now() + WINDOW;
    let loops: Vec<_> = (0..IN_FLIGHT)
        .map(|n| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let (mut expected, mut key) = (0u64, n as i64);
                while Instant::now() < until {
                    let mut find = doc! {
                        "find": "docs", "filter": {"_id": key % docs}, "limit": 1,
                        "singleBatch": true, "$db": "overload",
                    };
                    if window != Window::Served {
                        find.insert("maxTimeMS", 100);
                    }
                    let slot = pool.slot().await;
                    match pool.run(slot, find).await {
                        Ok(reply) if ended_as_expected(&reply, window) => expected += 1,
                        // The closed loop keeps the router full, and on a slow stretch
                        // of the host its shedder really refuses a few lookups with a
                        // deadline (seen at a C of about 8,000; taken for a failure, such
                        // a refusal would end the whole run). Not counted; their cost,
                        // about an eighth of a served lookup's each, is charged to the
                        // served ones, which raises the figure by about an eighth of the
                        // share refused.
                        Ok(reply) if window == Window::WithDeadline && is_shed(&reply) => {}
                        Ok(reply) => anyhow::bail!("unexpected reply: {reply}"),
                        Err(e) => return Err(e),
                    }
                    key += 7919;
                }
                Ok(expected)
            })
        })
        .collect();
    let mut commands = 0;
    for l in loops {
        commands += l.await??;
    }
    let cpu_ms = cluster_cpu() - cpu_before;
    anyhow::ensure!(
        commands > 0,
        "no command completed in a refusal-cost window"
    );
    Ok(cpu_ms * 1000.0 / commands as f64)
}

fn ended_as_expected(reply: &Document, window: Window) -> bool {
    match window {
        Window::Refused => is_shed(reply),
        Window::Served | Window::WithDeadline => reply.get_f64("ok") == Ok(1.0),
    }
}

fn is_shed(reply: &Document) -> bool {
    reply.get_i32("code") == Ok(OVERLOADED)
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_follows_from_the_cost_of_a_refusal() {
        // Free refusals: everything up to C is served.
        assert_eq!(ceiling(0.0, 1.3), 1.0);
        assert!((ceiling(0.5, 1.3) - 0.7).abs() < 1e-9);
        assert!((ceiling(1.0 / 3.0, 1.3) - 0.85).abs() < 1e-9);
        // Refusals so dear that refusing the excess alone fills the core.
        assert_eq!(ceiling(0.8, 1.3), 0.0);
        assert_eq!(ceiling(1.0, 1.3), 0.0);
        // No excess, nothing to refuse.
        assert_eq!(ceiling(0.9, 1.0), 1.0);
    }
}
