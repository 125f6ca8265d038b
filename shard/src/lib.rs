//! A Bulwark shard node: runs MongoDB commands against an embedded storage engine
//! (WiredTiger, or memory for tests) and serves them to routers over gRPC.

pub mod catalog;
pub mod change_stream;
pub mod commands;
pub mod config;
pub mod control;
pub mod error;
pub mod execution;
pub mod migrations;
pub mod node;
pub mod repl;
pub mod service;
pub mod sessions;
pub mod ttl;

pub use config::ShardConfig;
pub use error::ShardError;
pub use node::{EngineKind, Node};
pub use service::{serve, serve_with_auth, start};

/// The MongoDB server version Bulwark presents (wire version 21 = MongoDB 7.0).
pub const VERSION: &str = "7.0.0";
