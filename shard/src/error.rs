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
    /// Shown as the system's own message ("Address already in use"), once.
    #[error(transparent)]
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
        // The replication layer's failures are already what the client sees.
        storage::StorageError::Layer(layer) => match layer.downcast::<wire::MongoError>() {
            Ok(e) => *e,
            Err(other) => wire::MongoError::internal(format!("storage error: {other}")),
        },
        // WiredTiger cannot go on after a panic (a failed checkpoint or metadata write):
        // the member has stopped replicating and must be restarted. A retryable
        // shutdown error sends the driver to the new primary.
        storage::StorageError::WiredTiger { code: WT_PANIC, .. } => wire::MongoError::new(
            wire::ErrorCode::ShutdownInProgress,
            format!("{e}: this member's storage failed and it must be restarted"),
        ),
        storage::StorageError::WiredTiger { code: ENOSPC, .. } => {
            wire::MongoError::new(wire::ErrorCode::OutOfDiskSpace, e.to_string())
        }
        storage::StorageError::Io(io) if io.raw_os_error() == Some(ENOSPC) => {
            wire::MongoError::new(wire::ErrorCode::OutOfDiskSpace, io.to_string())
        }
        storage::StorageError::WiredTiger {
            code: WT_ROLLBACK, ..
        } => wire::MongoError::new(wire::ErrorCode::WriteConflict, e.to_string()),
        storage::StorageError::SnapshotTooOld { .. } => {
            wire::MongoError::new(wire::ErrorCode::SnapshotTooOld, e.to_string())
        }
        // A read waited for a prepared transaction until its thread's limit: the
        // operation's deadline (`node::run_in_session`), or storage's default.
        storage::StorageError::PrepareConflict { table } => wire::MongoError::new(
            wire::ErrorCode::MaxTimeMSExpired,
            format!(
                "operation exceeded time limit waiting for a prepared transaction's \
                 commit or abort (table {table})"
            ),
        ),
        e => wire::MongoError::internal(format!("storage error: {e}")),
    }
}

/// WiredTiger's `WT_ROLLBACK`, which reaches a command only once retrying gave up.
const WT_ROLLBACK: i32 = -31800;
/// WiredTiger's `WT_PANIC`.
const WT_PANIC: i32 = -31804;
/// No space left on device (Linux), as WiredTiger and the log report it.
const ENOSPC: i32 = 28;

/// Runs one command, turning a panic inside it (a bug) into that command's
/// `InternalError` reply. Nothing a command holds poisons (the shard's locks are
/// `parking_lot`'s), so the process, the collection and the next command are unaffected.
pub fn contain_panic(
    command: &str,
    f: impl FnOnce() -> wire::MongoResult<bson::Document>,
) -> wire::MongoResult<bson::Document> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string());
        tracing::error!(command, panic = %what, "a command panicked; it fails alone");
        Err(wire::MongoError::internal(format!(
            "command {command} failed with an internal error: {what}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replication_layer_failure_reaches_the_client_as_the_layer_made_it() {
        let layer = wire::MongoError::new(wire::ErrorCode::NotWritablePrimary, "not primary");
        let got = storage_to_mongo(storage::StorageError::Layer(Box::new(layer.clone())));
        assert_eq!(got, layer);
        let other = storage_to_mongo(storage::StorageError::Layer("odd".into()));
        assert_eq!(other.code, wire::ErrorCode::InternalError as i32);
    }

    #[test]
    fn a_failed_disk_is_a_clear_error_and_a_storage_panic_a_retryable_one() {
        use storage::StorageError::{Io, WiredTiger};
        use wire::ErrorCode::{OutOfDiskSpace, ShutdownInProgress};
        let wt = |code: i32| WiredTiger {
            code,
            message: "from WiredTiger".into(),
        };
        for (e, expected) in [
            (wt(ENOSPC), OutOfDiskSpace),
            (
                Io(std::io::Error::from_raw_os_error(ENOSPC)),
                OutOfDiskSpace,
            ),
            (wt(WT_PANIC), ShutdownInProgress),
        ] {
            assert_eq!(storage_to_mongo(e).code, expected as i32);
        }
    }

    #[test]
    fn a_panicking_command_fails_alone_and_poisons_no_lock() {
        let lock = parking_lot::RwLock::new(());
        let reply = contain_panic("update", || {
            let _held = lock.write();
            let s = "é";
            // A byte index inside a character, as a careless slice of client input.
            let cut = s.len() - 1;
            Ok(bson::doc! {"cut": &s[..cut]})
        });
        let e = reply.unwrap_err();
        assert_eq!(e.code, wire::ErrorCode::InternalError as i32);
        assert!(e.message.contains("update"), "{}", e.message);
        // The next command takes the same lock as if nothing had happened.
        let next = contain_panic("insert", || {
            let _held = lock.write();
            Ok(bson::doc! {"n": 1})
        });
        assert_eq!(next.unwrap(), bson::doc! {"n": 1});
    }
}
