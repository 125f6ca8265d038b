//! Test support: `TestCluster` starts a router and a shard node in-process on ephemeral
//! loopback ports, exactly as `bulwark local` wires them, and hands out driver clients.

pub mod cpu;
pub mod disk_writes;
pub mod list_append;
pub mod replica_set;
pub mod sharded;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct TestCluster {
    pub router_addr: SocketAddr,
    /// The shard node (benchmarks adjust its admission pools).
    pub node: std::sync::Arc<shard::Node>,
    /// TLS settings `options()` gives clients (set by `ClusterBuilder::tls`).
    pub client_tls: Option<mongodb::options::TlsOptions>,
    pub dir: PathBuf,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// What another router on the same shard is started with (`add_router`).
    router_config: router::RouterConfig,
    shard: router::shard_client::ShardHandle,
    _tmp: Option<tempfile::TempDir>,
}

pub enum Storage {
    Memory,
    /// WiredTiger with a small cache (64 MB): tests start many nodes.
    WiredTiger,
    /// WiredTiger with this cache in MB (benchmarks use the shard's default).
    WiredTigerCache(usize),
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

    /// A cluster whose router reaches the shard through `link`.
    pub async fn start_with(dir: &Path, storage: Storage, link: Link) -> TestCluster {
        Self::launch(dir, storage, router::RouterConfig::default(), None, link).await
    }

    /// Options beyond the defaults (auth, TLS, cluster key): see [`ClusterBuilder`].
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    async fn launch(
        dir: &Path,
        storage: Storage,
        base: router::RouterConfig,
        shard_key: Option<String>,
        link: Link,
    ) -> TestCluster {
        let kind = match storage {
            Storage::Memory => shard::EngineKind::Memory,
            Storage::WiredTiger => shard::EngineKind::WiredTiger {
                dir: dir.join("shard0"),
                cache_mb: 64,
            },
            Storage::WiredTigerCache(cache_mb) => shard::EngineKind::WiredTiger {
                dir: dir.join("shard0"),
                cache_mb,
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
            ..base
        };
        let node_handle = node.clone();
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
            // Several keys separated by spaces, as in a key file during a rotation.
            let key = shard_key.map(|k| proto::cluster_key::ClusterKey::parse(&k).unwrap());
            let auth = proto::cluster_auth::ClusterAuth { key, tls: None };
            shard::serve_with_auth(node, shard_listener, Duration::from_secs(1), auth, s)
                .await
                .expect("shard serve");
        });
        let router_task = spawn_router(router_listener, config.clone(), shard.clone(), &shutdown);
        TestCluster {
            router_addr,
            node: node_handle,
            client_tls: None,
            dir: dir.to_path_buf(),
            shutdown,
            tasks: vec![shard_task, router_task],
            router_config: config,
            shard,
            _tmp: None,
        }
    }

    /// Starts another router on the same shard, as a second site's router would be, and
    /// returns its address.
    pub async fn add_router(&mut self) -> SocketAddr {
        let listener = router::listener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = router::RouterConfig {
            listen: addr.to_string(),
            // The bootstrap admin exists already: only the first router creates it.
            admin_user: String::new(),
            admin_password: String::new(),
            ..self.router_config.clone()
        };
        let task = spawn_router(listener, config, self.shard.clone(), &self.shutdown);
        self.tasks.push(task);
        addr
    }

    pub fn uri(&self) -> String {
        format!("mongodb://{}/?directConnection=false", self.router_addr)
    }

    pub async fn client(&self) -> mongodb::Client {
        driver_client(&self.router_addr.to_string(), "", 10).await
    }

    /// Stops both roles and waits for them (the shard checkpoints on the way out).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

fn spawn_router(
    listener: tokio::net::TcpListener,
    config: router::RouterConfig,
    shard: router::shard_client::ShardHandle,
    shutdown: &CancellationToken,
) -> JoinHandle<()> {
    let s = shutdown.clone();
    tokio::spawn(async move {
        router::serve_with(listener, config, shard, s)
            .await
            .expect("router serve");
    })
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts a [`TestCluster`] with options; `TestCluster::builder().auth().admin("u", "p")`.
#[derive(Default)]
pub struct ClusterBuilder {
    config: router::RouterConfig,
    shard_key: Option<String>,
    memory: bool,
    client_tls: Option<mongodb::options::TlsOptions>,
}

impl ClusterBuilder {
    /// Authentication and authorization on.
    pub fn auth(mut self) -> Self {
        self.config.auth = true;
        self
    }

    /// A root user created at start; `start()` waits until it can log in.
    pub fn admin(mut self, user: &str, password: &str) -> Self {
        self.config.admin_user = user.into();
        self.config.admin_password = password.into();
        self
    }

    /// Any other router setting (TLS files, nonce source...).
    pub fn router(mut self, f: impl FnOnce(&mut router::RouterConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// Cluster keys: what the router sends and what the shard requires.
    pub fn cluster_keys(mut self, router: Option<&str>, shard: Option<&str>) -> Self {
        self.config.cluster_key = router.unwrap_or_default().into();
        self.shard_key = shard.map(Into::into);
        self
    }

    /// TLS on the router (`mode` = allowTLS/preferTLS/requireTLS) with this certificate
    /// and key; the cluster's clients trust `ca`.
    pub fn tls(mut self, mode: &str, cert: &Path, key: &Path, ca: &Path) -> Self {
        self.config.tls_mode = mode.into();
        self.config.tls_cert = cert.display().to_string();
        self.config.tls_key = key.display().to_string();
        self.client_tls = Some(
            mongodb::options::TlsOptions::builder()
                .ca_file_path(ca.to_path_buf())
                .build(),
        );
        self
    }

    /// The router requires client certificates signed by `ca`; the cluster's clients
    /// present `client_pem` (certificate and key in one file).
    pub fn verify_clients(mut self, ca: &Path, client_pem: &Path) -> Self {
        self.config.tls_ca = ca.display().to_string();
        self.config.tls_require_client_cert = true;
        if let Some(t) = self.client_tls.as_mut() {
            t.cert_key_file_path = Some(client_pem.to_path_buf());
        }
        self
    }

    /// The in-memory engine instead of WiredTiger.
    pub fn memory(mut self) -> Self {
        self.memory = true;
        self
    }

    pub async fn start(self) -> TestCluster {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = if self.memory {
            Storage::Memory
        } else {
            Storage::WiredTiger
        };
        let admin = (
            self.config.admin_user.clone(),
            self.config.admin_password.clone(),
        );
        // A cluster key only means something on the wire: use gRPC when one is set.
        let link = if self.shard_key.is_some() {
            Link::Grpc
        } else {
            Link::InProcess
        };
        let mut c =
            TestCluster::launch(tmp.path(), storage, self.config, self.shard_key, link).await;
        c._tmp = Some(tmp);
        c.client_tls = self.client_tls;
        if !admin.0.is_empty() {
            c.first_login(&admin.0, &admin.1).await;
        }
        c
    }
}

impl TestCluster {
    /// Client options for this cluster (add credentials or TLS to them).
    pub async fn options(&self) -> mongodb::options::ClientOptions {
        self.options_at(self.router_addr).await
    }

    /// Client options for one router of this cluster (see `add_router`).
    pub async fn options_at(&self, router: SocketAddr) -> mongodb::options::ClientOptions {
        let mut opts = mongodb::options::ClientOptions::parse(format!("mongodb://{router}/"))
            .await
            .unwrap();
        opts.server_selection_timeout = Some(Duration::from_secs(10));
        opts.tls = self.client_tls.clone().map(mongodb::options::Tls::Enabled);
        opts
    }

    /// A client that authenticates as `user` (in `source`) with `mechanism`.
    pub async fn client_as(
        &self,
        user: &str,
        password: &str,
        source: &str,
        mechanism: mongodb::options::AuthMechanism,
    ) -> mongodb::Client {
        self.client_as_at(self.router_addr, user, password, source, mechanism)
            .await
    }

    /// [`TestCluster::client_as`] through one router of this cluster.
    pub async fn client_as_at(
        &self,
        router: SocketAddr,
        user: &str,
        password: &str,
        source: &str,
        mechanism: mongodb::options::AuthMechanism,
    ) -> mongodb::Client {
        let mut opts = self.options_at(router).await;
        opts.credential = Some(
            mongodb::options::Credential::builder()
                .username(user.to_string())
                .password(password.to_string())
                .source(source.to_string())
                .mechanism(mechanism)
                .build(),
        );
        mongodb::Client::with_options(opts).unwrap()
    }

    /// The very first login as the bootstrap admin succeeds: the router makes it wait
    /// until the user exists rather than failing while the shard elects a primary.
    async fn first_login(&self, user: &str, password: &str) {
        let client = self
            .client_as(
                user,
                password,
                "admin",
                mongodb::options::AuthMechanism::ScramSha256,
            )
            .await;
        if let Err(e) = client
            .database("admin")
            .run_command(bson::doc! {"ping": 1})
            .await
        {
            panic!("the first login as bootstrap user {user} failed: {e}");
        }
    }
}

/// Sends `cmd` as an OP_MSG on a raw connection and reads its reply (tests that need
/// one connection they control, which a driver's pool would hide).
pub async fn raw_command(
    s: &mut tokio::net::TcpStream,
    request_id: i32,
    cmd: bson::Document,
) -> bson::Document {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let msg = wire::encode_op_msg_request(request_id, &wire::OpMsg::new(cmd), None).unwrap();
    s.write_all(&msg).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut frame = len.to_vec();
    frame.resize(i32::from_le_bytes(len) as usize, 0);
    s.read_exact(&mut frame[4..]).await.unwrap();
    let (header, doc) = wire::decode_reply(&frame).unwrap();
    assert_eq!(header.response_to, request_id);
    doc
}

/// How many documents a `find`/`aggregate`/`getMore` reply carries in its batch.
pub fn batch_len(reply: &bson::Document) -> usize {
    let cursor = reply.get_document("cursor").expect("reply has a cursor");
    cursor
        .get_array("firstBatch")
        .or_else(|_| cursor.get_array("nextBatch"))
        .map(Vec::len)
        .expect("cursor has a batch")
}

/// A benchmark's `--name value` flags, every value a number, in order.
pub fn numeric_flags() -> Vec<(String, u64)> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    argv.chunks(2)
        .map(|pair| {
            let v = pair
                .get(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("flag {} needs a numeric value", pair[0]));
            (pair[0].clone(), v)
        })
        .collect()
}

/// The value of a benchmark's flag `--name`, or `default` when it is not given.
pub fn flag(name: &str, default: usize) -> usize {
    numeric_flags()
        .into_iter()
        .find(|(f, _)| f == name)
        .map_or(default, |(_, v)| v as usize)
}

/// The seed of a randomized workload: `TXN_SEED`, or a new one, printed either way.
pub fn seed(workload: &str) -> u64 {
    let seed = std::env::var("TXN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u32>() as u64);
    println!("{workload} seed {seed} (TXN_SEED={seed} repeats it)");
    seed
}

/// A duration as the benchmark tables print it.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The cluster benchmarks' `--ops` (2000), `--clients` (8) and `--runs` (3).
pub fn bench_flags() -> (usize, usize, usize) {
    let ops = flag("--ops", 2000);
    let clients = flag("--clients", 8).max(1);
    let runs = flag("--runs", 3).max(1);
    (ops, clients, runs)
}

/// The `p` quantile (0 to 1) of latencies sorted ascending; they must not be empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A driver client of the router at `addr`, with `options` (URI query string) and a
/// server-selection timeout long enough for a failover in a test.
pub async fn driver_client(addr: &str, options: &str, selection_secs: u64) -> mongodb::Client {
    let mut opts = mongodb::options::ClientOptions::parse(format!("mongodb://{addr}/?{options}"))
        .await
        .unwrap();
    opts.server_selection_timeout = Some(Duration::from_secs(selection_secs));
    mongodb::Client::with_options(opts).unwrap()
}

/// A unique index on `keys`.
pub fn unique_index(keys: bson::Document) -> mongodb::IndexModel {
    mongodb::IndexModel::builder()
        .keys(keys)
        .options(
            mongodb::options::IndexOptions::builder()
                .unique(true)
                .build(),
        )
        .build()
}

/// The integer `_id`s of the documents of `c` matching `filter`, in the order found.
pub async fn ids_of(c: &mongodb::Collection<bson::Document>, filter: bson::Document) -> Vec<i32> {
    use futures::TryStreamExt;
    c.find(filter)
        .await
        .unwrap()
        .try_collect::<Vec<bson::Document>>()
        .await
        .unwrap()
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect()
}
