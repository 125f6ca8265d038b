//! Handshake benchmark: connect + SCRAM-SHA-256 (speculative, in `hello`) + ping + close,
//! from many concurrent clients on loopback, against an in-process router with the
//! default nonce source and with `nonce_source = "os"`, side by side in one run. Prints
//! handshakes/s and the router threads' user and system CPU per 1,000 handshakes (from
//! /proc/self/task/*/stat), then the memory per idle authenticated connection with N held
//! open (RSS delta / N; it includes the client side's few hundred bytes per socket).
//!
//!   cargo run --release -p tests --bin handshake-bench [-- --secs 5 --clients 64 --idle 10000]
//!
//! The router, shard and clients each run on their own named runtime, so the CPU figures
//! are the router's alone. The client is a hand-written SCRAM client over raw TCP (the
//! `wire` codec), caching the salted password as drivers do, so it costs little.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chaos::proc_stat::{self, raise_fd_limit};
use chaos::raw_client::{authenticate, connect, handshake, Login};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const USER: &str = "bench";
const PASSWORD: &str = "bench-password";
/// Shared by the routers and the shard (internal authentication is mandatory with auth).
const CLUSTER_KEY: &str = "handshake-bench-cluster-key-0123456789";
const ROUTER_THREAD: &str = "bench-router";

struct Args {
    secs: u64,
    clients: usize,
    idle: usize,
}

/// `--secs N --clients N --idle N`, each optional.
fn parse_args() -> Args {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: u64| -> u64 {
        argv.iter()
            .position(|a| a == name)
            .map(|i| {
                argv.get(i + 1)
                    .and_then(|v| v.parse().ok())
                    .expect("numeric flag value")
            })
            .unwrap_or(default)
    };
    if let Some(unknown) = argv
        .iter()
        .step_by(2)
        .find(|a| !["--secs", "--clients", "--idle"].contains(&a.as_str()))
    {
        panic!("unknown flag {unknown} (--secs, --clients, --idle)");
    }
    Args {
        secs: flag("--secs", 5),
        clients: flag("--clients", 64) as usize,
        idle: flag("--idle", 10_000) as usize,
    }
}

fn runtime(name: &str, threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

fn main() -> anyhow::Result<()> {
    let mut args = parse_args();
    // Client and server ends of each held connection are both in this process.
    let fds = raise_fd_limit(args.idle as u64 * 2 + 1024);
    if (args.idle as u64) * 2 + 1024 > fds {
        let fit = (fds.saturating_sub(1024) / 2) as usize;
        eprintln!(
            "RLIMIT_NOFILE is {fds}: holding {fit} idle connections instead of {}",
            args.idle
        );
        args.idle = fit;
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let shard_rt = runtime("bench-shard", 1);
    let router_rt = runtime(ROUTER_THREAD, cores);
    let client_rt = runtime("bench-client", cores);
    let shutdown = CancellationToken::new();

    // One shard (memory engine), and two routers on it differing only in nonce source.
    let shard_addr = shard_rt.block_on(async {
        let node = shard::Node::open(&shard::EngineKind::Memory, Duration::from_secs(600))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let s = shutdown.clone();
        // With auth on, routers and members must share a cluster key.
        let auth = proto::cluster_auth::ClusterAuth::key(Some(CLUSTER_KEY.into()));
        tokio::spawn(async move {
            shard::serve_with_auth(node, listener, Duration::from_secs(60), auth, s).await
        });
        anyhow::Ok(addr)
    })?;
    let mut routers = Vec::new();
    for nonce in ["user", "os"] {
        let addr = router_rt.block_on(async {
            let listener = router::listener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let config = router::RouterConfig {
                listen: addr.to_string(),
                shard: shard_addr.to_string(),
                auth: true,
                nonce_source: nonce.into(),
                admin_user: USER.into(),
                admin_password: PASSWORD.into(),
                cluster_key: CLUSTER_KEY.into(),
                ..Default::default()
            };
            let s = shutdown.clone();
            tokio::spawn(async move {
                if let Err(e) = router::serve(listener, config, s).await {
                    eprintln!("router did not start: {e}");
                }
            });
            anyhow::Ok(addr)
        })?;
        routers.push((nonce, addr));
    }

    println!(
        "handshake = connect + hello{{speculativeAuthenticate SCRAM-SHA-256}} + saslContinue + ping + close; \
         {} clients, {} s per source, {cores} cores",
        args.clients, args.secs
    );
    println!(
        "{:<14} {:>12} {:>16} {:>16} {:>10}",
        "nonce_source", "handshakes/s", "user ms/1000", "sys ms/1000", "errors"
    );
    let mut figures = Vec::new();
    for (nonce, addr) in &routers {
        // Warm up: the bootstrap user exists and the client's salted password is cached.
        let login = client_rt.block_on(async {
            for _ in 0..200 {
                let mut login = Login::new(USER, PASSWORD);
                if handshake(addr, &mut login).await.is_ok() {
                    return login;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("router {addr} never accepted the bench user");
        });
        let (done, errors, elapsed, cpu) =
            client_rt.block_on(churn(*addr, args.clients, args.secs, login));
        let rate = done as f64 / elapsed.as_secs_f64();
        let per = |ms: f64| {
            if done == 0 {
                0.0
            } else {
                ms * 1000.0 / done as f64
            }
        };
        println!(
            "{:<14} {:>12.0} {:>16.1} {:>16.1} {:>10}",
            nonce,
            rate,
            per(cpu.0),
            per(cpu.1),
            errors
        );
        figures.push((rate, per(cpu.1)));
    }
    if let [(ur, us), (or, os)] = figures[..] {
        println!(
            "ratio user/os: handshakes/s {:.2}x, system CPU per handshake {:.2}x",
            ur / or.max(1e-9),
            us / os.max(1e-9)
        );
    }

    // Memory per idle authenticated connection.
    let (_, addr) = routers[0];
    let before = rss_bytes();
    let held = client_rt.block_on(hold(addr, args.idle, args.clients));
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_bytes();
    let n = held.len().max(1);
    println!(
        "idle authenticated connections held: {} ; RSS {:.1} MiB -> {:.1} MiB ; {:.1} KiB per connection (router + client socket state)",
        held.len(),
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / n as f64 / 1024.0
    );
    drop(held);
    shutdown.cancel();
    Ok(())
}

/// Runs `clients` loops of full handshakes for `secs`; returns (handshakes, errors,
/// elapsed, router (user ms, system ms)).
async fn churn(
    addr: std::net::SocketAddr,
    clients: usize,
    secs: u64,
    login: Login,
) -> (u64, u64, Duration, (f64, f64)) {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let cpu0 = router_cpu_ms();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (done, errors, mut login) = (done.clone(), errors.clone(), login.clone());
        tasks.push(tokio::spawn(async move {
            // Each client counts locally and adds once at the end (no shared hot counter).
            let (mut ok, mut bad) = (0u64, 0u64);
            while Instant::now() < deadline {
                match handshake(&addr, &mut login).await {
                    Ok(_) => ok += 1,
                    Err(_) => bad += 1,
                }
            }
            done.fetch_add(ok, Ordering::Relaxed);
            errors.fetch_add(bad, Ordering::Relaxed);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = started.elapsed();
    let cpu1 = router_cpu_ms();
    (
        done.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        elapsed,
        (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
    )
}

/// Opens `n` authenticated connections and keeps them.
async fn hold(addr: std::net::SocketAddr, n: usize, parallel: usize) -> Vec<TcpStream> {
    let mut login = Login::new(USER, PASSWORD);
    handshake(&addr, &mut login)
        .await
        .expect("warm-up handshake");
    let mut out = Vec::with_capacity(n);
    let mut pending = Vec::new();
    for _ in 0..n {
        let mut login = login.clone();
        pending.push(tokio::spawn(async move {
            let open = async {
                let mut s = connect(&addr).await?;
                authenticate(&mut s, &mut login).await?;
                anyhow::Ok(s)
            };
            // Bounded: a connection the router could not accept must not hang the run.
            tokio::time::timeout(Duration::from_secs(10), open).await?
        }));
        if pending.len() >= parallel {
            for t in pending.drain(..) {
                if let Ok(Ok(s)) = t.await {
                    out.push(s);
                }
            }
        }
    }
    for t in pending {
        if let Ok(Ok(s)) = t.await {
            out.push(s);
        }
    }
    out
}

/// User and system CPU (ms) of the router runtime's threads so far.
fn router_cpu_ms() -> (f64, f64) {
    proc_stat::threads_cpu_ms("self", ROUTER_THREAD)
}

fn rss_bytes() -> u64 {
    let pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}
