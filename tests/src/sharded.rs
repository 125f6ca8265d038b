//! `TestShardedCluster`: a config server replica set and N shard replica sets (one member
//! each, to keep tests light), with routers reaching them over real gRPC, all in this
//! process on ephemeral loopback ports. Shards are added through the router with
//! `addShard`, as an operator would.

use std::net::SocketAddr;
use std::time::Duration;

use shard::repl::{MemberConfig, ReplConfig};
use shard::service::RunningMember;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct TestShardedCluster {
    members: Vec<RunningMember>,
    /// `setName/host` of each shard, in order.
    pub shard_hosts: Vec<String>,
    pub routers: Vec<SocketAddr>,
    router_shutdown: CancellationToken,
    router_tasks: Vec<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestShardedCluster {
    /// `shards` shards and `routers` routers; the shards are added through router 0.
    pub async fn start(shards: usize, routers: usize) -> TestShardedCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut members = Vec::new();
        let mut hosts = Vec::new();
        for set in
            std::iter::once("config".to_string()).chain((0..shards).map(|k| format!("shard{k}")))
        {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let host = listener.local_addr().unwrap().to_string();
            let me = MemberConfig {
                id: 1,
                host: host.clone(),
                site: "A".into(),
                priority: 1,
                votes: 1,
                arbiter: false,
                dial: None,
            };
            let member = shard::service::start_member(
                listener,
                dir.path().join(&set),
                64,
                Duration::from_secs(600),
                Duration::from_secs(1),
                ReplConfig::new(&set, 1, vec![me]),
                None,
            )
            .await
            .expect("start member");
            members.push(member);
            hosts.push(format!("{set}/{host}"));
        }
        // Each one-member set elects itself; routers start once all have.
        let started = std::time::Instant::now();
        while !members
            .iter()
            .all(|m| m.node.replica.as_ref().is_some_and(|r| r.status().writable))
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no primary elected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let config_host = hosts.remove(0);
        let mut cluster = TestShardedCluster {
            members,
            shard_hosts: hosts,
            routers: Vec::new(),
            router_shutdown: CancellationToken::new(),
            router_tasks: Vec::new(),
            _dir: dir,
        };
        let config_servers = config_host.split_once('/').unwrap().1.to_string();
        for _ in 0..routers {
            let listener = router::listener::bind("127.0.0.1:0").await.unwrap();
            cluster.routers.push(listener.local_addr().unwrap());
            let config = router::RouterConfig {
                listen: listener.local_addr().unwrap().to_string(),
                config_servers: config_servers.clone(),
                site: "A".into(),
                ..Default::default()
            };
            let sd = cluster.router_shutdown.clone();
            cluster.router_tasks.push(tokio::spawn(async move {
                router::serve(listener, config, sd).await.expect("router");
            }));
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

    /// A driver client of router `i`.
    pub async fn client(&self, i: usize) -> mongodb::Client {
        let mut opts = mongodb::options::ClientOptions::parse(format!(
            "mongodb://{}/?retryWrites=true",
            self.routers[i]
        ))
        .await
        .unwrap();
        opts.server_selection_timeout = Some(Duration::from_secs(30));
        mongodb::Client::with_options(opts).unwrap()
    }

    pub async fn stop(mut self) {
        self.router_shutdown.cancel();
        for t in self.router_tasks.drain(..) {
            let _ = t.await;
        }
        for m in self.members.drain(..) {
            m.shutdown.cancel();
            let _ = m.task.await;
        }
    }
}
