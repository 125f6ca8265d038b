//! What a scenario needs from a target: its routers and members, the faults it can apply
//! to them, and the health checks the runner waits on. [`local`](crate::local) (processes
//! on loopback) and [`compose`](crate::compose) (the docker-compose cluster) implement it;
//! the health checks, which only talk to routers, are written once here.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::bail;
use bson::doc;

use crate::direct::DirectMember;
use crate::raw_client::Login;

pub const SITES: [&str; 3] = ["A", "B", "C"];
/// How long a cluster may take to become healthy before the scenario fails.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(90);
/// How long a fault aimed at the primary waits for an election under way.
pub const ELECTED_WITHIN: Duration = Duration::from_secs(30);
/// How long a member may take to answer `hello` when the runner asks it directly.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// A three-site cluster under test. Members and routers are numbered from 0.
#[allow(async_fn_in_trait)] // used through generics only, never as `dyn`
pub trait Cluster {
    /// "local" or "compose", for the report.
    fn target(&self) -> &'static str;
    /// The user every client logs in as.
    fn login(&self) -> Login;
    fn member_count(&self) -> usize;
    /// The replica set member `i` belongs to.
    fn member_set(&self, _i: usize) -> &str {
        "shard0"
    }
    /// The routers serve a sharded cluster (shards and config servers, each a replica
    /// set): a router then reports no set's members, and the runner asks the members.
    fn sharded(&self) -> bool {
        false
    }
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
    /// In a sharded cluster, the first shard's.
    async fn elected_primary(&self, client: &mongodb::Client) -> anyhow::Result<usize> {
        Ok(self.elected_primaries(client).await?[0])
    }

    /// Every replica set's primary, in the order of their members (the shards first),
    /// once each has one, within `ELECTED_WITHIN`.
    async fn elected_primaries(&self, client: &mongodb::Client) -> anyhow::Result<Vec<usize>> {
        let deadline = Instant::now() + ELECTED_WITHIN;
        let mut sets: Vec<&str> = Vec::new();
        for i in 0..self.member_count() {
            if !sets.contains(&self.member_set(i)) {
                sets.push(self.member_set(i));
            }
        }
        let mut primaries = Vec::new();
        for set in sets {
            loop {
                let found = if self.sharded() {
                    self.primary_of(set).await
                } else {
                    self.primary(client).await
                };
                match found {
                    Ok(p) => break primaries.push(p),
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
        Ok(primaries)
    }

    /// The member of `set` that says it is the writable primary, asked of each member.
    async fn primary_of(&self, set: &str) -> anyhow::Result<usize> {
        for i in (0..self.member_count()).filter(|&i| self.member_set(i) == set) {
            let Some(member) = DirectMember::of(self, i)? else {
                bail!(
                    "the runner cannot reach the {} target's members",
                    self.target()
                );
            };
            let hello = member.hello(PROBE_LIMIT).await;
            if hello.is_ok_and(|h| h.get_bool("isWritablePrimary") == Ok(true)) {
                return Ok(i);
            }
        }
        bail!("no member of {set} says it is primary")
    }

    /// Member `i`'s state as it reports it (`PRIMARY`, `SECONDARY`, `ARBITER`, or
    /// another), asked of a router, or of the member itself in a sharded cluster.
    async fn member_state(&self, admin: &mongodb::Client, i: usize) -> Option<String> {
        if self.sharded() {
            let hello = DirectMember::of(self, i)
                .ok()??
                .hello(PROBE_LIMIT)
                .await
                .ok()?;
            let flag = |f: &str| hello.get_bool(f) == Ok(true);
            let state = if flag("isWritablePrimary") {
                "PRIMARY"
            } else if flag("secondary") {
                "SECONDARY"
            } else if flag("arbiterOnly") {
                "ARBITER"
            } else {
                "OTHER"
            };
            return Some(state.into());
        }
        let status = admin
            .database("admin")
            .run_command(doc! {"replSetGetStatus": 1})
            .await
            .ok()?;
        let host = self.member_host(i);
        status
            .get_array("members")
            .ok()?
            .iter()
            .filter_map(|m| m.as_document())
            .find(|m| m.get_str("name") == Ok(host.as_str()))
            .and_then(|m| m.get_str("stateStr").ok())
            .map(str::to_string)
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

    /// Waits until member `i` reports itself up (SECONDARY, ARBITER or PRIMARY), as an
    /// operator waits before restarting the next member.
    async fn wait_member_up(&self, admin: &mongodb::Client, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            let state = self.member_state(admin, i).await;
            if matches!(state.as_deref(), Some("SECONDARY" | "ARBITER" | "PRIMARY")) {
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
