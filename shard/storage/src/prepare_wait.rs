//! Reads that meet a prepared transaction wait for it to commit or abort.
//!
//! A read that reaches a key a prepared transaction writes cannot know which version to
//! return until the transaction is resolved (WiredTiger answers WT_PREPARE_CONFLICT), so
//! it waits and reads again, as MongoDB's reads do. Resolutions wake every waiter in the
//! process; a waiter whose key is still prepared waits again. A read waits at most until
//! the limit its thread set ([`with_wait_limit`], a command's deadline), or
//! [`DEFAULT_LIMIT`], and then fails with the conflict.
//!
//! Only readers wait. The applier never reads a prepared key: the primary proposes no
//! write to one (`shard::repl::prepared`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::{Result, StorageError};

/// How long a read waits for a prepared transaction when its thread set no limit.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(60);
/// A waiter looks again this often even without a wake-up (another engine's resolution
/// in the same process wakes it too, so this only bounds a missed one).
const RECHECK: Duration = Duration::from_millis(100);

/// How a waiting read blocks its thread, if the process says (`set_blocker`).
static BLOCKER: OnceLock<fn(&mut dyn FnMut())> = OnceLock::new();

/// Resolutions so far: every read loads it (no write, so no shared line bounces), and
/// waits only if none came since.
static RESOLUTIONS: AtomicU64 = AtomicU64::new(0);
static WAITING: Mutex<()> = Mutex::new(());
static RESOLVED: Condvar = Condvar::new();

thread_local! {
    static LIMIT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with reads on this thread waiting for prepared transactions until `until` at
/// most.
pub fn with_wait_limit<R>(until: Instant, f: impl FnOnce() -> R) -> R {
    let _limit = limit_until(Some(until));
    f()
}

/// Makes reads on this thread wait for prepared transactions until `until` at most
/// (`None`: [`DEFAULT_LIMIT`]) while the returned guard lives.
pub fn limit_until(until: Option<Instant>) -> LimitGuard {
    LimitGuard(LIMIT.with(|l| l.replace(until)))
}

/// Puts the thread's former limit back when dropped (however the caller ends).
pub struct LimitGuard(Option<Instant>);

impl Drop for LimitGuard {
    fn drop(&mut self) {
        LIMIT.with(|l| l.set(self.0));
    }
}

/// Sets how a waiting read blocks its thread: a server whose point reads run on async
/// runtime workers hands the worker's other tasks over first (a blocked worker would hold
/// them, the resolution's among them, until the wait ends). Set once per process.
pub fn set_blocker(blocker: fn(&mut dyn FnMut())) {
    let _ = BLOCKER.set(blocker);
}

/// Until when this thread waits for a prepared transaction that starts waiting now.
pub fn limit() -> Instant {
    LIMIT
        .with(Cell::get)
        .unwrap_or_else(|| Instant::now() + DEFAULT_LIMIT)
}

/// A prepared transaction was committed or aborted: waiting reads try again.
pub(crate) fn resolved() {
    let _held = WAITING.lock();
    RESOLUTIONS.fetch_add(1, Ordering::AcqRel);
    RESOLVED.notify_all();
}

/// Runs `read` again after each resolution while it meets a prepared transaction, until
/// the thread's limit.
pub(crate) fn waiting<R>(mut read: impl FnMut() -> Result<R>) -> Result<R> {
    let mut until = None;
    loop {
        let seen = RESOLUTIONS.load(Ordering::Acquire);
        match read() {
            Err(StorageError::PrepareConflict { table }) => {
                let until = *until.get_or_insert_with(limit);
                let now = Instant::now();
                if now >= until {
                    return Err(StorageError::PrepareConflict { table });
                }
                let mut wait = || {
                    let mut held = WAITING.lock();
                    if RESOLUTIONS.load(Ordering::Acquire) == seen {
                        let _ = RESOLVED.wait_until(&mut held, until.min(now + RECHECK));
                    }
                };
                match BLOCKER.get() {
                    Some(block) => block(&mut wait),
                    None => wait(),
                }
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_waits_for_a_resolution_and_gives_up_at_its_limit() {
        let mut tries = 0;
        let started = Instant::now();
        let r: Result<()> = with_wait_limit(started + Duration::from_millis(250), || {
            waiting(|| {
                tries += 1;
                Err(StorageError::PrepareConflict { table: "t".into() })
            })
        });
        assert!(matches!(r, Err(StorageError::PrepareConflict { .. })));
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert!(tries >= 2, "read again after each recheck: {tries}");

        let waker = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            resolved();
        });
        let mut first = true;
        let r = waiting(|| {
            if std::mem::take(&mut first) {
                Err(StorageError::PrepareConflict { table: "t".into() })
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.unwrap(), 7);
        waker.join().unwrap();
    }
}
