//! Commands the runner sends a member itself, over the members' gRPC command service, as
//! a router does (`router::shard_client`), with secondary reads allowed: for the checks
//! that compare members, and for finding each replica set's primary where no router
//! reports it (a sharded cluster's routers answer for the cluster, not for one set).

use std::time::Duration;

use anyhow::Context;
use bson::{doc, Document};
use router::shard_client::{reply_ok, Forward, ShardHandle};

use crate::cluster::Cluster;

/// One member, called directly.
pub struct DirectMember {
    pub host: String,
    handle: ShardHandle,
}

impl DirectMember {
    /// Member `i` of `cluster`; `None` when the runner cannot reach the target's members
    /// (compose: they are on Docker's networks).
    pub fn of<C: Cluster + ?Sized>(cluster: &C, i: usize) -> anyhow::Result<Option<DirectMember>> {
        let Some(addr) = cluster.member_command_addr(i) else {
            return Ok(None);
        };
        let handle = ShardHandle::connect_lazy(&addr, "")
            .and_then(|h| {
                h.with_cluster_key(cluster.cluster_key())
                    .map_err(router::RouterError::Config)
            })
            .map_err(|e| anyhow::anyhow!("connecting to {addr}: {e}"))?;
        Ok(Some(DirectMember {
            host: cluster.member_host(i),
            handle,
        }))
    }

    /// `cmd` on this member, allowed on a secondary, within `limit`.
    pub async fn run(&self, db: &str, cmd: Document, limit: Duration) -> anyhow::Result<Document> {
        let fwd = Forward {
            pin: Some(0),
            ..Default::default()
        };
        let call = self.handle.run(db, &cmd, &fwd, "chaos-check");
        let (reply, _, _) = tokio::time::timeout(limit, call)
            .await
            .with_context(|| format!("{cmd} on {} timed out", self.host))??;
        reply_ok(reply).with_context(|| format!("{cmd} on {}", self.host))
    }

    /// The member's `hello`.
    pub async fn hello(&self, limit: Duration) -> anyhow::Result<Document> {
        self.run("admin", doc! {"hello": 1}, limit).await
    }
}
