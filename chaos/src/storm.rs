//! A connection storm, as in a mongos connection-storm outage: many concurrent clients that each
//! connect, authenticate with SCRAM-SHA-256, run one command and disconnect, giving up
//! after 500 ms (and then, like an application, trying again at once).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::proc_stat;
use crate::raw_client::{handshake, Login};

/// The clients' timeout: short, as applications set it, so that a slow handshake is a
/// failed one.
pub const CLIENT_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Debug, Default, Clone, Serialize)]
pub struct StormReport {
    pub router_port: u16,
    pub nonce_source: String,
    pub clients: usize,
    pub secs: f64,
    pub handshakes: u64,
    pub handshakes_per_sec: f64,
    /// Timed out after 500 ms or refused.
    pub errors: u64,
    /// The router process's CPU over the storm.
    pub router_user_cpu_ms: f64,
    pub router_sys_cpu_ms: f64,
    /// CPU per 1,000 successful handshakes.
    pub user_ms_per_1000: f64,
    pub sys_ms_per_1000: f64,
    /// Successful handshakes in each second of the storm (an avalanche shows as a fall
    /// to zero that does not come back).
    pub per_sec: Vec<u64>,
}

/// Storms `addr` with `clients` concurrent connect-authenticate-ping-close loops until
/// `stop`. `router_pid` is the process whose CPU is reported.
pub async fn run(
    addr: SocketAddr,
    router_pid: Option<u32>,
    clients: usize,
    login: Login,
    stop: CancellationToken,
) -> StormReport {
    let pid = router_pid.map(|p| p.to_string());
    let cpu = || {
        pid.as_ref()
            .and_then(|p| proc_stat::cpu_ms(std::path::Path::new(&format!("/proc/{p}/stat"))))
            .unwrap_or((0.0, 0.0))
    };
    // Derive the salted password once, as a driver's connection pool does: 2,000 clients
    // each running PBKDF2 would measure the client, not the router.
    let mut login = login;
    for _ in 0..50 {
        if handshake(&addr, &mut login).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu0 = cpu();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (mut login, stop) = (login.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            // Per-client counts, merged at the end: no shared counter in the loop.
            let mut per_sec: Vec<u64> = Vec::new();
            let mut errors = 0u64;
            while !stop.is_cancelled() {
                let attempt = tokio::time::timeout(CLIENT_TIMEOUT, handshake(&addr, &mut login));
                let ok = tokio::select! {
                    _ = stop.cancelled() => break,
                    r = attempt => matches!(r, Ok(Ok(()))),
                };
                if ok {
                    let s = started.elapsed().as_secs() as usize;
                    if per_sec.len() <= s {
                        per_sec.resize(s + 1, 0);
                    }
                    per_sec[s] += 1;
                } else {
                    errors += 1;
                    // A refused connect fails at once; do not spin on it.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            (per_sec, errors)
        }));
    }
    let mut r = StormReport {
        router_port: addr.port(),
        clients,
        ..Default::default()
    };
    for t in tasks {
        if let Ok((per_sec, errors)) = t.await {
            if r.per_sec.len() < per_sec.len() {
                r.per_sec.resize(per_sec.len(), 0);
            }
            for (i, n) in per_sec.iter().enumerate() {
                r.per_sec[i] += n;
            }
            r.errors += errors;
        }
    }
    let cpu1 = cpu();
    r.secs = started.elapsed().as_secs_f64();
    r.handshakes = r.per_sec.iter().sum();
    r.handshakes_per_sec = r.handshakes as f64 / r.secs.max(1e-9);
    r.router_user_cpu_ms = cpu1.0 - cpu0.0;
    r.router_sys_cpu_ms = cpu1.1 - cpu0.1;
    let per = |ms: f64| ms * 1000.0 / (r.handshakes.max(1)) as f64;
    r.user_ms_per_1000 = per(r.router_user_cpu_ms);
    r.sys_ms_per_1000 = per(r.router_sys_cpu_ms);
    r
}
