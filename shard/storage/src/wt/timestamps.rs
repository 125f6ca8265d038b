//! WiredTiger's timestamps: the configuration strings that carry them, and the stable and
//! oldest marks of a connection.
//!
//! Timestamps travel to WiredTiger as hex in configuration strings. Those strings are
//! built in a buffer on the stack, because a timestamped commit is on every replicated
//! write's path.

use std::ffi::CStr;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::ffi::Connection;
use super::wt_error;
use crate::{Result, StorageError, Timestamp};

/// `key=hex[,key=hex]` and a NUL: long enough for two 20-character keys and two 64-bit
/// timestamps.
pub(super) struct TsConfig {
    buf: [u8; 96],
}

impl TsConfig {
    /// One `key=hex` per pair.
    pub(super) fn new(pairs: &[(&str, Timestamp)]) -> TsConfig {
        let mut buf = [0u8; 96];
        let mut w = &mut buf[..95];
        for (i, (key, ts)) in pairs.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            // The keys are this module's constants, so the text always fits.
            write!(w, "{sep}{key}={ts:x}").expect("timestamp config fits its buffer");
        }
        TsConfig { buf }
    }

    pub(super) fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).expect("the buffer ends with a NUL")
    }
}

/// The connection's stable and oldest timestamps as last set. WiredTiger ignores a mark
/// moved backwards only when the other is not set with it, so the marks are kept here and
/// every call moves each of them forward or leaves it.
pub(super) struct Marks {
    stable: AtomicU64,
    oldest: AtomicU64,
    /// Orders concurrent callers, so a later call never sets older marks than an earlier.
    set: Mutex<()>,
}

impl Marks {
    /// The marks WiredTiger recovered (a checkpoint's stable timestamp), or none.
    pub(super) fn recovered(conn: &Connection) -> Marks {
        let get = |which| conn.query_timestamp(which).unwrap_or(0);
        Marks {
            stable: AtomicU64::new(get("stable")),
            oldest: AtomicU64::new(get("oldest")),
            set: Mutex::new(()),
        }
    }

    pub(super) fn oldest(&self) -> Timestamp {
        self.oldest.load(Ordering::Acquire)
    }

    pub(super) fn stable(&self) -> Timestamp {
        self.stable.load(Ordering::Acquire)
    }

    /// Moves stable to `stable` and oldest to `oldest` where that is forward, keeping
    /// oldest at or behind stable.
    pub(super) fn advance(
        &self,
        conn: &Connection,
        stable: Timestamp,
        oldest: Timestamp,
    ) -> Result<()> {
        let _order = self.set.lock();
        let current = (self.stable.load(Ordering::Acquire), self.oldest());
        let stable = stable.max(current.0);
        let oldest = oldest.min(stable).max(current.1);
        if (stable, oldest) == current {
            return Ok(());
        }
        let config = TsConfig::new(&[("oldest_timestamp", oldest), ("stable_timestamp", stable)]);
        conn.set_timestamp(config.as_cstr())
            .map_err(|c| wt_error(c, "set_timestamp"))?;
        self.stable.store(stable, Ordering::Release);
        self.oldest.store(oldest, Ordering::Release);
        Ok(())
    }

    /// Refuses a read older than the oldest timestamp before WiredTiger sees it.
    pub(super) fn check_read(&self, at: Timestamp) -> Result<()> {
        let oldest = self.oldest();
        if at < oldest {
            return Err(StorageError::SnapshotTooOld { read: at, oldest });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_carry_timestamps_in_hex() {
        let c = TsConfig::new(&[("commit_timestamp", 0x1a2b)]);
        assert_eq!(c.as_cstr().to_str().unwrap(), "commit_timestamp=1a2b");
        let c = TsConfig::new(&[("oldest_timestamp", 1), ("stable_timestamp", u64::MAX)]);
        assert_eq!(
            c.as_cstr().to_str().unwrap(),
            "oldest_timestamp=1,stable_timestamp=ffffffffffffffff"
        );
    }
}
