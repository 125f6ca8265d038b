//! The `local` target: a three-site cluster of separate `bulwark` processes on loopback,
//! with a router per site and auth on, in one of two [`Layout`]s: a replica set laid out
//! as the two-two-arbiter deployment (two data members in site A, two in site B, an
//! arbiter in site C), or a sharded cluster (two shards and the config servers, a member
//! of each per site). Every member→member and router→member connection goes through a
//! [`Link`](crate::proxy::Link) of the dialler's own, so sites can be partitioned;
//! processes can be killed, paused and restarted.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::proxy::Links;
use crate::raw_client::Login;

pub const ADMIN_USER: &str = "chaos";
pub const ADMIN_PASSWORD: &str = "chaos-password";

/// A member's site, priority, and whether it is an arbiter.
type MemberSpec = (&'static str, i64, bool);

/// One replica set of a layout.
struct SetSpec {
    name: &'static str,
    members: &'static [MemberSpec],
}

/// How the local cluster is laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// One replica set: two data members in site A, two in site B, an arbiter in site C.
    #[default]
    ReplicaSet,
    /// Two shards and the config servers, each a replica set with a member per site
    /// (shard0 prefers a primary in site A, shard1 in site B), as in
    /// deploy/docker-compose.sharded.yml.
    Sharded,
}

impl Layout {
    /// The replica sets, shards first; members are numbered across them, from 1.
    fn sets(self) -> &'static [SetSpec] {
        const ONE_PER_SITE_A: &[MemberSpec] = &[("A", 2, false), ("B", 1, false), ("C", 1, false)];
        match self {
            Layout::ReplicaSet => &[SetSpec {
                name: "shard0",
                members: &[
                    ("A", 2, false),
                    ("A", 2, false),
                    ("B", 1, false),
                    ("B", 1, false),
                    ("C", 0, true),
                ],
            }],
            Layout::Sharded => &[
                SetSpec {
                    name: "shard0",
                    members: ONE_PER_SITE_A,
                },
                SetSpec {
                    name: "shard1",
                    members: &[("A", 1, false), ("B", 2, false), ("C", 1, false)],
                },
                SetSpec {
                    name: CONFIG_SET,
                    members: ONE_PER_SITE_A,
                },
            ],
        }
    }

    /// Every member's set and spec, in id order.
    fn members(self) -> Vec<(&'static str, MemberSpec)> {
        self.sets()
            .iter()
            .flat_map(|set| set.members.iter().map(|m| (set.name, *m)))
            .collect()
    }
}

/// The config server replica set's name.
const CONFIG_SET: &str = "config";

pub struct Member {
    pub id: u64,
    pub set: &'static str,
    pub site: &'static str,
    pub port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

pub struct Router {
    pub site: &'static str,
    pub port: u16,
    pub nonce_source: &'static str,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

/// How the local cluster differs from the default.
#[derive(Default)]
pub struct LocalOptions {
    /// Extra `BULWARK_*` settings for every router.
    pub router_env: Vec<(String, String)>,
    /// Extra top-level TOML lines for every member's config.
    pub member_settings: String,
    /// Extra lines in every member's `[replication]` table.
    pub replication_settings: String,
    /// CPUs every process runs on (`taskset -c` syntax), so that a load generator on the
    /// others measures the cluster, not the competition between them.
    pub cpus: Option<String>,
    /// Every connection dials its target itself, through no [`Link`](crate::proxy::Link):
    /// the cluster cannot be partitioned, and no byte between its processes passes
    /// through the runner. The overload experiment needs that: its load generator
    /// saturates the runner's CPU, and a proxy there would add the generator's scheduling
    /// delay to every forwarded command and every Raft message, measured as the
    /// cluster's latency.
    pub direct: bool,
    /// Every data member's directory is a filesystem of its own, this many MiB (a tmpfs
    /// mounted by the runner, which must be root), so that one can be filled.
    pub small_disks_mb: Option<u64>,
    pub layout: Layout,
}

pub struct LocalCluster {
    bin: PathBuf,
    cpus: Option<String>,
    pub dir: PathBuf,
    pub members: Vec<Member>,
    pub routers: Vec<Router>,
    links: Links,
    direct: bool,
    layout: Layout,
    /// The key every router and member presents to members, fresh per run: the cluster
    /// runs with auth on, which makes internal authentication mandatory.
    cluster_key: String,
    shutdown: CancellationToken,
    /// Filesystems mounted for members' directories, unmounted by `finish`.
    mounts: Vec<PathBuf>,
}

impl LocalCluster {
    /// Starts every process (ports from `base_port` up) and waits until the cluster
    /// takes majority writes through every router.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        base_port: u16,
        options: &LocalOptions,
    ) -> anyhow::Result<LocalCluster> {
        let cluster_key = router::auth::nonce::NonceSource::Os.nonce();
        std::fs::create_dir_all(dir)?;
        let mut plan = Plan {
            base_port,
            options,
            dir,
            cluster_key: cluster_key.clone(),
            layout: options.layout.members(),
            links: Links::default(),
            opened: Default::default(),
            shutdown: CancellationToken::new(),
        };
        let mut members = Vec::new();
        for i in 0..plan.layout.len() {
            members.push(plan.member(i).await?);
        }
        let mut routers = Vec::new();
        // One router per site, and a second in site A whose nonces come from the OS (the
        // nonce-contention scenario compares the two).
        for (r, spec) in [("A", "user"), ("B", "user"), ("C", "user"), ("A", "os")]
            .into_iter()
            .enumerate()
        {
            routers.push(plan.router(r, spec).await?);
        }
        let mut c = LocalCluster {
            bin: bin.to_path_buf(),
            cpus: options.cpus.clone(),
            dir: dir.to_path_buf(),
            members,
            routers,
            links: plan.links,
            direct: options.direct,
            layout: options.layout,
            cluster_key,
            shutdown: plan.shutdown,
            mounts: Vec::new(),
        };
        if let Some(mb) = options.small_disks_mb {
            for (i, (_, (_, _, arbiter))) in plan.layout.iter().enumerate() {
                if !arbiter {
                    let at = dir.join(format!("member{}", i + 1));
                    crate::disk::mount_small(&at, mb)?;
                    c.mounts.push(at);
                }
            }
        }
        for i in 0..c.members.len() {
            c.start_member(i)?;
        }
        for r in 0..c.routers.len() {
            c.start_router(r)?;
        }
        c.wait_healthy().await?;
        Ok(c)
    }

    /// The `bulwark` binary, pinned to `cpus` when set.
    fn command(&self) -> Command {
        match &self.cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        }
    }

    fn start_router(&mut self, r: usize) -> anyhow::Result<()> {
        let mut cmd = self.command();
        let router = &mut self.routers[r];
        cmd.arg("router").envs(router.env.iter().cloned());
        router.child = Some(spawn(&mut cmd, &router.log).context("starting a router")?);
        Ok(())
    }
}

/// What [`LocalCluster::start`] lays out: every member's config file and every router's
/// settings, and the links between them.
struct Plan<'a> {
    base_port: u16,
    options: &'a LocalOptions,
    dir: &'a Path,
    cluster_key: String,
    layout: Vec<(&'static str, MemberSpec)>,
    links: Links,
    /// Links opened so far, by (dialler, member): a config server dials its peers through
    /// one link, as a peer and for the catalog.
    opened: std::collections::HashMap<(usize, usize), String>,
    shutdown: CancellationToken,
}

/// The link-port slot of router `r` as a dialler, above every member's.
const ROUTER_SLOT: usize = 10;

impl Plan<'_> {
    fn member_port(&self, i: usize) -> u16 {
        self.base_port + i as u16
    }

    fn host(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.member_port(i))
    }

    /// Where `from` (a member, or [`ROUTER_SLOT`] + a router) dials member `to`: a link
    /// of its own, which a partition of either's site cuts (or the member itself when the
    /// cluster runs direct).
    async fn dial(&mut self, from: usize, from_site: &str, to: usize) -> anyhow::Result<String> {
        if self.options.direct {
            return Ok(self.host(to));
        }
        if let Some(at) = self.opened.get(&(from, to)) {
            return Ok(at.clone());
        }
        // Proxy ports: 100 + 10 × dialler + target, above the members and routers.
        let port = self.base_port + 100 + 10 * from as u16 + to as u16;
        let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let at = self
            .links
            .open(
                from_site,
                self.layout[to].1 .0,
                addr(port),
                addr(self.member_port(to)),
                self.shutdown.clone(),
            )
            .await
            .with_context(|| format!("starting link {from}->{to}"))?;
        self.opened.insert((from, to), at.to_string());
        Ok(at.to_string())
    }

    /// `dial_via` for dialler `from`: every other member at its link.
    async fn dial_via(&mut self, from: usize, from_site: &str) -> anyhow::Result<String> {
        let mut pairs = Vec::new();
        for j in (0..self.layout.len()).filter(|&j| j != from) {
            pairs.push(format!(
                "{}={}",
                self.host(j),
                self.dial(from, from_site, j).await?
            ));
        }
        Ok(pairs.join(","))
    }

    /// Member `i`'s config file, written, and its record.
    async fn member(&mut self, i: usize) -> anyhow::Result<Member> {
        let (set, (site, _, _)) = self.layout[i];
        let mut peers = Vec::new();
        let set_members: Vec<usize> = (0..self.layout.len())
            .filter(|&j| self.layout[j].0 == set)
            .collect();
        for j in set_members {
            let (_, (to_site, priority, arbiter)) = self.layout[j];
            let dial = if i == j || self.options.direct {
                String::new()
            } else {
                format!(", dial = \"{}\"", self.dial(i, site, j).await?)
            };
            peers.push(format!(
                "  {{ id = {}, host = \"{}\", site = \"{to_site}\", priority = {priority}, arbiter = {arbiter}{dial} }},",
                j + 1,
                self.host(j)
            ));
        }
        // A config server reaches the shards' members (migrations, recovery of prepared
        // transactions) and its own set's (the catalog) through its site's links.
        let dial_via = if set == CONFIG_SET && !self.options.direct {
            format!("dial_via = \"{}\"\n", self.dial_via(i, site).await?)
        } else {
            String::new()
        };
        let id = i as u64 + 1;
        let config = self.dir.join(format!("member{id}.toml"));
        std::fs::write(
            &config,
            format!(
                "listen = \"{}\"\ndir = \"{}\"\ncache_mb = 64\nauth = true\ncluster_key = \"{}\"\n{dial_via}{}\n[replication]\nset_name = \"{set}\"\nme = {id}\n{}\nmembers = [\n{}\n]\n",
                self.host(i),
                self.dir.join(format!("member{id}")).display(),
                self.cluster_key,
                self.options.member_settings,
                self.options.replication_settings,
                peers.join("\n")
            ),
        )?;
        Ok(Member {
            id,
            set,
            site,
            port: self.member_port(i),
            config,
            log: self.dir.join(format!("member{id}.log")),
            child: None,
        })
    }

    /// Router `r`'s settings: the members it reaches through its links, by layout.
    async fn router(
        &mut self,
        r: usize,
        (site, nonce): (&'static str, &'static str),
    ) -> anyhow::Result<Router> {
        let from = ROUTER_SLOT + r;
        let port = self.base_port + 10 + r as u16;
        let mut env = vec![
            ("BULWARK_LISTEN".into(), format!("127.0.0.1:{port}")),
            ("BULWARK_SITE".into(), site.to_string()),
            ("BULWARK_AUTH".into(), "true".into()),
            ("BULWARK_CLUSTER_KEY".into(), self.cluster_key.clone()),
            ("BULWARK_NONCE_SOURCE".into(), nonce.to_string()),
            // slow-router sets a failCommand fail point on a router.
            ("BULWARK_ENABLE_TEST_COMMANDS".into(), "true".into()),
        ];
        let layout = self.layout.clone();
        let hosts_of = |set: &str| {
            (0..layout.len())
                .filter(|&j| layout[j].0 == set)
                .map(|j| self.host(j))
                .collect::<Vec<_>>()
                .join(",")
        };
        if self.options.layout == Layout::Sharded {
            let shards = ["shard0", "shard1"].map(|s| format!("{s}/{}", hosts_of(s)));
            env.push(("BULWARK_CONFIG_SERVERS".into(), hosts_of(CONFIG_SET)));
            env.push(("BULWARK_ADD_SHARDS".into(), shards.join(";")));
            env.push(("BULWARK_DIAL_VIA".into(), self.dial_via(from, site).await?));
        } else {
            let mut shard = Vec::new();
            for j in 0..layout.len() {
                shard.push(self.dial(from, site, j).await?);
            }
            env.push(("BULWARK_SHARD".into(), shard.join(",")));
        }
        env.extend(self.options.router_env.iter().cloned());
        if r == 0 {
            env.push(("BULWARK_ADMIN_USER".into(), ADMIN_USER.into()));
            env.push(("BULWARK_ADMIN_PASSWORD".into(), ADMIN_PASSWORD.into()));
        }
        Ok(Router {
            site,
            port,
            nonce_source: nonce,
            env,
            log: self.dir.join(format!("router{r}.log")),
            child: None,
        })
    }
}

impl Cluster for LocalCluster {
    fn target(&self) -> &'static str {
        "local"
    }

    fn login(&self) -> Login {
        Login::new(ADMIN_USER, ADMIN_PASSWORD)
    }

    fn member_count(&self) -> usize {
        self.members.len()
    }

    fn member_id(&self, i: usize) -> u64 {
        self.members[i].id
    }

    fn member_set(&self, i: usize) -> &str {
        self.members[i].set
    }

    fn sharded(&self) -> bool {
        self.layout == Layout::Sharded
    }

    fn member_site(&self, i: usize) -> &str {
        self.members[i].site
    }

    fn member_host(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].port)
    }

    /// The member's own port, past its links: its processes need no cluster key.
    fn member_command_addr(&self, i: usize) -> Option<String> {
        Some(self.member_host(i))
    }

    fn cluster_key(&self) -> Option<String> {
        Some(self.cluster_key.clone())
    }

    fn router_count(&self) -> usize {
        self.routers.len()
    }

    fn router_site(&self, r: usize) -> &str {
        self.routers[r].site
    }

    fn router_nonce_source(&self, r: usize) -> &str {
        self.routers[r].nonce_source
    }

    fn router_addr(&self, r: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.routers[r].port))
    }

    fn router_pid(&self, r: usize) -> Option<u32> {
        self.routers[r].child.as_ref().map(|c| c.id())
    }

    fn member_pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    fn logs_hint(&self) -> String {
        format!("logs in {}", self.dir.display())
    }

    fn kill_member(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        Ok(())
    }

    fn stop_member(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(mut c) = self.members[i].child.take() {
            signal(&c, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        Ok(())
    }

    fn start_member(&mut self, i: usize) -> anyhow::Result<()> {
        let mut cmd = self.command();
        let m = &mut self.members[i];
        let role = if m.set == CONFIG_SET {
            "configsvr"
        } else {
            "shard"
        };
        let child = spawn(cmd.args([role, "--config"]).arg(&m.config), &m.log)
            .with_context(|| format!("starting member {}", m.id))?;
        m.child = Some(child);
        Ok(())
    }

    fn pause_member(&mut self, i: usize, pause: bool) -> anyhow::Result<()> {
        if let Some(c) = &self.members[i].child {
            signal(c, if pause { libc::SIGSTOP } else { libc::SIGCONT });
        }
        Ok(())
    }

    fn partition(&mut self, site: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.direct,
            "this cluster was started with direct connections: it has no links to cut"
        );
        self.links.partition(site);
        Ok(())
    }

    fn heal(&mut self) -> anyhow::Result<()> {
        self.links.heal();
        Ok(())
    }

    fn fill_disk(&mut self, i: usize, full: bool) -> anyhow::Result<()> {
        let at = self.dir.join(format!("member{}", self.members[i].id));
        anyhow::ensure!(
            self.mounts.contains(&at),
            "member {} has no filesystem of its own (LocalOptions::small_disks_mb)",
            self.members[i].id
        );
        if full {
            crate::disk::fill(&at)
        } else {
            crate::disk::free(&at)
        }
    }

    /// Stops every process (SIGKILL: the data directory is thrown away).
    fn finish(&mut self) {
        self.shutdown.cancel();
        for m in &mut self.members {
            if let Some(c) = &m.child {
                signal(c, libc::SIGCONT);
            }
        }
        let children = self
            .members
            .iter_mut()
            .filter_map(|m| m.child.take())
            .chain(self.routers.iter_mut().filter_map(|r| r.child.take()));
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for at in self.mounts.drain(..) {
            crate::disk::unmount(&at);
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.finish();
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let out = File::options().create(true).append(true).open(log)?;
    Ok(cmd
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?)
}

fn signal(c: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid; the worst case is ESRCH.
    unsafe {
        libc::kill(c.id() as i32, sig);
    }
}
