//! The config server: the cluster catalog (shards, databases, collections, chunks, zones)
//! as a Raft-replicated group built on `shard::repl` and `shard::storage`.
//!
//! Skeleton: the catalog arrives with the sharding issue (#4). Until then a cluster has
//! one shard and the router forwards every data command to it.
