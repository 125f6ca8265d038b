//! What each connection is running, for `currentOp` and `killOp`.
//!
//! A connection runs one command at a time, so the registry holds one slot per
//! connection, registered when it opens. Starting and finishing a command touch only the
//! connection's own slot (an uncontended lock); the shared map, striped by connection id,
//! is locked only when a connection opens or closes and when someone asks.
//!
//! An operation id is the connection id in the high 32 bits and the connection's command
//! count in the low 32, so `killOp` finds the connection without a global counter.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::counters::Striped;

/// The command a connection is running.
pub struct Running {
    pub opid: u64,
    pub name: String,
    pub db: String,
    pub started: Instant,
    pub started_wall: SystemTime,
    /// When it was sent to a shard, and the command as sent (shared, not copied).
    pub forwarded: Option<(Instant, bytes::Bytes)>,
    /// Its wait in the router's line for one of the shard's slots (`forward_gate`).
    pub slot_wait: Option<SlotWait>,
    /// Cancelled by `killOp`.
    pub cancel: CancellationToken,
    /// The user who runs it (with auth on): they may kill it without `killop`.
    pub owner: crate::owner::Owner,
}

/// Where a command stands in the router's line for a shard's slots.
#[derive(Clone, Copy)]
pub enum SlotWait {
    /// In line since then.
    Since(Instant),
    /// Granted after waiting this long.
    Waited(std::time::Duration),
}

/// One connection's slot.
pub struct ConnOps {
    pub conn_id: u64,
    pub peer: String,
    pub opened: SystemTime,
    pub app_name: Mutex<Option<String>>,
    seq: Mutex<u32>,
    pub running: Mutex<Option<Running>>,
}

impl ConnOps {
    /// Marks a command started; returns its id. `cancel` fires if it is killed.
    pub fn begin(
        &self,
        name: &str,
        db: &str,
        cancel: CancellationToken,
        owner: crate::owner::Owner,
    ) -> u64 {
        let seq = {
            let mut s = self.seq.lock();
            *s = s.wrapping_add(1);
            *s
        };
        let opid = (self.conn_id << 32) | u64::from(seq);
        *self.running.lock() = Some(Running {
            opid,
            name: name.to_string(),
            db: db.to_string(),
            started: Instant::now(),
            started_wall: SystemTime::now(),
            forwarded: None,
            slot_wait: None,
            cancel,
            owner,
        });
        opid
    }

    /// The running command was sent to a shard.
    pub fn forwarded(&self, command: bytes::Bytes) {
        if let Some(r) = self.running.lock().as_mut() {
            r.forwarded = Some((Instant::now(), command));
        }
    }

    /// The id of the running command (0 when idle).
    pub fn current_opid(&self) -> u64 {
        self.running.lock().as_ref().map_or(0, |r| r.opid)
    }

    /// The running command joined the line for a shard's slots.
    pub fn in_line(&self) {
        if let Some(r) = self.running.lock().as_mut() {
            r.slot_wait = Some(SlotWait::Since(Instant::now()));
        }
    }

    /// The running command got its slot.
    pub fn granted(&self) {
        if let Some(r) = self.running.lock().as_mut() {
            if let Some(SlotWait::Since(t)) = r.slot_wait {
                r.slot_wait = Some(SlotWait::Waited(t.elapsed()));
            }
        }
    }

    pub fn finish(&self) {
        *self.running.lock() = None;
    }
}

/// Every open connection's slot.
#[derive(Default)]
pub struct CurrentOps {
    stripes: Striped<Mutex<HashMap<u64, Arc<ConnOps>>>>,
}

/// A connection's registration; dropping it (the connection closing) removes the slot.
pub struct Registration {
    ops: Arc<CurrentOps>,
    pub slot: Arc<ConnOps>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.ops
            .stripes
            .of(self.slot.conn_id)
            .lock()
            .remove(&self.slot.conn_id);
    }
}

impl CurrentOps {
    pub fn register(self: &Arc<Self>, conn_id: u64, peer: &str) -> Registration {
        let slot = Arc::new(ConnOps {
            conn_id,
            peer: peer.to_string(),
            opened: SystemTime::now(),
            app_name: Mutex::new(None),
            seq: Mutex::new(0),
            running: Mutex::new(None),
        });
        self.stripes
            .of(conn_id)
            .lock()
            .insert(conn_id, slot.clone());
        Registration {
            ops: self.clone(),
            slot,
        }
    }

    /// Every open connection, by id.
    pub fn connections(&self) -> Vec<Arc<ConnOps>> {
        let mut all: Vec<Arc<ConnOps>> = self
            .stripes
            .all()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect();
        all.sort_by_key(|c| c.conn_id);
        all
    }

    /// Cancels operation `opid` if it is still running; false otherwise.
    pub fn kill(&self, opid: u64) -> bool {
        self.with_running(opid, |r| r.cancel.cancel()).is_some()
    }

    /// Who runs operation `opid`, if it is running.
    pub fn owner_of(&self, opid: u64) -> Option<crate::owner::Owner> {
        self.with_running(opid, |r| r.owner.clone())
    }

    fn with_running<T>(&self, opid: u64, f: impl FnOnce(&Running) -> T) -> Option<T> {
        let conn_id = opid >> 32;
        let conn = self.stripes.of(conn_id).lock().get(&conn_id).cloned()?;
        let running = conn.running.lock();
        running.as_ref().filter(|r| r.opid == opid).map(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_reaches_only_the_operation_it_names() {
        let ops = Arc::new(CurrentOps::default());
        let reg = ops.register(5, "127.0.0.1:9");
        let first = CancellationToken::new();
        let alice = Some(("alice".to_string(), "admin".to_string()));
        let opid = reg.slot.begin("find", "test", first.clone(), alice.clone());
        assert_eq!(ops.owner_of(opid), Some(alice));
        assert_eq!(opid >> 32, 5);
        assert!(!ops.kill(opid + 1), "another id of the same connection");
        assert!(!first.is_cancelled());
        assert!(ops.kill(opid));
        assert!(first.is_cancelled());
        reg.slot.finish();
        assert!(!ops.kill(opid), "a finished operation cannot be killed");
        let second = CancellationToken::new();
        let next = reg.slot.begin("find", "test", second.clone(), None);
        assert_ne!(next, opid);
        assert!(!second.is_cancelled());
        assert_eq!(ops.connections().len(), 1);
        drop(reg);
        assert!(ops.connections().is_empty());
    }
}
