//! Whether a member's in-memory catalog reflects every catalog change it has applied.
//!
//! A member applies a committed change to the catalog table on its applier thread and
//! reloads the in-memory catalog on another (the reload takes the catalog's lock, which a
//! command may hold while it waits for that very apply). A new primary may become
//! writable in between: a write then would use metadata without a just-created index, or
//! with a range that has just migrated away. So the applier counts each change before it
//! reports the entry applied, the reload thread counts the changes its reload covers, and
//! a write waits until the two agree.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
pub struct CatalogSync {
    /// Catalog changes applied (counted before the entry is reported applied).
    applied: AtomicU64,
    /// Changes the in-memory catalog reflects.
    loaded: AtomicU64,
    lock: Mutex<()>,
    caught_up: Condvar,
}

impl CatalogSync {
    /// The applier applied a change to the catalog table.
    pub fn changed(&self) {
        self.applied.fetch_add(1, Ordering::SeqCst);
    }

    /// Before a reload: the changes it will cover.
    pub fn reloading(&self) -> u64 {
        self.applied.load(Ordering::SeqCst)
    }

    /// After a reload that began at `covered` (from [`CatalogSync::reloading`]).
    pub fn reloaded(&self, covered: u64) {
        let _held = self.lock.lock();
        self.loaded.fetch_max(covered, Ordering::SeqCst);
        self.caught_up.notify_all();
    }

    /// Waits until the in-memory catalog reflects every change applied so far, at most
    /// `limit`; false if it still does not.
    pub fn wait(&self, limit: Duration) -> bool {
        let behind = || self.loaded.load(Ordering::SeqCst) < self.applied.load(Ordering::SeqCst);
        if !behind() {
            return true;
        }
        let until = Instant::now() + limit;
        let mut held = self.lock.lock();
        while behind() {
            if self.caught_up.wait_until(&mut held, until).timed_out() {
                return !behind();
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waits_for_the_reload_of_every_applied_change() {
        let sync = std::sync::Arc::new(CatalogSync::default());
        assert!(sync.wait(Duration::ZERO));
        sync.changed();
        assert!(!sync.wait(Duration::from_millis(10)), "not reloaded yet");
        let covered = sync.reloading();
        let reloader = {
            let sync = sync.clone();
            std::thread::spawn(move || sync.reloaded(covered))
        };
        assert!(sync.wait(Duration::from_secs(30)));
        reloader.join().unwrap();
        // A reload that began before a later change does not cover it.
        let stale = sync.reloading();
        sync.changed();
        sync.reloaded(stale);
        assert!(!sync.wait(Duration::ZERO));
    }
}
