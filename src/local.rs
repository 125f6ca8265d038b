//! `bulwark local`: a whole cluster in one process, for development.
//!
//! The default layout is three sites (A, B, C) on loopback: two shards (`--shards N`) and
//! the config servers, each a replica set with one member per site replicating over real
//! gRPC, and one router per site on ports P, P+1, P+2, each preferring its own site's
//! members for reads that allow it.
//! `--layout two-two-arbiter` puts two data members in A, two in B and an arbiter in C;
//! `--layout single` runs one unreplicated node behind one router.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::ValueEnum;
use router::shard_client::{MemberLink, ShardHandle};
use shard::repl::{MemberConfig, ReplConfig};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// One member per site, one router per site.
    ThreeSites,
    /// Two data members in site A, two in B, an arbiter in C: a site that holds no data
    /// still gives the set a majority when either data site fails.
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
    /// Shard k's members use the ports from member_port + 10k; the config servers'
    /// member_port + 90 and up.
    #[arg(long)]
    member_port: Option<u16>,
    /// Number of shards, each a replica set of the layout's shape.
    #[arg(long, default_value_t = 2)]
    shards: u16,
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
/// Shards `bulwark local` starts at most (their ports must stay below the config
/// servers').
const MAX_SHARDS: u16 = 8;
const CACHE_MB: usize = 256;

pub async fn run(args: LocalArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    if args.layout == Layout::Single {
        return run_single(args, shutdown).await;
    }
    if !(1..=MAX_SHARDS).contains(&args.shards) {
        anyhow::bail!("--shards must be between 1 and {MAX_SHARDS}");
    }
    let sets = member_sets(&args);
    let mut router_template = router::RouterConfig {
        config_servers: hosts(&sets[0].1),
        enable_test_commands: args.enable_test_commands,
        ..Default::default()
    };
    // One cluster key for this run: members check it on Raft and command calls, routers
    // present it.
    let cluster_key = args.security.apply(&mut router_template);
    router_template.validate().map_err(anyhow::Error::msg)?;
    let (running, services) = start_members(&args, &sets, &cluster_key).await?;
    // Routers call this process's members directly; their gRPC ports still serve
    // routers started elsewhere.
    let links: router::sharding::LinkFactory =
        Arc::new(move |addr: &str| match services.get(addr) {
            Some(service) => MemberLink::InProcess {
                address: addr.to_string(),
                service: service.clone(),
            },
            None => MemberLink::Grpc(addr.to_string(), None),
        });
    let config_handle = |site: &str| {
        let members = sets[0].1.iter().map(|m| links(&m.host)).collect();
        ShardHandle::replica_set(members, site)?
            .with_cluster_key(Some(cluster_key.clone()))
            .map_err(anyhow::Error::msg)
    };
    register_shards(&config_handle("A")?, &sets[1..], &shutdown).await?;
    // Each config server member runs the coordinator while it is primary.
    let settings = configsvr::term::Settings::new(Duration::from_millis(
        shard::config::DEFAULT_BALANCER_INTERVAL_MS,
    ));
    let mut coordinators = Vec::new();
    for member in running.iter().take(sets[0].1.len()) {
        let cluster = router::sharding::Cluster::new(
            config_handle("A")?,
            links.clone(),
            "A",
            Some(cluster_key.clone()),
            shutdown.clone(),
        );
        coordinators.push(tokio::spawn(configsvr::coordinator::run(
            member.node.clone(),
            Arc::new(cluster),
            settings.clone(),
            shutdown.clone(),
        )));
    }
    let mut routers = Vec::new();
    for (i, site) in SITES.iter().enumerate() {
        let handle = config_handle(site)?;
        routers.push(
            start_router(&args, &router_template, i, handle, links.clone(), &shutdown).await?,
        );
    }
    print_cluster(&args);
    shutdown.cancelled().await;
    for r in routers {
        r.await?.context("router")?;
    }
    for c in coordinators {
        c.await?;
    }
    // The links hold every member's node: a member's storage closes only once they are
    // gone. Members then stop side by side, each with its final checkpoint.
    drop(links);
    stop_members(running).await?;
    println!("Bulwark stopped.");
    Ok(())
}

/// The config server replica set, then one per shard: each member's site, host and role.
fn member_sets(args: &LocalArgs) -> Vec<(String, Vec<MemberConfig>)> {
    let base = args.member_port.unwrap_or(args.port + 100);
    // (site, arbiter) per member of each shard.
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
    let config_shape: Vec<(&str, bool)> = SITES.iter().map(|s| (*s, false)).collect();
    // Shard k's members listen on base + 10k + i; the config servers on base + 90 + i.
    // Shard k prefers a primary in site k mod 3 (and is in that site's zone), so each
    // site can own data written there; the config servers prefer site A.
    let mut sets = vec![(
        "config".to_string(),
        replica_set(&config_shape, base + 90, "A"),
    )];
    for k in 0..args.shards {
        let site = SITES[k as usize % SITES.len()];
        sets.push((
            format!("shard{k}"),
            replica_set(&shape, base + 10 * k, site),
        ));
    }
    sets
}

/// Every member of every set, in this process; with the service each one answers
/// commands through.
async fn start_members(
    args: &LocalArgs,
    sets: &[(String, Vec<MemberConfig>)],
    cluster_key: &str,
) -> anyhow::Result<(
    Vec<shard::service::RunningMember>,
    HashMap<String, Arc<dyn proto::shard::shard_server::Shard>>,
)> {
    let ttl = Duration::from_secs(args.ttl_interval_secs);
    let mut running = Vec::new();
    let mut services: HashMap<String, Arc<dyn proto::shard::shard_server::Shard>> = HashMap::new();
    for (set, members) in sets {
        for m in members {
            let listener = tokio::net::TcpListener::bind(&m.host)
                .await
                .with_context(|| format!("binding {set} member {} to {}", m.id, m.host))?;
            let repl = ReplConfig::new(set, m.id, members.clone());
            let dir = args.dir.join(set).join(format!("member{}", m.id));
            let member = shard::service::start_member(
                listener,
                dir.clone(),
                CACHE_MB,
                Duration::from_secs(600),
                ttl,
                repl,
                proto::cluster_auth::ClusterAuth::key(Some(cluster_key.to_string())),
            )
            .await
            .with_context(|| format!("opening {set} member {} in {}", m.id, dir.display()))?;
            services.insert(
                m.host.clone(),
                shard::service::in_process(member.node.clone()),
            );
            running.push(member);
        }
    }
    Ok((running, services))
}

/// The router of site `i`, listening on `--port` + i.
async fn start_router(
    args: &LocalArgs,
    template: &router::RouterConfig,
    i: usize,
    config_handle: ShardHandle,
    links: router::sharding::LinkFactory,
    shutdown: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), router::error::RouterError>>> {
    let site = SITES[i];
    let mut config = router::RouterConfig {
        listen: format!("127.0.0.1:{}", args.port + i as u16),
        site: site.to_string(),
        ..template.clone()
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
    Ok(tokio::spawn(async move {
        let r = router::serve_cluster(listener, config, config_handle, links, sd.clone()).await;
        sd.cancel();
        r
    }))
}

fn print_cluster(args: &LocalArgs) {
    println!(
        "Bulwark is running: {} shard(s) and the config servers, each a replica set across sites A, B and C.",
        args.shards
    );
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
}

/// Stops every member at once and waits until each one's storage has closed.
async fn stop_members(running: Vec<shard::service::RunningMember>) -> anyhow::Result<()> {
    let stops: Vec<_> = running
        .into_iter()
        .map(|m| (m.id, tokio::spawn(m.stop())))
        .collect();
    for (id, stop) in stops {
        stop.await?
            .with_context(|| format!("stopping shard member {id}"))?;
    }
    Ok(())
}

/// The members of one replica set of `shape`, listening from `first_port` on, preferring
/// a primary in site `preferred`.
fn replica_set(shape: &[(&str, bool)], first_port: u16, preferred: &str) -> Vec<MemberConfig> {
    shape
        .iter()
        .enumerate()
        .map(|(i, (site, arbiter))| MemberConfig {
            id: i as u64 + 1,
            host: format!("127.0.0.1:{}", first_port + i as u16),
            site: site.to_string(),
            // An arbiter may never be primary.
            priority: match (*arbiter, *site == preferred) {
                (true, _) => 0,
                (false, true) => 2,
                (false, false) => 1,
            },
            votes: 1,
            arbiter: *arbiter,
            dial: None,
        })
        .collect()
}

/// The site of a set's highest-priority member.
fn preferred_site(members: &[MemberConfig]) -> &str {
    members
        .iter()
        .max_by_key(|m| m.priority)
        .map_or("A", |m| m.site.as_str())
}

fn hosts(members: &[MemberConfig]) -> String {
    members
        .iter()
        .map(|m| m.host.clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// Records each shard in the catalog (as `addShard` would), in the zone named after the
/// site of its preferred primary, once the config servers have elected a primary.
async fn register_shards(
    config: &ShardHandle,
    shards: &[(String, Vec<MemberConfig>)],
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let monitor = tokio::spawn(config.clone().monitor(shutdown.child_token()));
    let started = std::time::Instant::now();
    for (name, members) in shards {
        let host = format!("{name}/{}", hosts(members));
        loop {
            let registered = async {
                router::sharding::catalog::add_shard(config, name, &host).await?;
                let site = preferred_site(members);
                router::sharding::catalog::set_shard_zone(config, name, site, true).await
            };
            match registered.await {
                Ok(()) => break,
                Err(e) if started.elapsed() < Duration::from_secs(60) => {
                    tracing::debug!(error = %e, "waiting for the config servers");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(anyhow::anyhow!("registering {name}: {e}")),
            }
        }
    }
    monitor.abort();
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
        let auth = proto::cluster_auth::ClusterAuth::key(Some(cluster_key));
        let r = shard::serve_with_auth(node, shard_listener, ttl, auth, sd1.clone()).await;
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
