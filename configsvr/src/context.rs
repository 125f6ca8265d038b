//! What the coordinator's work runs with while this member is primary: the cluster as a
//! router sees it (catalog, shards), and the operations this primary runs now.
//!
//! Every migration and `movePrimary` holds a lock in `config.migrations` under an owner
//! id. A lock whose owner is not running here belongs to a coordinator that stopped (a
//! former primary, or a step of this one that failed half way), and is recovered
//! (`migration_recovery.rs`). Nothing expires with time: a primary knows what it runs.

use std::collections::HashSet;
use std::ops::Deref;
use std::sync::Arc;

use bson::oid::ObjectId;
use bson::Bson;
use parking_lot::Mutex;
use router::sharding::Cluster;

pub struct Ctx {
    cluster: Arc<Cluster>,
    running: Arc<Mutex<HashSet<ObjectId>>>,
}

impl Deref for Ctx {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

impl Ctx {
    pub fn new(cluster: Arc<Cluster>) -> Ctx {
        Ctx {
            cluster,
            running: Arc::default(),
        }
    }

    /// A new owner id, running here until the returned guard is dropped (whether the
    /// operation ended, failed or was cancelled by a step-down).
    pub fn run_as(&self) -> Running {
        let owner = ObjectId::new();
        self.running.lock().insert(owner);
        Running {
            owner,
            running: self.running.clone(),
        }
    }

    /// Whether the lock owner `owner` is an operation running on this primary now.
    pub fn is_running(&self, owner: Option<&Bson>) -> bool {
        match owner {
            Some(Bson::ObjectId(id)) => self.running.lock().contains(id),
            _ => false,
        }
    }
}

/// An operation's owner id, registered as running while this lives.
pub struct Running {
    pub owner: ObjectId,
    running: Arc<Mutex<HashSet<ObjectId>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running.lock().remove(&self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_runs_while_its_guard_lives() {
        let running: Arc<Mutex<HashSet<ObjectId>>> = Arc::default();
        let guard = Running {
            owner: ObjectId::new(),
            running: running.clone(),
        };
        running.lock().insert(guard.owner);
        let owner = Bson::ObjectId(guard.owner);
        assert!(running.lock().contains(&guard.owner));
        drop(guard);
        assert!(!running
            .lock()
            .contains(owner.as_object_id().as_ref().unwrap()));
    }
}
