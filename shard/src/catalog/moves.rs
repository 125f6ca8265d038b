//! The donor's side of a migration: which documents changed while a range was copied.
//!
//! A migration copies a range's documents to the recipient while writes go on. Every
//! write to the collection records the `_id` it touched here once it has committed, and
//! the router drains the ids and sends the recipient those documents as they are now
//! (or their deletion), until the critical section stops writes and a last drain leaves
//! nothing behind. Writes check one flag when no migration runs; the flag lives in the
//! collection's metadata, so there is no shared map to look up on the write path.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bson::Bson;

#[derive(Debug, Default)]
pub struct MoveLog {
    active: AtomicBool,
    ids: Mutex<Vec<Bson>>,
}

impl MoveLog {
    /// Starts recording (a migration out of this collection begins).
    pub fn start(&self) {
        let mut ids = self.ids.lock();
        ids.clear();
        self.active.store(true, Ordering::SeqCst);
    }

    /// Stops recording and forgets what was recorded.
    pub fn stop(&self) {
        self.active.store(false, Ordering::SeqCst);
        self.ids.lock().clear();
    }

    /// Notes a committed write to the document with `_id` `id`.
    pub fn record(&self, id: &Bson) {
        // Relaxed: the flag is written only when a migration starts or ends.
        if self.active.load(Ordering::Relaxed) {
            self.ids.lock().push(id.clone());
        }
    }

    /// Up to `limit` ids recorded since the last drain (each once; the rest stay for the
    /// next), or `None` when not recording (this member was not primary when the
    /// migration started, or it ended).
    pub fn drain(&self, limit: usize) -> Option<Vec<Bson>> {
        if !self.active.load(Ordering::SeqCst) {
            return None;
        }
        let mut ids = self.ids.lock();
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(crate::catalog::keys::id_key(id)));
        let at = limit.min(ids.len());
        let rest = ids.split_off(at);
        Some(std::mem::replace(&mut *ids, rest))
    }

    /// Ids recorded and not yet drained.
    pub fn pending(&self) -> usize {
        self.ids.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_while_active_and_drains_each_id_once() {
        let log = MoveLog::default();
        log.record(&Bson::Int32(1));
        assert_eq!(log.drain(10), None);
        log.start();
        log.record(&Bson::Int32(1));
        log.record(&Bson::Int32(2));
        log.record(&Bson::Int32(1));
        log.record(&Bson::Int32(3));
        assert_eq!(log.drain(2), Some(vec![Bson::Int32(1), Bson::Int32(2)]));
        assert_eq!(log.pending(), 1);
        assert_eq!(log.drain(10), Some(vec![Bson::Int32(3)]));
        assert_eq!(log.drain(10), Some(vec![]));
        log.stop();
        log.record(&Bson::Int32(4));
        assert_eq!(log.drain(10), None);
    }
}
