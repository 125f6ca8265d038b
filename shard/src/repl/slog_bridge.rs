//! raft-rs logs through `slog`; this drain forwards its records into `tracing` so a
//! member's Raft events appear in the same stream as everything else.

use slog::{Drain, Level, OwnedKVList, Record};

pub struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, _values: &OwnedKVList) -> Result<(), slog::Never> {
        let msg = record.msg();
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{msg}"),
            Level::Warning => tracing::warn!(target: "raft", "{msg}"),
            Level::Info => tracing::debug!(target: "raft", "{msg}"),
            Level::Debug | Level::Trace => tracing::trace!(target: "raft", "{msg}"),
        }
        Ok(())
    }
}

pub fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}
