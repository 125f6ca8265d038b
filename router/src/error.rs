//! The router crate's one error enum (startup and transport); command failures are
//! `wire::MongoError`.

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// Shown as the system's own message ("Address already in use"), once.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("invalid shard address '{0}'")]
    ShardAddress(String),
    #[error("config: {0}")]
    Config(String),
    #[error("tls: {0}")]
    Tls(String),
}
