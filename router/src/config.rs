//! Router configuration (`bulwark router --config FILE`, `BULWARK_*` overrides).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// Address clients connect to.
    pub listen: String,
    /// gRPC address of the shard node, or its replica set's members (host:port,...).
    pub shard: String,
    /// `net.maxIncomingConnections`: connections beyond this are closed at once.
    pub max_connections: usize,
    /// Commands slower than this are logged with their timings.
    pub slow_ms: u64,
    /// The site this router runs in: reads that may go to a secondary prefer members
    /// tagged with it.
    pub site: String,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            listen: "127.0.0.1:27017".into(),
            shard: "127.0.0.1:27100".into(),
            max_connections: 20_000,
            slow_ms: 100,
            site: String::new(),
        }
    }
}

impl RouterConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("max_connections must be positive".into());
        }
        if self.shard.is_empty() {
            return Err("shard address must be set".into());
        }
        Ok(())
    }
}
