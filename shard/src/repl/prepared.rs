//! Transactions prepared on this member for a two-phase commit across shards.
//!
//! A participant's `prepareTransaction` replicates a Prepare entry. Every member applies
//! it into a WiredTiger transaction prepared at the entry's time and left open
//! (`Engine::prepare`), and keeps here which transaction holds which keys until a
//! CommitPrepared or AbortPrepared entry resolves it. Prepared transactions survive a
//! change of primary (every member holds them) and a restart: the Prepare entry also
//! writes the transaction's ops to the `_prepared` table, from which a starting member
//! prepares them again before it replays its log ([`recover`]).
//!
//! A prepared key must not be written until its transaction is resolved: WiredTiger
//! refuses the write (WT_ROLLBACK) for as long as the transaction stays prepared, and the
//! applier would wait behind its own log for a resolution that comes later in that log.
//! So the primary checks every proposal against the keys held here before it hands it to
//! the Raft thread ([`Prepared::admit`]): one that writes a prepared key, or drops a
//! table that holds one, waits for the resolution (`Replica::replicate_bytes`). A primary
//! holds a Prepare's keys from the moment it hands the Prepare over, under the same lock,
//! and the Raft thread proposes in the order it is handed entries, so no write proposed
//! after a Prepare can slip past it.
//! Readers wait in storage (`storage::prepare_wait`).

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use storage::{Engine, KeyRange, PreparedId, StorageError, Timestamp, WriteBatch, WriteOpRef};

use super::entry::{put_ops, OplogEntryRef, Reader, TxnName};
use super::ProposeError;

/// Transactions one member holds prepared at most: each holds a WiredTiger session
/// (`session_max` is 1024) until it is resolved. A Prepare beyond waits for one to end.
pub const MAX_PREPARED: usize = 500;

/// Table holding each prepared transaction's ops and prepare time, by session key.
pub const PREPARED_TABLE: &str = "_prepared";

/// `propose`'s result and the session of a Prepare handed over, or why the entry was not
/// handed over, with the entry.
pub type Admitted<R> = Result<(R, Option<Vec<u8>>), (ProposeError, Vec<u8>)>;

/// A prepared transaction as this member holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub number: i64,
    /// The shard whose commit decides this transaction's fate.
    pub coordinator: String,
    /// The storage transaction (`Engine::prepare`); `None` while only proposed.
    pub id: Option<PreparedId>,
    /// The prepare time (the Prepare entry's time); 0 while only proposed.
    pub at: Timestamp,
    /// When this member came to hold it.
    pub since: Instant,
    keys: Vec<(String, Vec<u8>)>,
}

#[derive(Default)]
pub struct Prepared {
    state: Mutex<State>,
    resolved: Condvar,
}

#[derive(Default)]
struct State {
    /// By session key.
    txns: HashMap<Vec<u8>, Held>,
    /// Every held key, by table, with its transaction's session key.
    keys: HashMap<String, HashMap<Vec<u8>, Vec<u8>>>,
    next_id: PreparedId,
}

impl State {
    fn add(&mut self, session: &[u8], held: Held) {
        for (table, key) in &held.keys {
            self.keys
                .entry(table.clone())
                .or_default()
                .insert(key.clone(), session.to_vec());
        }
        self.txns.insert(session.to_vec(), held);
    }

    fn remove(&mut self, session: &[u8]) -> Option<Held> {
        let held = self.txns.remove(session)?;
        for (table, key) in &held.keys {
            if let Some(keys) = self.keys.get_mut(table) {
                keys.remove(key);
                if keys.is_empty() {
                    self.keys.remove(table);
                }
            }
        }
        Some(held)
    }

    fn holder(&self, table: &str, key: &[u8]) -> Option<&Vec<u8>> {
        self.keys.get(table)?.get(key)
    }
}

impl Prepared {
    /// Runs `propose` on the entry `data` (handing it to the Raft thread) if it may be
    /// proposed now, holding a Prepare's keys from then on (its session key is returned
    /// with `propose`'s result); otherwise gives `data` back with
    /// `ProposeError::PrepareConflict`.
    /// `parted`: the writes of the entry's transaction that earlier entries carried
    /// (`txn_parts`), which it applies with its own.
    pub fn admit<R>(
        &self,
        data: Vec<u8>,
        parted: &[WriteOpRef<'_>],
        propose: impl FnOnce(Vec<u8>) -> R,
    ) -> Admitted<R> {
        let mut state = self.state.lock();
        match Self::check(&mut state, &data, parted) {
            Ok(admitted) => Ok((propose(data), admitted)),
            Err(e) => Err((e, data)),
        }
    }

    fn check(
        state: &mut State,
        data: &[u8],
        parted: &[WriteOpRef<'_>],
    ) -> Result<Option<Vec<u8>>, ProposeError> {
        if state.keys.is_empty() && data.first() != Some(&super::entry::PREPARE) {
            return Ok(None);
        }
        let conflict = |table: &str| Err(ProposeError::PrepareConflict(table.to_string()));
        match OplogEntryRef::decode(data) {
            Some(OplogEntryRef::Write(ops)) if !state.keys.is_empty() => {
                match ops
                    .iter()
                    .chain(parted)
                    .find(|o| state.holder(o.table(), o.key()).is_some())
                {
                    Some(op) => conflict(op.table()),
                    None => Ok(None),
                }
            }
            Some(OplogEntryRef::DropTable(t)) if state.keys.contains_key(t) => conflict(t),
            Some(OplogEntryRef::Prepare { .. }) if state.txns.len() >= MAX_PREPARED => {
                conflict("(too many prepared transactions on this shard)")
            }
            Some(OplogEntryRef::Prepare { txn, mut ops, .. }) => {
                ops.extend_from_slice(parted);
                let taken = |o: &&WriteOpRef<'_>| {
                    state
                        .holder(o.table(), o.key())
                        .is_some_and(|s| *s != txn.session)
                };
                if let Some(op) = ops.iter().find(taken) {
                    return conflict(op.table());
                }
                let held = Held {
                    number: txn.number,
                    coordinator: String::new(),
                    id: None,
                    at: 0,
                    since: Instant::now(),
                    keys: slots(&ops),
                };
                state.add(&txn.session, held);
                Ok(Some(txn.session))
            }
            _ => Ok(None),
        }
    }

    /// A Prepare [`Prepared::admit`] let through was not proposed after all.
    pub fn withdraw(&self, session: &[u8]) {
        let mut state = self.state.lock();
        if state.txns.get(session).is_some_and(|h| h.id.is_none()) {
            state.remove(session);
        }
    }

    /// The proposals of a term this member no longer leads may never apply: their keys are
    /// held again if they do.
    pub fn forget_proposed(&self) {
        let mut state = self.state.lock();
        let proposed: Vec<Vec<u8>> = state
            .txns
            .iter()
            .filter(|(_, h)| h.id.is_none())
            .map(|(s, _)| s.clone())
            .collect();
        for s in proposed {
            state.remove(&s);
        }
        drop(state);
        self.resolved.notify_all();
    }

    /// The prepared transaction of session `session`, if one is held.
    pub fn get(&self, session: &[u8]) -> Option<Held> {
        self.state.lock().txns.get(session).cloned()
    }

    /// Every applied prepared transaction, by session key.
    pub fn list(&self) -> Vec<(Vec<u8>, Held)> {
        let state = self.state.lock();
        state
            .txns
            .iter()
            .filter(|(_, h)| h.id.is_some())
            .map(|(s, h)| (s.clone(), h.clone()))
            .collect()
    }

    /// Whether a prepared transaction holds a key of one of `tables`.
    pub fn holds_any(&self, tables: &[&str]) -> bool {
        let state = self.state.lock();
        tables.iter().any(|t| state.keys.contains_key(*t))
    }

    /// Waits until a prepared transaction is resolved, or `until`.
    /// Waits, up to `until`, until `session` holds no prepared transaction; whether it
    /// holds none. A router cut off mid-commit leaves its transaction prepared until the
    /// config servers resolve it, while the client's driver hands the session to its next
    /// operation: that operation waits for the resolution as a reader of a prepared key
    /// does, rather than fail at once.
    pub fn await_session(&self, session: &[u8], until: Instant) -> bool {
        loop {
            if self.get(session).is_none() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            let wake = (Instant::now() + super::PREPARED_RECHECK).min(until);
            crate::control::ops::blocking_wait(|| self.wait_any_resolution(wake));
        }
    }

    pub fn wait_any_resolution(&self, until: Instant) {
        let mut state = self.state.lock();
        let _ = self.resolved.wait_until(&mut state, until);
    }

    fn resolve(&self, session: &[u8]) -> Option<Held> {
        let held = self.state.lock().remove(session);
        self.resolved.notify_all();
        held
    }

    fn next_id(&self) -> PreparedId {
        let mut state = self.state.lock();
        state.next_id += 1;
        state.next_id
    }
}

fn slots(ops: &[WriteOpRef<'_>]) -> Vec<(String, Vec<u8>)> {
    ops.iter()
        .map(|o| (o.table().to_string(), o.key().to_vec()))
        .collect()
}

/// The `_prepared` row of a transaction: its number, prepare time, coordinator and ops.
fn row(held: &Held, ops: &[WriteOpRef<'_>]) -> Vec<u8> {
    let batch = WriteBatch::of(ops.iter().map(WriteOpRef::to_owned).collect());
    let mut out = Vec::new();
    out.extend_from_slice(&held.number.to_le_bytes());
    out.extend_from_slice(&held.at.to_le_bytes());
    out.extend_from_slice(&(held.coordinator.len() as u16).to_le_bytes());
    out.extend_from_slice(held.coordinator.as_bytes());
    put_ops(&mut out, &batch);
    out
}

/// A `_prepared` row: the transaction as held (without its storage transaction) and its
/// ops.
fn decode_row(bytes: &[u8]) -> Option<(Held, Vec<WriteOpRef<'_>>)> {
    let mut r = Reader(bytes);
    let number = r.u64()? as i64;
    let at = r.u64()?;
    let coordinator = r.str()?.to_string();
    let ops = r.ops()?;
    let held = Held {
        number,
        coordinator,
        id: None,
        at,
        since: Instant::now(),
        keys: slots(&ops),
    };
    r.0.is_empty().then_some((held, ops))
}

/// Applies a Prepare entry at `at`: the ops into a prepared storage transaction, and in
/// an ordinary one the `_prepared` row, the side writes and `applied` (the applied index).
/// A transaction [`recover`] prepared already is not prepared twice.
pub fn apply_prepare(
    engine: &dyn Engine,
    registry: &Prepared,
    (txn, coordinator): (&TxnName, &str),
    (ops, side): (&[WriteOpRef<'_>], &[WriteOpRef<'_>]),
    at: Timestamp,
    applied: WriteOpRef<'_>,
) -> Result<(), StorageError> {
    let mut held = Held {
        number: txn.number,
        coordinator: coordinator.to_string(),
        id: None,
        at,
        since: Instant::now(),
        keys: slots(ops),
    };
    let row = row(&held, ops);
    let recovered = registry
        .get(&txn.session)
        .is_some_and(|h| h.number == txn.number && h.id.is_some());
    if !recovered {
        let id = registry.next_id();
        skipping_dropped(ops, |ops| engine.prepare(id, ops, at))?;
        held.id = Some(id);
        registry.state.lock().add(&txn.session, held);
    }
    let mut writes = side.to_vec();
    writes.push(WriteOpRef::Put {
        table: PREPARED_TABLE,
        key: &txn.session,
        value: &row,
    });
    writes.push(applied);
    engine.write_refs_at(&writes, at)
}

/// Applies a CommitPrepared (`commit: Some`) or AbortPrepared entry at `at`: resolves the
/// storage transaction, then removes the `_prepared` row and writes the side writes and
/// `applied`. Times WiredTiger would refuse stop the member (the engine checks them first).
/// A transaction this member does not hold prepared (another resolution came first) is
/// left as it is: only `applied` is written, and the answer is false.
pub fn apply_resolution(
    engine: &dyn Engine,
    registry: &Prepared,
    (txn, commit, side): (&TxnName, Option<Timestamp>, &[WriteOpRef<'_>]),
    at: Timestamp,
    applied: WriteOpRef<'_>,
) -> Result<bool, StorageError> {
    let held = registry
        .get(&txn.session)
        .filter(|h| h.number == txn.number)
        .and_then(|h| h.id);
    let Some(id) = held else {
        engine.write_refs_at(&[applied], at)?;
        return Ok(false);
    };
    match commit {
        Some(c) => engine.commit_prepared(id, c, at)?,
        None => engine.abort_prepared(id)?,
    }
    registry.resolve(&txn.session);
    let mut writes = side.to_vec();
    writes.push(WriteOpRef::Delete {
        table: PREPARED_TABLE,
        key: &txn.session,
    });
    writes.push(applied);
    engine.write_refs_at(&writes, at)?;
    Ok(true)
}

/// Prepares again every transaction the `_prepared` table holds: after a restart or a
/// snapshot install, before the log is replayed or anything reads their keys. Creates
/// the tables of transactions in flight (`_prepared`, and `_txn_parts`) if missing.
pub fn recover(engine: &dyn Engine, registry: &Prepared) -> Result<usize, StorageError> {
    engine.create_table(PREPARED_TABLE)?;
    engine.create_table(super::txn_parts::PARTS_TABLE)?;
    let rows = engine.scan(PREPARED_TABLE, &KeyRange::all(), false, usize::MAX)?;
    for (session, bytes) in &rows {
        let Some((mut held, ops)) = decode_row(bytes) else {
            return Err(StorageError::Other(
                "undecodable row in the _prepared table".into(),
            ));
        };
        let id = registry.next_id();
        skipping_dropped(&ops, |ops| engine.prepare_recovered(id, ops, held.at))?;
        held.id = Some(id);
        registry.state.lock().add(session, held);
    }
    if !rows.is_empty() {
        tracing::info!(count = rows.len(), "prepared transactions prepared again");
    }
    Ok(rows.len())
}

/// Runs `prepare` over `ops`, again without the ops of a table that is gone. A table is
/// dropped only once no prepared transaction holds it (`Prepared::admit`), and a drop is
/// durable at once while rows wait for a checkpoint: so a restart can find a `_prepared`
/// row, or replay a Prepare entry, whose transaction was resolved before its table went.
/// Its ops there are gone with the table, as the drop left it.
fn skipping_dropped(
    ops: &[WriteOpRef<'_>],
    prepare: impl Fn(&[WriteOpRef<'_>]) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let mut ops = ops.to_vec();
    loop {
        match prepare(&ops) {
            Err(StorageError::NoSuchTable(t)) => {
                tracing::warn!(table = %t, "a prepared transaction's table is gone: its ops there are skipped");
                ops.retain(|o| o.table() != t);
            }
            r => return r,
        }
    }
}

/// Rolls back every prepared storage transaction before the member's data is replaced by
/// a snapshot (tables they write cannot be dropped while they are open); the snapshot's
/// `_prepared` rows bring back those still prepared there ([`recover`]).
pub fn abandon_all(engine: &dyn Engine, registry: &Prepared) -> Result<(), StorageError> {
    let held: Vec<Held> = registry.state.lock().txns.drain().map(|(_, h)| h).collect();
    registry.state.lock().keys.clear();
    registry.resolved.notify_all();
    for h in held {
        if let Some(id) = h.id {
            engine.abort_prepared(id)?;
        }
    }
    Ok(())
}
