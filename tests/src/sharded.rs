//! `TestShardedCluster`: a config server replica set (with its coordinator) and N shard
//! replica sets (one member each, to keep tests light), with routers reaching them over
//! real gRPC, all in this process on ephemeral loopback ports. Each router runs on a
//! runtime of its own, so a test can kill one outright. Shards are added through the
//! router with `addShard`, as an operator would.

use std::net::SocketAddr;
use std::time::Duration;

use configsvr::term::Settings;
use shard::repl::{MemberConfig, ReplConfig};
use shard::service::RunningMember;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A router running on its own runtime, which stops with it.
struct RunningRouter {
    runtime: Option<tokio::runtime::Runtime>,
    task: JoinHandle<()>,
}

impl Drop for RunningRouter {
    fn drop(&mut self) {
        // A runtime cannot be dropped from inside another; this one is not waited for.
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

pub struct TestShardedCluster {
    /// The config servers' members, then each shard's.
    sets: Vec<Vec<Option<RunningMember>>>,
    /// `setName/host` of each shard, in order.
    pub shard_hosts: Vec<String>,
    pub routers: Vec<SocketAddr>,
    router_shutdown: CancellationToken,
    router_tasks: Vec<Option<RunningRouter>>,
    /// The config servers' coordinator: its balancer's pace, holding requests.
    pub coordinator: std::sync::Arc<Settings>,
    coordinator_tasks: Vec<JoinHandle<()>>,
    /// The config server members' addresses, as routers are given them.
    config_servers: String,
    _dir: tempfile::TempDir,
}

/// The members' `txn_entry_kb`: every write of a transaction in an entry of its own, so
/// that the transactions of sharded tests take the path of those split over several log
/// entries (`shard::repl::txn_parts`) through the tests' failovers and restarts.
pub const TXN_ENTRY_KB: u64 = 0;

impl TestShardedCluster {
    /// `shards` one-member shards and `routers` routers; the shards are added through
    /// router 0.
    pub async fn start(shards: usize, routers: usize) -> TestShardedCluster {
        Self::start_with(shards, routers, 1).await
    }

    /// Like [`TestShardedCluster::start`], each shard a replica set of `per_shard`
    /// members in sites A, B, C, ... (A's preferred as primary).
    pub async fn start_with(shards: usize, routers: usize, per_shard: usize) -> TestShardedCluster {
        // `BULWARK_TEST_LOG=info` (an env-filter) shows the nodes' logs.
        if let Ok(filter) = std::env::var("BULWARK_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sets = Vec::new();
        let mut hosts = Vec::new();
        let names =
            std::iter::once("config".to_string()).chain((0..shards).map(|k| format!("shard{k}")));
        for (k, set) in names.enumerate() {
            let size = if k == 0 { 1 } else { per_shard };
            let mut listeners = Vec::new();
            for _ in 0..size {
                listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
            }
            let configs: Vec<MemberConfig> = listeners
                .iter()
                .enumerate()
                .map(|(i, l)| MemberConfig {
                    id: i as u64 + 1,
                    host: l.local_addr().unwrap().to_string(),
                    site: crate::replica_set::SITES[i % 3].into(),
                    priority: if i == 0 { 2 } else { 1 },
                    votes: 1,
                    arbiter: false,
                    dial: None,
                })
                .collect();
            let mut members = Vec::new();
            for (l, c) in listeners.into_iter().zip(&configs) {
                let member = shard::service::start_member(
                    l,
                    dir.path().join(&set).join(format!("member{}", c.id)),
                    64,
                    Duration::from_secs(600),
                    Duration::from_secs(1),
                    ReplConfig {
                        txn_entry_kb: TXN_ENTRY_KB,
                        ..ReplConfig::new(&set, c.id, configs.clone())
                    },
                    Default::default(),
                )
                .await
                .expect("start member");
                members.push(Some(member));
            }
            let list: Vec<String> = configs.iter().map(|c| c.host.clone()).collect();
            hosts.push(format!("{set}/{}", list.join(",")));
            sets.push(members);
        }
        // Routers start once every set has elected a primary.
        let started = std::time::Instant::now();
        while !(0..sets.len()).all(|k| primary_of(&sets[k]).is_some()) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no primary elected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let config_host = hosts.remove(0);
        let config_servers = config_host.split_once('/').unwrap().1.to_string();
        // The balancer stays idle: tests move chunks themselves, or set its pace.
        let coordinator = Settings::new(Duration::from_secs(3600));
        let router_shutdown = CancellationToken::new();
        let coordinator_tasks = sets[0]
            .iter()
            .flatten()
            .map(|m| {
                let catalog = router::shard_client::ShardHandle::connect_lazy(&config_servers, "A")
                    .expect("config server handle");
                let links: router::sharding::LinkFactory = std::sync::Arc::new(|a: &str| {
                    router::shard_client::MemberLink::Grpc(a.to_string(), None)
                });
                let cluster = router::sharding::Cluster::new(
                    catalog,
                    links,
                    "A",
                    None,
                    router_shutdown.clone(),
                );
                tokio::spawn(configsvr::coordinator::run(
                    m.node.clone(),
                    std::sync::Arc::new(cluster),
                    coordinator.clone(),
                    router_shutdown.clone(),
                ))
            })
            .collect();
        let mut cluster = TestShardedCluster {
            sets,
            shard_hosts: hosts,
            routers: Vec::new(),
            router_shutdown,
            router_tasks: Vec::new(),
            coordinator,
            coordinator_tasks,
            config_servers,
            _dir: dir,
        };
        for _ in 0..routers {
            cluster.add_router(1000).await;
        }
        let admin = cluster.client(0).await.database("admin");
        for host in cluster.shard_hosts.clone() {
            admin
                .run_command(bson::doc! {"addShard": host})
                .await
                .expect("addShard");
        }
        cluster
    }

    /// Starts another router, which keeps a collection's routing for `catalog_cache_ms`
    /// before reading it again; returns its index.
    pub async fn add_router(&mut self, catalog_cache_ms: u64) -> usize {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        self.routers.push(listener.local_addr().unwrap());
        let config = router::RouterConfig {
            listen: listener.local_addr().unwrap().to_string(),
            config_servers: self.config_servers.clone(),
            site: "A".into(),
            catalog_cache_ms,
            ..Default::default()
        };
        let sd = self.router_shutdown.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let task = runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            router::serve(listener, config, sd).await.expect("router");
        });
        self.router_tasks.push(Some(RunningRouter {
            runtime: Some(runtime),
            task,
        }));
        self.routers.len() - 1
    }

    /// Kills router `i` as `kill -9` would: every task of it stops where it is, its
    /// connections drop, and it says nothing to anyone.
    pub fn kill_router(&mut self, i: usize) {
        self.router_tasks[i] = None;
    }

    /// A driver client of router `i`.
    /// A handle straight to shard `name`'s members (`shard0`, `shard1`, ...), past every
    /// router: what a coordinator sends, for tests that leave its work half done.
    pub fn direct(&self, name: &str) -> router::shard_client::ShardHandle {
        let k = name.trim_start_matches("shard").parse::<usize>().unwrap();
        let members = self.shard_hosts[k].split_once('/').unwrap().1;
        router::shard_client::ShardHandle::connect_lazy(members, "A").unwrap()
    }

    pub async fn client(&self, i: usize) -> mongodb::Client {
        crate::driver_client(&self.routers[i].to_string(), "retryWrites=true", 30).await
    }

    /// Stops the primary of shard `k` (its port closes, its storage closes); returns its
    /// index in the set.
    pub async fn kill_shard_primary(&mut self, k: usize) -> usize {
        let set = &mut self.sets[k + 1];
        let i = primary_of(set).expect("shard has a primary");
        let m = set[i].take().expect("running");
        m.stop().await.expect("the shard primary stops");
        i
    }

    /// Waits (bounded by `limit`) for shard `k` to have a writable primary again.
    pub async fn wait_for_shard_primary(&self, k: usize, limit: Duration) -> Option<usize> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Some(p) = primary_of(&self.sets[k + 1]) {
                return Some(p);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    pub async fn stop(mut self) {
        self.router_shutdown.cancel();
        for mut r in self.router_tasks.drain(..).flatten() {
            let _ = (&mut r.task).await;
        }
        for t in self.coordinator_tasks.drain(..) {
            let _ = t.await;
        }
        for m in self.sets.drain(..).flatten().flatten() {
            let _ = m.stop().await;
        }
    }
}

/// The running member of `set` that is a writable primary now.
fn primary_of(set: &[Option<RunningMember>]) -> Option<usize> {
    set.iter().position(|m| {
        m.as_ref()
            .and_then(|m| m.node.replica.as_ref())
            .is_some_and(|r| r.status().writable)
    })
}

/// The code of a driver error from a command or a write (the first write error).
pub fn error_code(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => {
            Some(w.code)
        }
        mongodb::error::ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .and_then(|w| w.first())
            .map(|w| w.code),
        _ => None,
    }
}

/// The per-shard document counts `collStats` reports.
pub async fn per_shard_counts(db: &mongodb::Database, coll: &str) -> Vec<i64> {
    let stats = db
        .run_command(bson::doc! {"collStats": coll})
        .await
        .unwrap();
    assert_eq!(stats.get_bool("sharded"), Ok(true), "{stats}");
    stats
        .get_document("shards")
        .unwrap()
        .values()
        .map(|s| {
            let s = s.as_document().unwrap();
            s.get_i32("count")
                .map(i64::from)
                .or_else(|_| s.get_i64("count"))
                .unwrap()
        })
        .collect()
}

/// In a two-shard cluster, the shard that is not `shard`.
pub fn other_shard(shard: &str) -> &'static str {
    if shard == "shard0" {
        "shard1"
    } else {
        "shard0"
    }
}

/// The primary shard of database `db`, from `config.databases`.
pub async fn database_primary(client: &mongodb::Client, db: &str) -> String {
    client
        .database("config")
        .collection::<bson::Document>("databases")
        .find_one(bson::doc! {"_id": db})
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("database {db} has no primary"))
        .get_str("primary")
        .unwrap()
        .to_string()
}

/// Calls `removeShard` until the shard is drained and removed (bounded by `limit`).
pub async fn drain(admin: &mongodb::Database, shard: &str, limit: Duration) {
    let started = std::time::Instant::now();
    loop {
        let r = admin
            .run_command(bson::doc! {"removeShard": shard})
            .await
            .unwrap();
        if r.get_str("state") == Ok("completed") {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "draining {shard} did not finish: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Shards collection `coll` (holding documents already) by the ranged key `{k: 1}`,
/// creating the key's index first, through `client`'s router.
pub async fn shard_by_k(client: &mongodb::Client, c: &mongodb::Collection<bson::Document>) {
    c.create_index(
        mongodb::IndexModel::builder()
            .keys(bson::doc! {"k": 1})
            .build(),
    )
    .await
    .unwrap();
    let ns = format!("{}.{}", c.namespace().db, c.name());
    client
        .database("admin")
        .run_command(bson::doc! {"shardCollection": ns, "key": {"k": 1}})
        .await
        .unwrap();
}

/// Runs `cmd` on `db` every 200 ms until it succeeds or `within` has passed; the last
/// outcome. For work that waits on a background pass (a recovery, a range deletion).
pub async fn until_accepted(
    db: &mongodb::Database,
    cmd: bson::Document,
    within: Duration,
) -> mongodb::error::Result<bson::Document> {
    let until = std::time::Instant::now() + within;
    loop {
        let outcome = db.run_command(cmd.clone()).await;
        if outcome.is_ok() || std::time::Instant::now() >= until {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
