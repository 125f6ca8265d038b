//! The shard crate's one error enum, for failures outside a command (startup, transport).
//! Command failures are `wire::MongoError`, which become `{ok: 0}` replies.

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("storage: {0}")]
    Storage(#[from] storage::StorageError),
    #[error("catalog: {0}")]
    Catalog(String),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Storage failures inside a command become InternalError replies; duplicate keys are
/// handled where the index is known (see `write_path`).
/// A document that does not encode or decode as BSON: `InvalidBSON` (22).
pub fn invalid_bson(e: impl std::fmt::Display) -> wire::MongoError {
    wire::MongoError::new(wire::ErrorCode::InvalidBSON, e.to_string())
}

pub fn storage_to_mongo(e: storage::StorageError) -> wire::MongoError {
    match e {
        storage::StorageError::Replication {
            code,
            name,
            message,
        } => wire::MongoError {
            code,
            code_name: name.into(),
            message,
            extra: None,
        },
        e => wire::MongoError::internal(format!("storage error: {e}")),
    }
}
