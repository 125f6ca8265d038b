//! Internal gRPC API between Bulwark nodes (tonic + prost). Documents stay raw BSON bytes.

pub mod cluster_auth;
pub mod cluster_clock;
pub mod cluster_key;
pub mod cluster_tls;
pub mod dial_via;

pub mod shard {
    tonic::include_proto!("bulwark.shard.v1");
}

pub mod raft {
    tonic::include_proto!("bulwark.raft.v1");
}
