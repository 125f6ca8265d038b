//! `TestReplicaSet`: a shard replica set with one member per site (A, B, C) and one
//! router per site, all in this process on ephemeral loopback ports. Members talk Raft
//! over real gRPC and routers reach members over gRPC, so killing a member really takes
//! its port away. Members can be killed, restarted on the same data, and cut off.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use shard::repl::{MemberConfig, ReplConfig};
use shard::service::RunningMember;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SITES: [&str; 3] = ["A", "B", "C"];
/// One data member per site; site A's is the preferred primary.
pub const THREE_SITES: [(&str, i64, bool); 3] = [("A", 2, false), ("B", 1, false), ("C", 1, false)];

/// How a test set's members differ from the defaults.
#[derive(Clone, Copy)]
pub struct Tuning {
    /// (log_retain_mb, compact_interval_secs) instead of the defaults.
    pub compaction: Option<(u64, u64)>,
    /// Each member's WiredTiger cache: small for tests (many sets run at once), the
    /// shard's default for benchmarks.
    pub cache_mb: usize,
    /// `txn_entry_kb` instead of the default (small: transactions split over entries).
    pub txn_entry_kb: Option<u64>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            compaction: None,
            cache_mb: 64,
            txn_entry_kb: None,
        }
    }
}

/// The PEM files of a cluster that runs mutual TLS between its nodes.
#[derive(Clone)]
pub struct ClusterTlsFiles {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

pub struct TestReplicaSet {
    pub configs: Vec<MemberConfig>,
    tuning: Tuning,
    cluster_tls: Option<ClusterTlsFiles>,
    members: Vec<Option<RunningMember>>,
    pub routers: Vec<SocketAddr>,
    router_shutdown: CancellationToken,
    router_tasks: Vec<JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl TestReplicaSet {
    /// One data member per site; site A's is the preferred primary.
    pub async fn start() -> TestReplicaSet {
        Self::start_layout(&THREE_SITES).await
    }

    /// Members given as (site, priority, arbiter); a router per site A, B and C.
    pub async fn start_layout(layout: &[(&str, i64, bool)]) -> TestReplicaSet {
        Self::start_tuned(layout, Tuning::default()).await
    }

    /// Three sites, compacting the log every `every_secs` and keeping `retain_mb` of it.
    pub async fn start_compacting(retain_mb: u64, every_secs: u64) -> TestReplicaSet {
        let tuning = Tuning {
            compaction: Some((retain_mb, every_secs)),
            ..Tuning::default()
        };
        Self::start_tuned(&THREE_SITES, tuning).await
    }

    /// Members given as (site, priority, arbiter), tuned.
    pub async fn start_tuned(layout: &[(&str, i64, bool)], tuning: Tuning) -> TestReplicaSet {
        Self::launch(layout, tuning, None).await
    }

    /// Three sites whose members and routers talk mutual TLS with these files.
    pub async fn start_with_cluster_tls(files: ClusterTlsFiles) -> TestReplicaSet {
        Self::launch(&THREE_SITES, Tuning::default(), Some(files)).await
    }

    async fn launch(
        layout: &[(&str, i64, bool)],
        tuning: Tuning,
        cluster_tls: Option<ClusterTlsFiles>,
    ) -> TestReplicaSet {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut listeners = Vec::new();
        for _ in layout {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let configs: Vec<MemberConfig> = listeners
            .iter()
            .zip(layout)
            .enumerate()
            .map(|(i, (l, (site, priority, arbiter)))| MemberConfig {
                id: i as u64 + 1,
                host: l.local_addr().unwrap().to_string(),
                site: site.to_string(),
                priority: *priority,
                votes: 1,
                arbiter: *arbiter,
                dial: None,
            })
            .collect();
        let mut set = TestReplicaSet {
            configs,
            tuning,
            cluster_tls,
            members: Vec::new(),
            routers: Vec::new(),
            router_shutdown: CancellationToken::new(),
            router_tasks: Vec::new(),
            dir,
        };
        for (i, l) in listeners.into_iter().enumerate() {
            let m = set.open(i, l).await;
            set.members.push(Some(m));
        }
        let hosts: Vec<String> = set.configs.iter().map(|c| c.host.clone()).collect();
        for site in SITES {
            let listener = router::listener::bind("127.0.0.1:0").await.unwrap();
            set.routers.push(listener.local_addr().unwrap());
            let tls = set.cluster_tls.clone();
            let config = router::RouterConfig {
                listen: listener.local_addr().unwrap().to_string(),
                shard: hosts.join(","),
                site: site.into(),
                tls_cluster_cert: tls.as_ref().map(|t| t.cert.clone()).unwrap_or_default(),
                tls_cluster_key: tls.as_ref().map(|t| t.key.clone()).unwrap_or_default(),
                tls_cluster_ca: tls.as_ref().map(|t| t.ca.clone()).unwrap_or_default(),
                ..Default::default()
            };
            let sd = set.router_shutdown.clone();
            set.router_tasks.push(tokio::spawn(async move {
                router::serve(listener, config, sd).await.expect("router");
            }));
        }
        set.wait_for_preferred_primary().await;
        set
    }

    /// What running member `i`'s replication last published.
    pub fn status(&self, i: usize) -> shard::repl::Status {
        self.member(i)
            .and_then(|m| m.node.replica.as_ref())
            .expect("a running replica-set member")
            .status()
    }

    /// Tests start from a settled set: the highest-priority member leads (whoever won
    /// the first election hands over to it within a few seconds), so no priority
    /// takeover happens under a test's feet.
    async fn wait_for_preferred_primary(&self) {
        let top = self.configs.iter().map(|c| c.priority).max().unwrap_or(0);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if self
                .primary()
                .is_some_and(|p| self.configs[p].priority == top)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no member of priority {top} became primary");
    }

    async fn open(&self, i: usize, listener: tokio::net::TcpListener) -> RunningMember {
        self.try_open(i, listener).await.expect("start member")
    }

    async fn try_open(
        &self,
        i: usize,
        listener: tokio::net::TcpListener,
    ) -> Result<RunningMember, shard::ShardError> {
        let mut repl = ReplConfig::new("rs0", self.configs[i].id, self.configs.clone());
        if let Some((retain_mb, every_secs)) = self.tuning.compaction {
            repl.log_retain_mb = retain_mb;
            repl.compact_interval_secs = every_secs;
            // Small log files, so that these sets' few writes span several: their tests
            // then cross files, delete whole ones and reopen logs made of many.
            repl.log_segment_kb = 4;
        }
        if let Some(kb) = self.tuning.txn_entry_kb {
            repl.txn_entry_kb = kb;
        }
        shard::service::start_member(
            listener,
            self.member_dir(i),
            self.tuning.cache_mb,
            Duration::from_secs(600),
            Duration::from_secs(1),
            repl,
            self.cluster_auth(),
        )
        .await
    }

    /// How members authenticate to each other: mutual TLS when the set runs it.
    fn cluster_auth(&self) -> proto::cluster_auth::ClusterAuth {
        let tls = self.cluster_tls.as_ref().map(|t| {
            proto::cluster_tls::ClusterTls::load(&t.cert, &t.key, &t.ca)
                .expect("cluster TLS files")
                .expect("all three files")
        });
        proto::cluster_auth::ClusterAuth { key: None, tls }
    }

    /// A driver client of the router in site `site` (0 = A).
    pub async fn client(&self, site: usize, options: &str) -> mongodb::Client {
        crate::driver_client(&self.routers[site].to_string(), options, 20).await
    }

    pub fn member(&self, i: usize) -> Option<&RunningMember> {
        self.members[i].as_ref()
    }

    /// Runs `cmd` on running member `i` itself, past the routers, as a read that may go
    /// to a secondary (`secondaryOk`).
    pub async fn run_on_member(&self, i: usize, db: &str, cmd: bson::Document) -> bson::Document {
        let node = self.member(i).expect("a running member").node.clone();
        let db = db.to_string();
        tokio::task::spawn_blocking(move || {
            let opts = shard::node::RunOptions {
                secondary_ok: true,
                ..Default::default()
            };
            node.run_command_with(&db, &cmd, opts)
        })
        .await
        .expect("the command's thread")
    }

    /// Waits (bounded by `limit`, as a liveness check) until member `i` has applied
    /// everything the primary has committed.
    pub async fn wait_caught_up(&self, i: usize, limit: Duration) {
        let started = Instant::now();
        while started.elapsed() < limit {
            let commit = self.primary().map(|p| self.status(p).commit);
            if commit.is_some_and(|c| self.status(i).applied >= c) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("member {i} did not catch up within {limit:?}");
    }

    /// The member that is a writable primary now, if any.
    pub fn primary(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| self.writable(i))
    }

    fn writable(&self, i: usize) -> bool {
        self.members[i]
            .as_ref()
            .and_then(|m| m.node.replica.as_ref())
            .is_some_and(|r| r.status().writable)
    }

    /// Waits (bounded by `limit`, as a liveness check) for a writable primary.
    pub async fn wait_for_primary(&self, limit: Duration) -> Option<(usize, Duration)> {
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.wait_for_primary_among(&all, limit).await
    }

    /// Waits (bounded by `limit`) until one of `among` is a writable primary.
    pub async fn wait_for_primary_among(
        &self,
        among: &[usize],
        limit: Duration,
    ) -> Option<(usize, Duration)> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(&p) = among.iter().find(|&&i| self.writable(i)) {
                return Some((p, started.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Stops member `i` (its gRPC port closes, its Raft thread stops) and waits until its
    /// storage has closed: a checkpoint running at the stop holds WiredTiger a little
    /// longer, and its close writes by path into whatever directory is there by then (CI
    /// saw a wiped member's restart fail with ENOENT).
    pub async fn kill(&mut self, i: usize) {
        let m = self.members[i].take().expect("member is running");
        m.stop()
            .await
            .unwrap_or_else(|e| panic!("stopping member {i}: {e}"));
    }

    /// Starts member `i` again on its old address and data (`kill` waited for its storage
    /// to close).
    pub async fn restart(&mut self, i: usize) {
        let listener = self.rebind(i).await;
        let m = self
            .try_open(i, listener)
            .await
            .unwrap_or_else(|e| panic!("restart member {i}: {e}"));
        self.members[i] = Some(m);
    }

    /// Member `i`'s address again (the old listener may take a moment to go).
    async fn rebind(&self, i: usize) -> tokio::net::TcpListener {
        let mut tries = 0;
        loop {
            match tokio::net::TcpListener::bind(&self.configs[i].host).await {
                Ok(l) => return l,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("rebinding {}: {e}", self.configs[i].host),
            }
        }
    }

    /// Removes member `i`'s data (a wiped disk); it must be stopped.
    pub fn wipe(&self, i: usize) {
        assert!(self.members[i].is_none(), "wipe a stopped member");
        std::fs::remove_dir_all(self.member_dir(i)).unwrap();
    }

    /// Member `i`'s data directory (WiredTiger in `wt/`, the Raft log in `raft/`).
    pub fn member_dir(&self, i: usize) -> std::path::PathBuf {
        self.dir.path().join(format!("member{}", i + 1))
    }

    /// Cuts member `i` off from every other member, in both directions.
    pub fn isolate(&self, i: usize) {
        for j in (0..self.members.len()).filter(|&j| j != i) {
            self.cut_link(i, j);
        }
    }

    /// Cuts the link between members `i` and `j`, in both directions.
    pub fn cut_link(&self, i: usize, j: usize) {
        for (from, to) in [(i, j), (j, i)] {
            if let Some(r) = self.members[from]
                .as_ref()
                .and_then(|m| m.node.replica.as_ref())
            {
                r.faults.cut(self.configs[to].id);
            }
        }
    }

    /// Makes every member hold the snapshots it serves (until called with `false`).
    pub fn hold_snapshots(&self, hold: bool) {
        for m in self.members.iter().flatten() {
            if let Some(r) = &m.node.replica {
                r.faults.hold_snapshots(hold);
            }
        }
    }

    pub fn heal(&self) {
        for m in self.members.iter().flatten() {
            if let Some(r) = &m.node.replica {
                r.faults.heal_all();
            }
        }
    }

    pub async fn stop(mut self) {
        self.router_shutdown.cancel();
        for t in self.router_tasks.drain(..) {
            let _ = t.await;
        }
        for i in 0..self.members.len() {
            if self.members[i].is_some() {
                self.kill(i).await;
            }
        }
    }
}
