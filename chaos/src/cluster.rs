//! What a scenario needs from a target: its routers and members, the faults it can apply
//! to them, and the health checks the runner waits on. [`local`](crate::local) (processes
//! on loopback) and [`compose`](crate::compose) (the docker-compose cluster) implement it;
//! the health checks, which only talk to routers, are written once here.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::bail;
use bson::doc;

use crate::raw_client::Login;

pub const SITES: [&str; 3] = ["A", "B", "C"];
/// How long a cluster may take to become healthy before the scenario fails.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(90);
/// How long a fault aimed at the primary waits for an election under way.
pub const ELECTED_WITHIN: Duration = Duration::from_secs(30);

/// A three-site cluster under test. Members and routers are numbered from 0.
#[allow(async_fn_in_trait)] // used through generics only, never as `dyn`
pub trait Cluster {
    /// "local" or "compose", for the report.
    fn target(&self) -> &'static str;
    /// The user every client logs in as.
    fn login(&self) -> Login;
    fn member_count(&self) -> usize;
    /// The member's replica-set id.
    fn member_id(&self, i: usize) -> u64;
    fn member_site(&self, i: usize) -> &str;
    /// The member's `host:port` as the replica set names it (replSetGetStatus `name`).
    fn member_host(&self, i: usize) -> String;
    /// Where the runner itself can send member `i` commands (its gRPC command service,
    /// as routers do), when it can (the checks that compare members need it).
    fn member_command_addr(&self, _i: usize) -> Option<String> {
        None
    }
    /// The key a direct call to a member presents.
    fn cluster_key(&self) -> Option<String> {
        None
    }
    fn router_count(&self) -> usize;
    fn router_site(&self, r: usize) -> &str;
    /// Where the router's nonces come from ("user" by default, "os" for the comparison).
    fn router_nonce_source(&self, r: usize) -> &str;
    fn router_addr(&self, r: usize) -> SocketAddr;
    /// The router's process on this host, whose CPU a storm reports.
    fn router_pid(&self, r: usize) -> Option<u32>;
    /// The member's process on this host.
    fn member_pid(&self, i: usize) -> Option<u32>;
    /// Where to look when something fails (log files, or the containers' `docker logs`).
    fn logs_hint(&self) -> String;

    /// Stops member `i` at once (SIGKILL: no clean shutdown, no checkpoint).
    fn kill_member(&mut self, i: usize) -> anyhow::Result<()>;
    /// Stops member `i` cleanly (SIGTERM and wait: it checkpoints WiredTiger first).
    fn stop_member(&mut self, i: usize) -> anyhow::Result<()>;
    /// Starts member `i` again after a kill or a stop, on its own data.
    fn start_member(&mut self, i: usize) -> anyhow::Result<()>;
    /// Freezes (`pause`) or thaws member `i`: SIGSTOP/SIGCONT, or the cgroup freezer.
    fn pause_member(&mut self, i: usize, pause: bool) -> anyhow::Result<()>;
    /// Cuts `site` (members and router) off from the other two sites.
    fn partition(&mut self, site: &str) -> anyhow::Result<()>;
    /// Undoes every partition.
    fn heal(&mut self) -> anyhow::Result<()>;
    /// Fills the filesystem member `i`'s data is on (`full`), or frees it again.
    fn fill_disk(&mut self, _i: usize, _full: bool) -> anyhow::Result<()> {
        anyhow::bail!("filling a member's disk needs the local target (small filesystems)")
    }
    /// Ends the run: the local target stops its processes, the compose target lifts any
    /// fault still applied and leaves the cluster running.
    fn finish(&mut self);

    /// The site's default router (not an OS-nonce one).
    fn router_of(&self, site: &str) -> usize {
        (0..self.router_count())
            .find(|&r| self.router_site(r) == site && self.router_nonce_source(r) == "user")
            .expect("every site has a router")
    }

    fn uri(&self, r: usize) -> String {
        let login = self.login();
        format!(
            "mongodb://{}:{}@{}/?authSource=admin",
            login.user,
            login.password,
            self.router_addr(r)
        )
    }

    /// The primary once the set has one, within `ELECTED_WITHIN`: a fault aimed at the
    /// primary may come while an election is under way, and an operator waits it out.
    async fn elected_primary(&self, client: &mongodb::Client) -> anyhow::Result<usize> {
        let deadline = Instant::now() + ELECTED_WITHIN;
        loop {
            match self.primary(client).await {
                Ok(p) => return Ok(p),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The member the replica set reports as primary, asked through `client`.
    async fn primary(&self, client: &mongodb::Client) -> anyhow::Result<usize> {
        let status = client
            .database("admin")
            .run_command(doc! {"replSetGetStatus": 1})
            .await?;
        for m in status.get_array("members")? {
            let Some(m) = m.as_document() else { continue };
            if m.get_str("stateStr") == Ok("PRIMARY") {
                let name = m.get_str("name")?;
                if let Some(i) = (0..self.member_count()).find(|&i| self.member_host(i) == name) {
                    return Ok(i);
                }
            }
        }
        bail!("no primary in replSetGetStatus: {status}")
    }

    /// Waits until member `i` reports itself up (SECONDARY, ARBITER or PRIMARY) in the
    /// set's status, as an operator waits before restarting the next member.
    async fn wait_member_up(&self, admin: &mongodb::Client, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        let host = self.member_host(i);
        loop {
            let status = admin
                .database("admin")
                .run_command(doc! {"replSetGetStatus": 1})
                .await;
            let up = status.ok().is_some_and(|s| {
                s.get_array("members").is_ok_and(|ms| {
                    ms.iter().filter_map(|m| m.as_document()).any(|m| {
                        m.get_str("name") == Ok(host.as_str())
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
                    "member {} did not come back within {HEALTHY_WITHIN:?}; {}",
                    self.member_id(i),
                    self.logs_hint()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until a majority write and a read succeed through every site's default router.
    async fn wait_healthy(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let deadline = started + HEALTHY_WITHIN;
        for site in SITES {
            let client = client(&self.uri(self.router_of(site))).await?;
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
                        "the cluster did not become healthy within {HEALTHY_WITHIN:?} (site {site} router: {last}); {}",
                        self.logs_hint()
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(started.elapsed())
    }
}

/// A driver client with short timeouts, so a fault shows as errors, not as a stall.
pub async fn client(uri: &str) -> anyhow::Result<mongodb::Client> {
    let mut opts = mongodb::options::ClientOptions::parse(uri).await?;
    opts.server_selection_timeout = Some(Duration::from_secs(2));
    opts.connect_timeout = Some(Duration::from_secs(2));
    Ok(mongodb::Client::with_options(opts)?)
}
