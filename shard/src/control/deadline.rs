//! When an operation must stop: its `maxTimeMS`, and (through `ops`) `killOp` or a caller
//! that went away. Every check is also a point where a long read yields its ticket.

use std::time::{Duration, Instant};

use wire::{ErrorCode, MongoError, MongoResult};

/// When an operation must stop (from `maxTimeMS`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Deadline(pub Option<Instant>);

impl Deadline {
    /// How long until the deadline, if there is one.
    pub fn remaining(&self) -> Option<Duration> {
        self.0.map(|t| t.saturating_duration_since(Instant::now()))
    }

    pub fn after_ms(ms: u64) -> Deadline {
        if ms == 0 {
            Deadline(None)
        } else {
            Deadline(Some(Instant::now() + Duration::from_millis(ms)))
        }
    }

    /// Fails once the deadline has passed, or once the thread's current operation was
    /// told to stop (`killOp`, caller gone): every deadline check is a kill point, and a
    /// yield point where a long read lets queued reads go first (`ops::yield_point`).
    pub fn check(&self) -> MongoResult<()> {
        self.check_holding()?;
        crate::control::ops::yield_point()
    }

    /// [`Deadline::check`] without yielding the ticket (`sleep` models a command that
    /// holds its ticket throughout).
    pub fn check_holding(&self) -> MongoResult<()> {
        crate::control::ops::check_interrupted()?;
        match self.0 {
            Some(t) if Instant::now() >= t => Err(MongoError::new(
                ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit",
            )),
            _ => Ok(()),
        }
    }
}
