//! Test support: `TestCluster` starts a router and a shard node in-process on ephemeral
//! loopback ports, exactly as `bulwark local` wires them, and hands out driver clients.

pub mod replica_set;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct TestCluster {
    pub router_addr: SocketAddr,
    pub dir: PathBuf,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    _tmp: Option<tempfile::TempDir>,
}

pub enum Storage {
    Memory,
    WiredTiger,
}

/// How the router reaches the shard.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// A direct call into the shard's service, as `bulwark local` wires it.
    InProcess,
    /// gRPC over loopback, as separate `bulwark router` / `bulwark shard` processes do.
    Grpc,
}

impl TestCluster {
    /// A cluster on WiredTiger in a fresh temporary directory.
    pub async fn start() -> TestCluster {
        TestCluster::start_linked(Link::InProcess).await
    }

    /// A cluster on WiredTiger in a fresh temporary directory, its router reaching the
    /// shard through `link`.
    pub async fn start_linked(link: Link) -> TestCluster {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut c = TestCluster::start_with(&dir, Storage::WiredTiger, link).await;
        c._tmp = Some(tmp);
        c
    }

    /// A cluster on the given storage in `dir` (reopening an existing directory keeps its data).
    pub async fn start_in(dir: &Path, storage: Storage) -> TestCluster {
        TestCluster::start_with(dir, storage, Link::InProcess).await
    }

    pub async fn start_with(dir: &Path, storage: Storage, link: Link) -> TestCluster {
        let kind = match storage {
            Storage::Memory => shard::EngineKind::Memory,
            Storage::WiredTiger => shard::EngineKind::WiredTiger {
                dir: dir.join("shard0"),
                cache_mb: 64,
            },
        };
        let node =
            tokio::task::spawn_blocking(move || shard::Node::open(&kind, Duration::from_secs(600)))
                .await
                .unwrap()
                .expect("open shard node");
        let shutdown = CancellationToken::new();
        let shard_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shard_addr = shard_listener.local_addr().unwrap();
        let router_listener = router::listener::bind("127.0.0.1:0").await.unwrap();
        let router_addr = router_listener.local_addr().unwrap();
        let config = router::RouterConfig {
            listen: router_addr.to_string(),
            shard: shard_addr.to_string(),
            ..Default::default()
        };
        let shard = match link {
            Link::InProcess => router::shard_client::ShardHandle::in_process(
                shard::service::in_process(node.clone()),
            ),
            Link::Grpc => {
                router::shard_client::ShardHandle::connect_lazy(&config.shard, "").unwrap()
            }
        };
        let s = shutdown.clone();
        let shard_task = tokio::spawn(async move {
            shard::serve(node, shard_listener, Duration::from_secs(1), s)
                .await
                .expect("shard serve");
        });
        let s = shutdown.clone();
        let router_task = tokio::spawn(async move {
            router::serve_with(router_listener, config, shard, s)
                .await
                .expect("router serve");
        });
        TestCluster {
            router_addr,
            dir: dir.to_path_buf(),
            shutdown,
            tasks: vec![shard_task, router_task],
            _tmp: None,
        }
    }

    pub fn uri(&self) -> String {
        format!("mongodb://{}/?directConnection=false", self.router_addr)
    }

    pub async fn client(&self) -> mongodb::Client {
        let mut opts =
            mongodb::options::ClientOptions::parse(format!("mongodb://{}/", self.router_addr))
                .await
                .unwrap();
        opts.server_selection_timeout = Some(Duration::from_secs(10));
        mongodb::Client::with_options(opts).unwrap()
    }

    /// Stops both roles and waits for them (the shard checkpoints on the way out).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
