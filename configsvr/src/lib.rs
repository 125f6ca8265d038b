//! The config server: the cluster catalog (shards, databases, collections, chunks) on a
//! Raft-replicated group. It is a shard replica set in every respect — the same
//! replication, storage and commands — whose data is the `config` database; routers
//! read and write the catalog there with ordinary commands at majority write concern
//! (`router::sharding::catalog`). This crate holds what differs: a config server is
//! always a replica set, and its set is named `config`.

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

/// Runs a config server member until `shutdown`.
pub async fn start(config: shard::ShardConfig, shutdown: CancellationToken) -> Result<(), String> {
    validate(&config)?;
    shard::start(config, shutdown)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_server_is_a_replica_set_named_config() {
        let mut c = shard::ShardConfig::default();
        assert!(validate(&c).is_err());
        let member = shard::repl::MemberConfig {
            id: 1,
            host: "127.0.0.1:1".into(),
            site: "A".into(),
            priority: 1,
            votes: 1,
            arbiter: false,
            dial: None,
        };
        c.replication = Some(shard::repl::ReplConfig::new(
            "shard0",
            1,
            vec![member.clone()],
        ));
        assert!(validate(&c).is_err());
        c.replication = Some(shard::repl::ReplConfig::new(SET_NAME, 1, vec![member]));
        assert!(validate(&c).is_ok());
    }
}
