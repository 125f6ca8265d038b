//! The config server: the cluster catalog (shards, databases, collections, chunks) on a
//! Raft-replicated group, and the coordinator that changes it. A member is a shard replica
//! set member in every respect (the same replication, storage and commands) whose data
//! is the `config` database; routers read the catalog there with ordinary commands
//! (`router::sharding::catalog`). What differs: a config server is always a replica set
//! named `config`, and its primary runs the coordinator (`coordinator.rs`): DDL that
//! spans shards, migrations, `movePrimary`, the balancer, and the recovery of anything
//! left half done.

pub mod balance_policy;
pub mod balancer;
pub mod context;
pub mod coordinator;
pub mod drop_collection;
pub mod drop_database;
pub mod locks;
pub mod migrate;
pub mod migration_recovery;
pub mod move_primary;
pub mod move_recovery;
pub mod prepared_recovery;
pub mod requests;
pub mod shard_collection;
pub mod shard_ddl;
pub mod sweeper;
pub mod term;
pub mod zones;

use std::sync::Arc;
use std::time::Duration;

use router::sharding::Cluster;
use tokio_util::sync::CancellationToken;

/// The replica set name every config server member must use.
pub const SET_NAME: &str = "config";

/// Checks that `config` describes a config server member.
pub fn validate(config: &shard::ShardConfig) -> Result<(), String> {
    config.validate()?;
    match &config.replication {
        None => Err("a config server must be a replica set member: set [replication]".into()),
        Some(r) if r.set_name != SET_NAME => Err(format!(
            "a config server's replica set must be named '{SET_NAME}', not '{}'",
            r.set_name
        )),
        Some(_) => Ok(()),
    }
}

/// Runs a config server member, and its coordinator while it is primary, until
/// `shutdown`.
pub async fn start(config: shard::ShardConfig, shutdown: CancellationToken) -> Result<(), String> {
    validate(&config)?;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("binding {}: {e}", config.listen))?;
    tracing::info!(addr = %config.listen, "config server listening");
    let member = shard::service::open_member(&config, listener)
        .await
        .map_err(|e| e.to_string())?;
    let cluster = Arc::new(cluster_of(&config, shutdown.clone())?);
    let settings = term::Settings::new(Duration::from_millis(config.balancer_interval_ms));
    let coordinating = tokio::spawn(coordinator::run(
        member.node.clone(),
        cluster,
        settings,
        shutdown.clone(),
    ));
    shutdown.cancelled().await;
    let _ = coordinating.await;
    member.shutdown.cancel();
    member
        .task
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// How the coordinator of member `config` reaches the catalog (its own replica set) and
/// the shards: as a router does, with the member's cluster key and certificates.
pub fn cluster_of(
    config: &shard::ShardConfig,
    shutdown: CancellationToken,
) -> Result<Cluster, String> {
    let repl = config
        .replication
        .as_ref()
        .ok_or("a config server must be a replica set member: set [replication]")?;
    let auth = config.cluster_auth()?;
    let hosts: Vec<&str> = repl
        .members
        .iter()
        .filter(|m| !m.arbiter)
        .map(|m| m.host.as_str())
        .collect();
    let site = repl
        .members
        .iter()
        .find(|m| m.id == repl.me)
        .map(|m| m.site.clone())
        .unwrap_or_default();
    let dial_via = proto::dial_via::DialVia::parse(&config.dial_via)?;
    let links = router::sharding::grpc_links(auth.tls.clone(), dial_via);
    let catalog = router::sharding::replica_set_of(&hosts.join(","), &links, &site)
        .map_err(|e| e.to_string())?
        .with_cluster_key(auth.sent_key())?;
    Ok(Cluster::new(
        catalog,
        links,
        &site,
        auth.sent_key(),
        shutdown,
    ))
}
