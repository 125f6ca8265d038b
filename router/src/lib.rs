//! The Bulwark router: speaks the MongoDB wire protocol to clients and forwards commands
//! to shards over gRPC. It holds no data; everything it keeps is per connection or a
//! cache that can be rebuilt.

pub mod audit;
pub mod auth;
pub mod cert_subject;
pub mod cluster_time;
pub mod commands;
pub mod config;
pub mod conn;
pub mod context;
pub mod counters;
pub mod current_ops;
pub mod cursors;
pub mod deadline;
pub mod error;
pub mod error_labels;
pub mod fail_point;
pub mod listener;
pub mod log_buffer;
pub mod overload;
pub mod owner;
pub mod read_preference;
pub mod session_cache;
pub mod shard_client;
pub mod sharding;
pub mod staleness;
pub mod tls;
pub mod transactions;
pub mod two_phase_commit;
pub mod wait_histograms;

pub use config::RouterConfig;
pub use error::RouterError;
pub use listener::{serve, serve_cluster, serve_with, start};

/// The MongoDB version and wire version Bulwark presents (7.0 → wire version 21).
pub const VERSION: &str = "7.0.0";
pub const MAX_WIRE_VERSION: i32 = 21;
