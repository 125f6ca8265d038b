//! The `compose` target: the three-site docker-compose cluster of `deploy/` (started with
//! `make cluster-up`), faulted through the Docker CLI as an operator would: `docker kill`,
//! `docker stop`/`start`, `docker pause`/`unpause`, and `docker network disconnect` from
//! the inter-site links (`bulwark-wan-*`, see deploy/docker-compose.yml) to cut a site off.
//!
//! The runner attaches to a running cluster and leaves it running: it finds the members
//! through the replica set's own status, and lifts any fault it applied when it ends.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bson::doc;

use crate::cluster::{client, Cluster, HEALTHY_WITHIN, SITES};
use crate::raw_client::Login;

/// Prefix of the inter-site link networks; a container is on the two links of its site.
const LINK_PREFIX: &str = "bulwark-wan-";

pub struct ComposeMember {
    pub id: u64,
    pub site: String,
    /// `container:port`: the container name is the member's host name.
    pub host: String,
    pub container: String,
}

pub struct ComposeRouter {
    pub site: &'static str,
    pub container: String,
    pub addr: SocketAddr,
}

pub struct ComposeCluster {
    login: Login,
    pub members: Vec<ComposeMember>,
    pub routers: Vec<ComposeRouter>,
    /// (network, container) pairs this run disconnected, to reconnect on heal.
    cut: Vec<(String, String)>,
    paused: BTreeSet<usize>,
    down: BTreeSet<usize>,
}

impl ComposeCluster {
    /// Attaches to the running cluster: its routers are published on 127.0.0.1 at
    /// `BULWARK_PORT_A/B/C` (27017-27019) and log in as `BULWARK_ADMIN_USER` /
    /// `BULWARK_ADMIN_PASSWORD` (admin / bulwark), the compose file's variables. Waits
    /// (bounded) until it is healthy.
    pub async fn attach() -> anyhow::Result<ComposeCluster> {
        docker(&["version", "--format", "{{.Server.Version}}"])
            .context("the compose target needs a running Docker engine")?;
        let env = |k: &str, default: &str| std::env::var(k).unwrap_or_else(|_| default.into());
        let mut routers = Vec::new();
        for (site, default_port) in SITES.into_iter().zip(["27017", "27018", "27019"]) {
            let container = format!("bulwark-router-{}", site.to_lowercase());
            let state =
                docker(&["inspect", "-f", "{{.State.Status}}", &container]).with_context(|| {
                    format!("no container {container}: start the cluster with `make cluster-up`")
                })?;
            if state != "running" {
                bail!(
                    "{container} is {state}, not running: start the cluster with `make cluster-up`"
                );
            }
            let port: u16 = env(&format!("BULWARK_PORT_{site}"), default_port).parse()?;
            routers.push(ComposeRouter {
                site,
                container,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
            });
        }
        let mut c = ComposeCluster {
            login: Login::new(
                &env("BULWARK_ADMIN_USER", "admin"),
                &env("BULWARK_ADMIN_PASSWORD", "bulwark"),
            ),
            members: Vec::new(),
            routers,
            cut: Vec::new(),
            paused: BTreeSet::new(),
            down: BTreeSet::new(),
        };
        c.wait_healthy().await?;
        c.members = c.discover_members().await?;
        Ok(c)
    }

    /// The members as the replica set lists them, each in the container of its host name.
    async fn discover_members(&self) -> anyhow::Result<Vec<ComposeMember>> {
        let admin = client(&self.uri(self.router_of("A"))).await?;
        let status = admin
            .database("admin")
            .run_command(doc! {"replSetGetStatus": 1})
            .await
            .context("replSetGetStatus through site A's router")?;
        let mut members = Vec::new();
        for m in status.get_array("members")? {
            let Some(m) = m.as_document() else { continue };
            let host = m.get_str("name")?.to_string();
            let container = host.split(':').next().unwrap_or_default().to_string();
            docker(&["inspect", "-f", "{{.Id}}", &container]).with_context(|| {
                format!("member {host} has no container named {container} on this host")
            })?;
            members.push(ComposeMember {
                id: m
                    .get_i32("_id")
                    .map(|x| x as u64)
                    .or_else(|_| m.get_i64("_id").map(|x| x as u64))?,
                site: m.get_document("tags")?.get_str("site")?.to_string(),
                host,
                container,
            });
        }
        if members.is_empty() {
            bail!("replSetGetStatus lists no members: {status}");
        }
        Ok(members)
    }

    /// The containers of `site`: its members and its router.
    fn site_containers(&self, site: &str) -> Vec<String> {
        let members = self.members.iter().filter(|m| m.site == site);
        let routers = self.routers.iter().filter(|r| r.site == site);
        members
            .map(|m| m.container.clone())
            .chain(routers.map(|r| r.container.clone()))
            .collect()
    }
}

impl Cluster for ComposeCluster {
    fn target(&self) -> &'static str {
        "compose"
    }

    fn login(&self) -> Login {
        self.login.clone()
    }

    fn member_count(&self) -> usize {
        self.members.len()
    }

    fn member_id(&self, i: usize) -> u64 {
        self.members[i].id
    }

    fn member_site(&self, i: usize) -> &str {
        &self.members[i].site
    }

    fn member_host(&self, i: usize) -> String {
        self.members[i].host.clone()
    }

    fn router_count(&self) -> usize {
        self.routers.len()
    }

    fn router_site(&self, r: usize) -> &str {
        self.routers[r].site
    }

    fn router_nonce_source(&self, _r: usize) -> &str {
        "user"
    }

    fn router_addr(&self, r: usize) -> SocketAddr {
        self.routers[r].addr
    }

    fn router_pid(&self, r: usize) -> Option<u32> {
        container_pid(&self.routers[r].container)
    }

    fn member_pid(&self, i: usize) -> Option<u32> {
        container_pid(&self.members[i].container)
    }

    fn logs_hint(&self) -> String {
        "see `docker logs <container>` (deploy/cluster.sh compose ps lists them)".into()
    }

    fn kill_member(&mut self, i: usize) -> anyhow::Result<()> {
        docker(&["kill", &self.members[i].container])?;
        self.down.insert(i);
        Ok(())
    }

    fn stop_member(&mut self, i: usize) -> anyhow::Result<()> {
        docker(&["stop", "-t", "30", &self.members[i].container])?;
        self.down.insert(i);
        Ok(())
    }

    fn start_member(&mut self, i: usize) -> anyhow::Result<()> {
        docker(&["start", &self.members[i].container])?;
        self.down.remove(&i);
        Ok(())
    }

    fn pause_member(&mut self, i: usize, pause: bool) -> anyhow::Result<()> {
        let verb = if pause { "pause" } else { "unpause" };
        docker(&[verb, &self.members[i].container])?;
        if pause {
            self.paused.insert(i);
        } else {
            self.paused.remove(&i);
        }
        Ok(())
    }

    fn partition(&mut self, site: &str) -> anyhow::Result<()> {
        for container in self.site_containers(site) {
            let nets = docker(&[
                "inspect",
                "-f",
                "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
                &container,
            ])?;
            for net in nets
                .split_whitespace()
                .filter(|n| n.starts_with(LINK_PREFIX))
            {
                docker(&["network", "disconnect", net, &container])?;
                self.cut.push((net.to_string(), container.clone()));
            }
        }
        if self.cut.is_empty() {
            bail!("site {site}'s containers are on no {LINK_PREFIX}* network: is this deploy/docker-compose.yml's layout?");
        }
        Ok(())
    }

    fn heal(&mut self) -> anyhow::Result<()> {
        while let Some((net, container)) = self.cut.pop() {
            docker(&["network", "connect", &net, &container])?;
        }
        Ok(())
    }

    /// Lifts whatever fault is still applied (a run that failed half-way) and leaves the
    /// cluster running.
    fn finish(&mut self) {
        let _ = self.heal();
        for i in std::mem::take(&mut self.paused) {
            let _ = docker(&["unpause", &self.members[i].container]);
        }
        for i in std::mem::take(&mut self.down) {
            let _ = docker(&["start", &self.members[i].container]);
        }
    }
}

impl Drop for ComposeCluster {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The container's main process, as the host sees it.
fn container_pid(container: &str) -> Option<u32> {
    docker(&["inspect", "-f", "{{.State.Pid}}", container])
        .ok()?
        .parse()
        .ok()
        .filter(|&p| p != 0)
}

/// Runs `docker ARGS` (bounded: a wedged engine must not hang the run) and returns its
/// trimmed stdout, or its stderr as the error.
fn docker(args: &[&str]) -> anyhow::Result<String> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running docker")?;
    let deadline = Instant::now() + HEALTHY_WITHIN;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "docker {} did not finish within {HEALTHY_WITHIN:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
