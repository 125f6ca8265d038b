//! The `local` target: a three-site cluster of separate `bulwark` processes on loopback,
//! laid out as the seed deployment (two data members in site A, two in site B, an
//! arbiter in site C, a router per site, auth on). Every member→member and
//! router→member connection goes through a [`Link`](crate::proxy::Link), so sites can be
//! partitioned; processes can be killed, paused and restarted.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bson::doc;
use tokio_util::sync::CancellationToken;

use crate::proxy::Links;

pub const ADMIN_USER: &str = "chaos";
pub const ADMIN_PASSWORD: &str = "chaos-password";
pub const SITES: [&str; 3] = ["A", "B", "C"];
/// How long a cluster may take to become healthy before the scenario fails.
const HEALTHY_WITHIN: Duration = Duration::from_secs(90);

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

pub struct LocalCluster {
    bin: PathBuf,
    pub dir: PathBuf,
    pub members: Vec<Member>,
    pub routers: Vec<Router>,
    links: Links,
    shutdown: CancellationToken,
}

impl LocalCluster {
    /// Starts every process (ports from `base_port` up) and waits until the cluster
    /// takes majority writes through every router.
    /// `router_env`: extra `BULWARK_*` settings for every router.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        base_port: u16,
        router_env: &[(String, String)],
    ) -> anyhow::Result<LocalCluster> {
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
                let dial = if i == j {
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
                    "listen = \"127.0.0.1:{}\"\ndir = \"{}\"\ncache_mb = 64\n\n[replication]\nset_name = \"shard0\"\nme = {id}\nmembers = [\n{}\n]\n",
                    member_port(i),
                    dir.join(format!("member{id}")).display(),
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
            dir: dir.to_path_buf(),
            members,
            routers,
            links,
            shutdown,
        };
        for i in 0..c.members.len() {
            c.start_member(i)?;
        }
        for r in 0..c.routers.len() {
            c.start_router(r)?;
        }
        c.wait_healthy().await?;
        Ok(c)
    }

    pub fn router_addr(&self, r: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.routers[r].port))
    }

    /// The site's default router (not the OS-nonce one).
    pub fn router_of(&self, site: &str) -> usize {
        self.routers
            .iter()
            .position(|r| r.site == site && r.nonce_source == "user")
            .expect("every site has a router")
    }

    pub fn uri(&self, r: usize) -> String {
        format!(
            "mongodb://{ADMIN_USER}:{ADMIN_PASSWORD}@127.0.0.1:{}/?authSource=admin",
            self.routers[r].port
        )
    }

    pub fn start_member(&mut self, i: usize) -> anyhow::Result<()> {
        let m = &mut self.members[i];
        let child = spawn(
            Command::new(&self.bin)
                .args(["shard", "--config"])
                .arg(&m.config),
            &m.log,
        )
        .with_context(|| format!("starting member {}", m.id))?;
        m.child = Some(child);
        Ok(())
    }

    fn start_router(&mut self, r: usize) -> anyhow::Result<()> {
        let router = &mut self.routers[r];
        let mut cmd = Command::new(&self.bin);
        cmd.arg("router").envs(router.env.iter().cloned());
        router.child = Some(spawn(&mut cmd, &router.log).context("starting a router")?);
        Ok(())
    }

    pub fn router_pid(&self, r: usize) -> Option<u32> {
        self.routers[r].child.as_ref().map(|c| c.id())
    }

    /// SIGKILL: no clean shutdown, no checkpoint.
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait: a clean stop (the member checkpoints WiredTiger first).
    pub fn stop_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            signal(&c, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP (`pause = true`) or SIGCONT.
    pub fn pause_member(&self, i: usize, pause: bool) {
        if let Some(c) = &self.members[i].child {
            signal(c, if pause { libc::SIGSTOP } else { libc::SIGCONT });
        }
    }

    pub fn partition(&self, site: &str) {
        self.links.partition(site);
    }

    pub fn heal(&self) {
        self.links.heal();
    }

    /// The member the replica set reports as primary, asked through `router`.
    pub async fn primary(&self, client: &mongodb::Client) -> anyhow::Result<usize> {
        let status = client
            .database("admin")
            .run_command(doc! {"replSetGetStatus": 1})
            .await?;
        for m in status.get_array("members")? {
            let Some(m) = m.as_document() else { continue };
            if m.get_str("stateStr") == Ok("PRIMARY") {
                let name = m.get_str("name")?;
                if let Some(i) = self
                    .members
                    .iter()
                    .position(|x| name.ends_with(&format!(":{}", x.port)))
                {
                    return Ok(i);
                }
            }
        }
        bail!("no primary in replSetGetStatus: {status}")
    }

    /// Waits until member `i` reports itself up (SECONDARY, ARBITER or PRIMARY) in the
    /// set's status, as an operator waits before restarting the next member.
    pub async fn wait_member_up(&self, admin: &mongodb::Client, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        let suffix = format!(":{}", self.members[i].port);
        loop {
            let status = admin
                .database("admin")
                .run_command(doc! {"replSetGetStatus": 1})
                .await;
            let up = status.ok().is_some_and(|s| {
                s.get_array("members").is_ok_and(|ms| {
                    ms.iter().filter_map(|m| m.as_document()).any(|m| {
                        m.get_str("name").is_ok_and(|n| n.ends_with(&suffix))
                            && matches!(
                                m.get_str("stateStr"),
                                Ok("SECONDARY" | "ARBITER" | "PRIMARY")
                            )
                    })
                })
            });
            if up {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "member {} did not come back within {HEALTHY_WITHIN:?}",
                    self.members[i].id
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until a majority write and a read succeed through every default router.
    pub async fn wait_healthy(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let deadline = started + HEALTHY_WITHIN;
        for site in SITES {
            let r = self.router_of(site);
            let client = client(&self.uri(r)).await?;
            let coll = client
                .database("chaos")
                .collection::<bson::Document>("health");
            let mut last: String;
            loop {
                let probe = async {
                    coll.update_one(doc! {"_id": site}, doc! {"$inc": {"n": 1}})
                        .upsert(true)
                        .await?;
                    coll.find_one(doc! {"_id": site}).await?;
                    anyhow::Ok(())
                };
                match tokio::time::timeout(Duration::from_secs(5), probe).await {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) => last = e.to_string(),
                    Err(_) => last = "timed out".into(),
                }
                if Instant::now() > deadline {
                    bail!(
                        "the cluster did not become healthy within {:?} (site {site} router: {last}); logs in {}",
                        HEALTHY_WITHIN,
                        self.dir.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(started.elapsed())
    }

    /// Stops every process (SIGKILL: the data directory is thrown away).
    pub fn stop(&mut self) {
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
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A driver client with short timeouts, so a fault shows as errors, not as a stall.
pub async fn client(uri: &str) -> anyhow::Result<mongodb::Client> {
    let mut opts = mongodb::options::ClientOptions::parse(uri).await?;
    opts.server_selection_timeout = Some(Duration::from_secs(2));
    opts.connect_timeout = Some(Duration::from_secs(2));
    Ok(mongodb::Client::with_options(opts)?)
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
