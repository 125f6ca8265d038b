//! Test support: `TestCluster` starts a router and a shard node in-process on ephemeral
//! loopback ports, exactly as `bulwark local` wires them, and hands out driver clients.

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

impl TestCluster {
    /// A cluster on WiredTiger in a fresh temporary directory.
    pub async fn start() -> TestCluster {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut c = TestCluster::start_in(&dir, Storage::WiredTiger).await;
        c._tmp = Some(tmp);
        c
    }

    /// A cluster on the given storage in `dir` (reopening an existing directory keeps its data).
    pub async fn start_in(dir: &Path, storage: Storage) -> TestCluster {
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
        let s = shutdown.clone();
        let shard_task = tokio::spawn(async move {
            shard::serve(node, shard_listener, Duration::from_secs(1), s)
                .await
                .expect("shard serve");
        });
        let s = shutdown.clone();
        let router_task = tokio::spawn(async move {
            router::serve(router_listener, config, s)
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
