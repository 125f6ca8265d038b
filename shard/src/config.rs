//! Shard configuration (`bulwark shard --config FILE`, `BULWARK_*` overrides).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::node::EngineKind;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShardConfig {
    /// gRPC address routers connect to.
    pub listen: String,
    /// Data directory (WiredTiger home).
    pub dir: PathBuf,
    /// `wiredtiger` or `memory` (tests only; nothing survives a restart).
    pub engine: String,
    /// WiredTiger cache size in MiB.
    pub cache_mb: usize,
    /// Idle cursors are closed after this long (MongoDB's cursorTimeoutMillis default).
    pub cursor_timeout_secs: u64,
    /// How often the TTL monitor deletes expired documents (MongoDB: 60 s).
    pub ttl_interval_secs: u64,
    /// Replica-set membership; without it the node runs alone, unreplicated.
    pub replication: Option<crate::repl::ReplConfig>,
    /// The cluster runs with access control: this member refuses to start without
    /// internal authentication (a cluster key), since its port would otherwise take
    /// commands and Raft messages from anyone who reaches it.
    pub auth: bool,
    /// Shared secret routers must send with every call (empty: none required).
    pub cluster_key: String,
    /// A file holding the cluster key (used when `cluster_key` is empty).
    pub cluster_key_file: String,
    /// Mutual TLS with routers and the other members (`proto::cluster_tls`): this node's
    /// PEM certificate (with `bulwark-member` as a subject alternative name) and key, and
    /// the CA every peer's certificate must chain to. All three or none.
    pub tls_cluster_cert: String,
    pub tls_cluster_key: String,
    pub tls_cluster_ca: String,
    /// Commands that may run at once, by kind (0 = automatic: reads one per core, writes
    /// 128, since a write holds its ticket through replication). Others queue first
    /// come, first served.
    pub read_tickets: usize,
    pub write_tickets: usize,
    /// Bounds of the automatic read ticket count, which follows measured throughput
    /// (`read_tickets = 0`; 0 here = 1 and 4 per core).
    pub read_tickets_min: usize,
    pub read_tickets_max: usize,
    /// Ticket queues and shedding. Off, every command runs at once, however many (no
    /// queue, nothing shed); only for measuring what admission buys (`bulwark chaos
    /// overload`).
    pub admission_control: bool,
    /// Config servers only: the pause between balancer rounds (`configsvr::balancer`).
    pub balancer_interval_ms: u64,
    /// Config servers only: members reached at another address than the one the catalog
    /// names (`host:port=addr:port,...`; `proto::dial_via`), as a router's `dial_via`.
    pub dial_via: String,
}

/// The balancer's default pause between rounds.
pub const DEFAULT_BALANCER_INTERVAL_MS: u64 = 10_000;

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            listen: "127.0.0.1:27100".into(),
            dir: PathBuf::from("./bulwark-data/shard"),
            engine: "wiredtiger".into(),
            cache_mb: 512,
            cursor_timeout_secs: 600,
            ttl_interval_secs: 60,
            replication: None,
            auth: false,
            cluster_key: String::new(),
            cluster_key_file: String::new(),
            tls_cluster_cert: String::new(),
            tls_cluster_key: String::new(),
            tls_cluster_ca: String::new(),
            read_tickets: 0,
            write_tickets: 0,
            read_tickets_min: 0,
            read_tickets_max: 0,
            admission_control: true,
            balancer_interval_ms: DEFAULT_BALANCER_INTERVAL_MS,
            dial_via: String::new(),
        }
    }
}

impl ShardConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.engine_kind()?;
        if self.ttl_interval_secs == 0 || self.cursor_timeout_secs == 0 {
            return Err("ttl_interval_secs and cursor_timeout_secs must be positive".into());
        }
        if let Some(r) = &self.replication {
            r.validate()?;
            if self.engine != "wiredtiger" {
                return Err("replica-set members run on wiredtiger".into());
            }
        }
        let config_server = self
            .replication
            .as_ref()
            .is_some_and(|r| r.set_name == "config");
        if self.balancer_interval_ms == 0 {
            return Err("balancer_interval_ms must be positive".into());
        }
        if !config_server && self.balancer_interval_ms != DEFAULT_BALANCER_INTERVAL_MS {
            return Err(
                "balancer_interval_ms applies to config servers only (replica set 'config')".into(),
            );
        }
        proto::dial_via::DialVia::parse(&self.dial_via)?;
        if !config_server && !self.dial_via.is_empty() {
            return Err("dial_via applies to config servers only (replica set 'config')".into());
        }
        if self.cache_mb < 16 {
            return Err("cache_mb must be at least 16".into());
        }
        if self.auth && !self.cluster_auth()?.is_set() {
            return Err(
                "auth = true needs internal authentication: set cluster_key or \
                 cluster_key_file (routers and the other members need the same key), or \
                 the tls_cluster_* certificates"
                    .into(),
            );
        }
        Ok(())
    }

    /// How this node authenticates to routers and the other members, and they to it.
    pub fn cluster_auth(&self) -> Result<proto::cluster_auth::ClusterAuth, String> {
        let tls = [
            &*self.tls_cluster_cert,
            &self.tls_cluster_key,
            &self.tls_cluster_ca,
        ];
        proto::cluster_auth::ClusterAuth::load(&self.cluster_key, &self.cluster_key_file, tls)
    }

    pub fn engine_kind(&self) -> Result<EngineKind, String> {
        match self.engine.as_str() {
            "wiredtiger" => Ok(EngineKind::WiredTiger {
                dir: self.dir.clone(),
                cache_mb: self.cache_mb,
            }),
            "memory" => Ok(EngineKind::Memory),
            other => Err(format!(
                "unknown engine '{other}' (expected wiredtiger or memory)"
            )),
        }
    }

    pub fn cursor_timeout(&self) -> Duration {
        Duration::from_secs(self.cursor_timeout_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_with_auth_needs_a_cluster_key() {
        let mut c = ShardConfig {
            auth: true,
            engine: "memory".into(),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("cluster_key"));
        c.cluster_key = "k".repeat(32);
        c.validate().unwrap();
    }
}
