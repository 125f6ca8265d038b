//! `bulwark local`: a whole cluster in one process, for development.
//!
//! The default layout is three sites (A, B, C) on loopback: a shard replica set with one
//! member per site, replicating over real gRPC, and one router per site on ports P, P+1,
//! P+2, each preferring its own site's member for reads that allow it.
//! `--layout two-two-arbiter` puts two data members in A, two in B and an arbiter in C;
//! `--layout single` runs one unreplicated node behind one router.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::ValueEnum;
use shard::repl::{MemberConfig, ReplConfig};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// One member per site, one router per site.
    ThreeSites,
    /// Two data members in site A, two in B, an arbiter in C (the field report's layout).
    TwoTwoArbiter,
    /// One unreplicated node and one router.
    Single,
}

#[derive(clap::Args)]
pub struct LocalArgs {
    /// Port of the first router (127.0.0.1); one router per site on consecutive ports.
    #[arg(long, default_value_t = 27017)]
    port: u16,
    /// Data directory; restarting on the same directory keeps all data.
    #[arg(long, default_value = "./bulwark-data")]
    dir: PathBuf,
    /// Cluster layout.
    #[arg(long, value_enum, default_value_t = Layout::ThreeSites)]
    layout: Layout,
    /// First port of the shard members' gRPC listeners (default: router port + 100).
    #[arg(long)]
    member_port: Option<u16>,
    /// Storage engine for `--layout single`: wiredtiger, or memory (nothing survives a
    /// restart). Replica-set members always use WiredTiger.
    #[arg(long, default_value = "wiredtiger")]
    engine: String,
    /// Seconds between TTL monitor passes.
    #[arg(long, default_value_t = 60)]
    ttl_interval_secs: u64,
    /// Allow test-only commands (configureFailPoint), as mongod's enableTestCommands.
    #[arg(long)]
    enable_test_commands: bool,
    #[command(flatten)]
    security: crate::local_security::SecurityArgs,
}

const SITES: [&str; 3] = ["A", "B", "C"];
const CACHE_MB: usize = 256;

pub async fn run(args: LocalArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    if args.layout == Layout::Single {
        return run_single(args, shutdown).await;
    }
    let member_port = args.member_port.unwrap_or(args.port + 100);
    // (site, arbiter) per member.
    let shape: Vec<(&str, bool)> = match args.layout {
        Layout::TwoTwoArbiter => vec![
            ("A", false),
            ("A", false),
            ("B", false),
            ("B", false),
            ("C", true),
        ],
        _ => SITES.iter().map(|s| (*s, false)).collect(),
    };
    let members: Vec<MemberConfig> = shape
        .iter()
        .enumerate()
        .map(|(i, (site, arbiter))| MemberConfig {
            id: i as u64 + 1,
            host: format!("127.0.0.1:{}", member_port + i as u16),
            site: site.to_string(),
            // The preferred primary lives in site A; an arbiter may never be primary.
            priority: match (*site, *arbiter) {
                (_, true) => 0,
                ("A", _) => 2,
                _ => 1,
            },
            votes: 1,
            arbiter: *arbiter,
            dial: None,
        })
        .collect();
    let ttl = Duration::from_secs(args.ttl_interval_secs);
    // One cluster key for this run: members check it on Raft and command calls, routers
    // present it.
    let mut router_template = router::RouterConfig {
        shard: members
            .iter()
            .map(|m| m.host.clone())
            .collect::<Vec<_>>()
            .join(","),
        enable_test_commands: args.enable_test_commands,
        ..Default::default()
    };
    let cluster_key = args.security.apply(&mut router_template);
    router_template.validate().map_err(anyhow::Error::msg)?;
    let mut running = Vec::new();
    for m in &members {
        let listener = tokio::net::TcpListener::bind(&m.host)
            .await
            .with_context(|| format!("binding shard member {} to {}", m.id, m.host))?;
        let repl = ReplConfig::new("shard0", m.id, members.clone());
        let dir = args.dir.join("shard0").join(format!("member{}", m.id));
        let member = shard::service::start_member(
            listener,
            dir.clone(),
            CACHE_MB,
            Duration::from_secs(600),
            ttl,
            repl,
            Some(cluster_key.clone()),
        )
        .await
        .with_context(|| format!("opening shard member {} in {}", m.id, dir.display()))?;
        running.push(member);
    }
    let mut routers = Vec::new();
    for (i, site) in SITES.iter().enumerate() {
        let links = running
            .iter()
            .zip(&members)
            .map(|(r, m)| router::shard_client::MemberLink::InProcess {
                address: m.host.clone(),
                service: shard::service::in_process(r.node.clone()),
            })
            .collect();
        let handle = router::shard_client::ShardHandle::replica_set(links, site)?;
        let mut config = router::RouterConfig {
            listen: format!("127.0.0.1:{}", args.port + i as u16),
            site: site.to_string(),
            ..router_template.clone()
        };
        if i > 0 {
            // One router creates the bootstrap admin; the others would race it.
            config.admin_user.clear();
            config.admin_password.clear();
        }
        let listener = router::listener::bind(&config.listen)
            .await
            .with_context(|| format!("binding the site {site} router to {}", config.listen))?;
        let sd = shutdown.clone();
        routers.push(tokio::spawn(async move {
            let r = router::serve_with(listener, config, handle, sd.clone()).await;
            sd.cancel();
            r
        }));
    }
    println!("Bulwark is running: shard replica set 'shard0' across sites A, B and C.");
    for (i, site) in SITES.iter().enumerate() {
        println!(
            "  site {site}: mongodb://127.0.0.1:{}/",
            args.port + i as u16
        );
    }
    println!(
        "Data directory: {}. Press Ctrl-C to stop.",
        args.dir.display()
    );
    shutdown.cancelled().await;
    for r in routers {
        r.await?.context("router")?;
    }
    for m in running {
        m.shutdown.cancel();
        m.task.await?.context("shard member")?;
    }
    println!("Bulwark stopped.");
    Ok(())
}

/// One unreplicated shard node and one router (the pre-replication layout).
async fn run_single(args: LocalArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let shard_config = shard::ShardConfig {
        listen: "127.0.0.1:0".into(),
        dir: args.dir.join("shard0"),
        engine: args.engine.clone(),
        ttl_interval_secs: args.ttl_interval_secs,
        ..Default::default()
    };
    shard_config.validate().map_err(anyhow::Error::msg)?;
    let kind = shard_config.engine_kind().map_err(anyhow::Error::msg)?;
    let timeout = shard_config.cursor_timeout();
    let node = tokio::task::spawn_blocking(move || shard::Node::open(&kind, timeout))
        .await?
        .with_context(|| format!("opening the shard in {}", args.dir.display()))?;
    let shard_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let shard_addr = shard_listener.local_addr()?;
    let mut router_config = router::RouterConfig {
        listen: format!("127.0.0.1:{}", args.port),
        shard: shard_addr.to_string(),
        enable_test_commands: args.enable_test_commands,
        ..Default::default()
    };
    let cluster_key = args.security.apply(&mut router_config);
    router_config.validate().map_err(anyhow::Error::msg)?;
    let router_listener = router::listener::bind(&router_config.listen)
        .await
        .with_context(|| format!("binding the router to {}", router_config.listen))?;
    // When either role stops (failure or Ctrl-C), the other stops too.
    let (sd1, sd2) = (shutdown.clone(), shutdown.clone());
    // The router calls this process's shard directly; the shard's gRPC port still
    // serves routers started elsewhere (`bulwark router --shard ADDR`).
    let shard_handle =
        router::shard_client::ShardHandle::in_process(shard::service::in_process(node.clone()));
    let ttl = Duration::from_secs(args.ttl_interval_secs);
    let shard_task = tokio::spawn(async move {
        let r =
            shard::serve_with_key(node, shard_listener, ttl, Some(cluster_key), sd1.clone()).await;
        sd1.cancel();
        r
    });
    let router_task = tokio::spawn(async move {
        let r = router::serve_with(router_listener, router_config, shard_handle, sd2.clone()).await;
        sd2.cancel();
        r
    });
    println!(
        "Bulwark is running. Connect with: mongodb://127.0.0.1:{}/",
        args.port
    );
    println!(
        "Data directory: {}. Press Ctrl-C to stop.",
        args.dir.display()
    );
    let (r, s) = tokio::join!(router_task, shard_task);
    r?.context("router")?;
    s?.context("shard")?;
    println!("Bulwark stopped.");
    Ok(())
}
