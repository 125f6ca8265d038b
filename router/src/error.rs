//! The router crate's one error enum (startup and transport); command failures are
//! `wire::MongoError`.

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("invalid shard address '{0}'")]
    ShardAddress(String),
    #[error("config: {0}")]
    Config(String),
    #[error("tls: {0}")]
    Tls(String),
}
