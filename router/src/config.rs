//! Router configuration (`bulwark router --config FILE`, `BULWARK_*` overrides).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// Address clients connect to.
    pub listen: String,
    /// gRPC address of the shard node, or its replica set's members (host:port,...).
    /// Unused when `config_servers` is set: the shards are then read from the catalog.
    pub shard: String,
    /// The config server replica set's members (host:port,...). When set, the router
    /// serves a sharded cluster: shards, databases and chunks come from the catalog there.
    pub config_servers: String,
    /// With `config_servers`: shards this router adds to the catalog at start, as
    /// `addShard` would (`name/host:port,host:port;name/...`); one the catalog has already
    /// is accepted. Lets a deployment file describe the whole cluster.
    pub add_shards: String,
    /// With `add_shards`: the zone each of those shards is put in at start, as
    /// `addShardToZone` would (`shard0=A;shard1=B`). Naming each zone after the site of the
    /// shard's preferred primary ties it to that site, as `bulwark local` does, so a
    /// zone range keyed by site keeps that site's documents on a shard whose primary is
    /// there.
    pub shard_zones: String,
    /// Members reached at another address than the one the catalog names
    /// (`host:port=addr:port,...`; `proto::dial_via`): for address translation, and for
    /// tests that send each site's traffic through a proxy of its own.
    pub dial_via: String,
    /// `net.maxIncomingConnections`: connections beyond this are closed at once.
    pub max_connections: usize,
    /// New connections handshaking (hello, SCRAM) at once; the rest queue, newest first
    /// (see `ingress.rs`). 0: 64 per core.
    pub max_concurrent_handshakes: usize,
    /// Connections that may wait to handshake; a newcomer to a full queue closes the
    /// oldest waiter.
    pub handshake_queue_limit: usize,
    /// A connection that waited this long to handshake is closed (its client has
    /// most likely given up already).
    pub handshake_queue_wait_ms: u64,
    /// New connections let through per second (0: no rate limit), in bursts of up to
    /// `connection_rate_burst`; up to `connection_rate_queue` more wait their turn, and
    /// beyond that a new connection is closed at once (`connection_rate.rs`).
    pub connection_rate_per_sec: f64,
    pub connection_rate_burst: usize,
    pub connection_rate_queue: usize,
    /// Commands slower than this are logged with their timings.
    pub slow_ms: u64,
    /// Use each command's `maxTimeMS`: forward it to the shard as its deadline, and shed
    /// the command at once when the router's own lag is too large for it
    /// (`runtime_lag.rs`).
    /// Off, nobody learns when a client gives up (as with a router that drops the
    /// deadline); only for measuring what that buys (`bulwark chaos overload`).
    pub propagate_deadlines: bool,
    /// Forwarded calls in flight from this router to one shard; more wait in one
    /// first-come, first-served line here, where a command with a deadline that would
    /// wait too long is refused at once (`forward_gate.rs`). 0: no bound.
    pub forward_slots: usize,
    /// The site this router runs in: reads that may go to a secondary prefer members
    /// tagged with it.
    pub site: String,
    /// Require clients to authenticate (SCRAM) and check every command's privileges.
    pub auth: bool,
    /// Where SCRAM server nonces come from: "user" (per-thread CSPRNG, the default) or
    /// "os" (a getrandom call per nonce; only for comparing the two under churn).
    pub nonce_source: String,
    /// With `auth`: a user created at start (role root in admin) unless it exists.
    pub admin_user: String,
    pub admin_password: String,
    /// disabled | allowTLS | preferTLS | requireTLS
    pub tls_mode: String,
    /// PEM certificate chain and private key the router presents.
    pub tls_cert: String,
    pub tls_key: String,
    /// PEM CA bundle: client certificates signed by it are accepted (and verified).
    pub tls_ca: String,
    /// With `tls_ca`: refuse TLS clients that present no certificate.
    pub tls_require_client_cert: bool,
    /// Shared secret sent with every router→shard call (the shard must have the same).
    pub cluster_key: String,
    /// Path of the audit log (JSON lines; empty: off). See `audit`.
    pub audit_log: String,
    /// The audit log moves to `<path>.1` past this size, so it takes at most twice it.
    pub audit_log_max_mb: u64,
    /// A file holding the cluster key (used when `cluster_key` is empty).
    pub cluster_key_file: String,
    /// Mutual TLS to the members (`proto::cluster_tls`): this router's PEM certificate
    /// and key, and the CA the members' certificates chain to. All three or none.
    pub tls_cluster_cert: String,
    pub tls_cluster_key: String,
    pub tls_cluster_ca: String,
    /// MongoDB's `enableTestCommands`: allows `configureFailPoint` (drivers' test suites
    /// inject errors with it). Never on in production.
    pub enable_test_commands: bool,
    /// In a sharded cluster: how long a collection's routing is used before it is read
    /// again. Shard versions correct a stale table on first use; this bounds how long a
    /// collection sharded through another router looks unsharded here.
    pub catalog_cache_ms: u64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            listen: "127.0.0.1:27017".into(),
            shard: "127.0.0.1:27100".into(),
            config_servers: String::new(),
            dial_via: String::new(),
            add_shards: String::new(),
            shard_zones: String::new(),
            max_connections: 20_000,
            max_concurrent_handshakes: 0,
            handshake_queue_limit: 4096,
            handshake_queue_wait_ms: 2000,
            connection_rate_per_sec: 0.0,
            connection_rate_burst: 100,
            connection_rate_queue: 1000,
            slow_ms: 100,
            propagate_deadlines: true,
            forward_slots: crate::overload::forward_gate::DEFAULT_SLOTS,
            site: String::new(),
            auth: false,
            nonce_source: "user".into(),
            admin_user: String::new(),
            admin_password: String::new(),
            tls_mode: "disabled".into(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_ca: String::new(),
            tls_require_client_cert: false,
            cluster_key: String::new(),
            audit_log: String::new(),
            audit_log_max_mb: 100,
            cluster_key_file: String::new(),
            tls_cluster_cert: String::new(),
            tls_cluster_key: String::new(),
            tls_cluster_ca: String::new(),
            enable_test_commands: false,
            catalog_cache_ms: 1000,
        }
    }
}

impl RouterConfig {
    /// How this router authenticates to the members.
    pub fn cluster_auth(&self) -> Result<proto::cluster_auth::ClusterAuth, String> {
        let tls = [
            &*self.tls_cluster_cert,
            &self.tls_cluster_key,
            &self.tls_cluster_ca,
        ];
        proto::cluster_auth::ClusterAuth::load(&self.cluster_key, &self.cluster_key_file, tls)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("max_connections must be positive".into());
        }
        if self.forward_slots > crate::overload::forward_gate::MAX_SLOTS {
            return Err(format!(
                "forward_slots must be at most {}",
                crate::overload::forward_gate::MAX_SLOTS
            ));
        }
        if !(self.connection_rate_per_sec >= 0.0 && self.connection_rate_per_sec.is_finite()) {
            return Err("connection_rate_per_sec must be a non-negative number".into());
        }
        if self.handshake_queue_wait_ms == 0 {
            return Err("handshake_queue_wait_ms must be positive".into());
        }
        if self.shard.is_empty() && self.config_servers.is_empty() {
            return Err("shard address must be set".into());
        }
        if !self.add_shards.is_empty() && self.config_servers.is_empty() {
            return Err("add_shards needs config_servers (a sharded cluster)".into());
        }
        proto::dial_via::DialVia::parse(&self.dial_via)?;
        let shards = self.shards_to_add()?;
        for (shard, _) in self.zones_to_set()? {
            if !shards.iter().any(|(name, _)| *name == shard) {
                return Err(format!("shard_zones: {shard} is not one of add_shards"));
            }
        }
        crate::auth::nonce::NonceSource::parse(&self.nonce_source)?;
        crate::tls::TlsMode::parse(&self.tls_mode)?;
        if self.admin_user.is_empty() != self.admin_password.is_empty() {
            return Err("admin_user and admin_password must be set together".into());
        }
        Ok(())
    }

    /// `add_shards` as (name, `name/hosts`) pairs, the form `config.shards` stores.
    pub fn shards_to_add(&self) -> Result<Vec<(String, String)>, String> {
        pairs(
            &self.add_shards,
            '/',
            "add_shards",
            "name/host:port,host:port",
        )
        .map(|v| {
            v.into_iter()
                .map(|(name, hosts)| {
                    let host = format!("{name}/{hosts}");
                    (name, host)
                })
                .collect()
        })
    }

    /// `shard_zones` as (shard, zone) pairs.
    pub fn zones_to_set(&self) -> Result<Vec<(String, String)>, String> {
        pairs(&self.shard_zones, '=', "shard_zones", "shard=zone")
    }

    /// `max_concurrent_handshakes`, with 0 meaning 64 per core.
    pub fn handshake_concurrency(&self) -> usize {
        if self.max_concurrent_handshakes > 0 {
            return self.max_concurrent_handshakes;
        }
        64 * std::thread::available_parallelism().map_or(2, |n| n.get())
    }

    /// The configuration as `getCmdLineOpts` shows it: secrets replaced, as mongod does.
    pub fn redacted(&self) -> RouterConfig {
        let hide = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                "<redacted>".into()
            }
        };
        RouterConfig {
            admin_password: hide(&self.admin_password),
            cluster_key: hide(&self.cluster_key),
            ..self.clone()
        }
    }
}

/// A `;`-separated list of `left<sep>right` items, both sides non-empty and trimmed.
fn pairs(
    list: &str,
    sep: char,
    setting: &str,
    form: &str,
) -> Result<Vec<(String, String)>, String> {
    list.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once(sep) {
            Some((l, r)) if !l.trim().is_empty() && !r.trim().is_empty() => {
                Ok((l.trim().to_string(), r.trim().to_string()))
            }
            _ => Err(format!("{setting}: '{s}' is not {form}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_to_add_are_name_slash_hosts_separated_by_semicolons() {
        let mut c = RouterConfig {
            config_servers: "cfg:1".into(),
            add_shards: "shard0/a:1,b:1; shard1/c:1 ;".into(),
            ..Default::default()
        };
        assert_eq!(
            c.shards_to_add().unwrap(),
            vec![
                ("shard0".to_string(), "shard0/a:1,b:1".to_string()),
                ("shard1".to_string(), "shard1/c:1".to_string()),
            ]
        );
        assert!(c.validate().is_ok());
        c.add_shards = "shard0".into();
        assert!(c.validate().is_err());
        c.add_shards = "/a:1".into();
        assert!(c.validate().is_err());
        c.add_shards = "shard0/a:1; shard1/c:1".into();
        c.shard_zones = "shard0=A; shard1 = B".into();
        assert_eq!(
            c.zones_to_set().unwrap(),
            vec![
                ("shard0".to_string(), "A".to_string()),
                ("shard1".to_string(), "B".to_string()),
            ]
        );
        assert!(c.validate().is_ok());
        c.shard_zones = "shard2=C".into();
        assert!(c.validate().is_err(), "a zone for a shard not added");
        c.shard_zones = "shard0".into();
        assert!(c.validate().is_err());
        c.shard_zones = String::new();
        c.add_shards = "shard0/a:1".into();
        c.config_servers = String::new();
        assert!(
            c.validate().is_err(),
            "add_shards without a sharded cluster"
        );
    }

    #[test]
    fn forward_slots_are_bounded() {
        let mut c = RouterConfig {
            forward_slots: 0,
            ..Default::default()
        };
        assert!(c.validate().is_ok(), "0 turns the gate off");
        c.forward_slots = crate::overload::forward_gate::MAX_SLOTS;
        assert!(c.validate().is_ok());
        c.forward_slots = crate::overload::forward_gate::MAX_SLOTS + 1;
        let e = c.validate().unwrap_err();
        assert!(e.contains("forward_slots"), "{e}");
    }
}
