//! The `local` target: a three-site cluster of separate `bulwark` processes on loopback,
//! laid out as the two-two-arbiter deployment (two data members in site A, two in site B, an
//! arbiter in site C, a router per site, auth on). Every member→member and
//! router→member connection goes through a [`Link`](crate::proxy::Link), so sites can be
//! partitioned; processes can be killed, paused and restarted.

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

/// (site, priority, arbiter) of each member, in id order.
const LAYOUT: [(&str, i64, bool); 5] = [
    ("A", 2, false),
    ("A", 2, false),
    ("B", 1, false),
    ("B", 1, false),
    ("C", 0, true),
];

pub struct Member {
    pub id: u64,
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
}

pub struct LocalCluster {
    bin: PathBuf,
    cpus: Option<String>,
    pub dir: PathBuf,
    pub members: Vec<Member>,
    pub routers: Vec<Router>,
    links: Links,
    direct: bool,
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
        let (router_env, member_settings) = (&options.router_env, &options.member_settings);
        let cluster_key = router::auth::nonce::NonceSource::Os.nonce();
        let member_settings =
            format!("auth = true\ncluster_key = \"{cluster_key}\"\n{member_settings}");
        std::fs::create_dir_all(dir)?;
        let shutdown = CancellationToken::new();
        let mut links = Links::default();
        let member_port = |i: usize| base_port + i as u16;
        let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        // Proxy ports: 100 + 10 × dialler + target, above the members and routers.
        let link_port = |from: usize, to: usize| base_port + 100 + 10 * from as u16 + to as u16;
        let mut members = Vec::new();
        for (i, (site, _, _)) in LAYOUT.iter().enumerate() {
            let mut peers = Vec::new();
            for (j, (to_site, priority, arbiter)) in LAYOUT.iter().enumerate() {
                let dial = if i == j || options.direct {
                    String::new()
                } else {
                    let at = links
                        .open(
                            site,
                            to_site,
                            addr(link_port(i, j)),
                            addr(member_port(j)),
                            shutdown.clone(),
                        )
                        .await
                        .with_context(|| format!("starting link {i}->{j}"))?;
                    format!(", dial = \"{at}\"")
                };
                peers.push(format!(
                    "  {{ id = {}, host = \"127.0.0.1:{}\", site = \"{to_site}\", priority = {priority}, arbiter = {arbiter}{dial} }},",
                    j + 1,
                    member_port(j)
                ));
            }
            let id = i as u64 + 1;
            let config = dir.join(format!("member{id}.toml"));
            std::fs::write(
                &config,
                format!(
                    "listen = \"127.0.0.1:{}\"\ndir = \"{}\"\ncache_mb = 64\n{member_settings}\n[replication]\nset_name = \"shard0\"\nme = {id}\n{}\nmembers = [\n{}\n]\n",
                    member_port(i),
                    dir.join(format!("member{id}")).display(),
                    options.replication_settings,
                    peers.join("\n")
                ),
            )?;
            members.push(Member {
                id,
                site,
                port: member_port(i),
                config,
                log: dir.join(format!("member{id}.log")),
                child: None,
            });
        }
        // Routers: one per site, and a second in site A whose nonces come from the OS
        // (the nonce-contention scenario compares the two).
        let router_specs = [("A", "user"), ("B", "user"), ("C", "user"), ("A", "os")];
        let mut routers = Vec::new();
        for (r, (site, nonce)) in router_specs.iter().enumerate() {
            let from = 10 + r; // link-port slot of this router as a dialler
            let mut shard = Vec::new();
            for (j, (to_site, _, _)) in LAYOUT.iter().enumerate() {
                if options.direct {
                    shard.push(addr(member_port(j)).to_string());
                    continue;
                }
                let at = links
                    .open(
                        site,
                        to_site,
                        addr(link_port(from, j)),
                        addr(member_port(j)),
                        shutdown.clone(),
                    )
                    .await
                    .with_context(|| format!("starting router link {r}->{j}"))?;
                shard.push(at.to_string());
            }
            let port = base_port + 10 + r as u16;
            let mut env = vec![
                ("BULWARK_LISTEN".into(), format!("127.0.0.1:{port}")),
                ("BULWARK_SHARD".into(), shard.join(",")),
                ("BULWARK_SITE".into(), site.to_string()),
                ("BULWARK_AUTH".into(), "true".into()),
                ("BULWARK_CLUSTER_KEY".into(), cluster_key.clone()),
                ("BULWARK_NONCE_SOURCE".into(), nonce.to_string()),
                // slow-router sets a failCommand fail point on a router.
                ("BULWARK_ENABLE_TEST_COMMANDS".into(), "true".into()),
            ];
            env.extend(router_env.iter().cloned());
            if r == 0 {
                env.push(("BULWARK_ADMIN_USER".into(), ADMIN_USER.into()));
                env.push(("BULWARK_ADMIN_PASSWORD".into(), ADMIN_PASSWORD.into()));
            }
            routers.push(Router {
                site,
                port,
                nonce_source: nonce,
                env,
                log: dir.join(format!("router{r}.log")),
                child: None,
            });
        }
        let mut c = LocalCluster {
            bin: bin.to_path_buf(),
            cpus: options.cpus.clone(),
            dir: dir.to_path_buf(),
            members,
            routers,
            links,
            direct: options.direct,
            cluster_key,
            shutdown,
            mounts: Vec::new(),
        };
        if let Some(mb) = options.small_disks_mb {
            for (i, (_, _, arbiter)) in LAYOUT.iter().enumerate() {
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
        let child = spawn(cmd.args(["shard", "--config"]).arg(&m.config), &m.log)
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
