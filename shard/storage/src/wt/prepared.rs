//! Transactions prepared for a two-phase commit: each one on a WiredTiger session of its
//! own, kept open between `prepare` and its commit or rollback.
//!
//! WiredTiger hides a prepared transaction's writes from reads before its prepare time
//! and answers WT_PREPARE_CONFLICT to reads at or after it until it is resolved. A
//! failed commit of a prepared transaction stops the whole connection, so the times are
//! checked here first (`check_prepared_commit`). Closing the session (engine shutdown)
//! rolls the transaction back; WiredTiger keeps nothing of it across a restart.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::timestamps::{Marks, TsConfig};
use super::{data_session, table_uri, wt_error, Code, Connection, KeyBuf, OpError, Session};
use crate::{
    check_prepare, check_prepared_commit, PreparedId, Result, StorageError, Timestamp, WriteOpRef,
};

/// An open prepared transaction: its session and its prepare time.
pub(super) struct Held {
    session: Session,
    at: Timestamp,
}

/// Prepares `ops` at `at`; `recovered`: again after a restart (`Engine::prepare_recovered`),
/// when WiredTiger may round `at` up to the oldest timestamp.
pub(super) fn prepare(
    conn: &Connection,
    (held, marks): (&Mutex<HashMap<PreparedId, Held>>, &Marks),
    id: PreparedId,
    ops: &[WriteOpRef<'_>],
    at: Timestamp,
    recovered: bool,
) -> Result<()> {
    if !recovered {
        check_prepare(at, marks.stable())?;
    }
    if held.lock().contains_key(&id) {
        return Err(StorageError::Other(format!(
            "prepared transaction {id} is already open"
        )));
    }
    let mut session = data_session(conn)?;
    // Eviction may roll the transaction back before it is prepared (WT_ROLLBACK): it is
    // applied again, as every other write is.
    super::retry_on_rollback(|| {
        let begun = if recovered {
            session.begin_with(c"roundup_timestamps=(prepared=true)")
        } else {
            session.begin()
        };
        begun.map_err(|c| OpError::wt(c, "begin_transaction"))?;
        let prepared = apply(&mut session, ops).and_then(|()| {
            let config = TsConfig::new(&[("prepare_timestamp", at)]);
            session
                .prepare_with(config.as_cstr())
                .map_err(|c| wt_error(c, "prepare_transaction"))
        });
        prepared.map_err(|e| {
            // Not prepared: an ordinary rollback.
            let _ = session.rollback();
            match e {
                StorageError::WiredTiger { code, .. } if code == Code::ROLLBACK.0 => OpError::Retry,
                e => OpError::Final(e),
            }
        })
    })?;
    held.lock().insert(id, Held { session, at });
    Ok(())
}

/// Applies `ops` as overwrites and removals on the session's own cursors, closed again
/// before the transaction is prepared.
fn apply(session: &mut Session, ops: &[WriteOpRef<'_>]) -> Result<()> {
    let mut cursors = HashMap::new();
    let mut keys = KeyBuf::default();
    for op in ops {
        let table = op.table();
        if !cursors.contains_key(table) {
            let c = session
                .open_cursor(&table_uri(table), None)
                .map_err(|c| super::open_error(c, table))?;
            cursors.insert(table, c);
        }
        let cursor = cursors.get_mut(table).expect("opened above");
        let key = keys.encode(op.key());
        let done = match op {
            WriteOpRef::Put { value, .. } | WriteOpRef::Insert { value, .. } => {
                cursor.insert(key, value)
            }
            WriteOpRef::Delete { .. } => match cursor.remove(key) {
                Err(Code::NOTFOUND) => Ok(()),
                r => r,
            },
        };
        done.map_err(|c| wt_error(c, "write in a prepared transaction"))?;
    }
    Ok(())
}

pub(super) fn commit(
    held: &Mutex<HashMap<PreparedId, Held>>,
    marks: &Marks,
    id: PreparedId,
    commit: Timestamp,
    durable: Timestamp,
) -> Result<()> {
    let mut open = held.lock();
    let Some(txn) = open.get(&id) else {
        return Err(not_open(id));
    };
    check_prepared_commit(txn.at, commit, durable, (marks.stable(), marks.oldest()))?;
    let mut txn = open.remove(&id).expect("looked up above");
    drop(open);
    let config = TsConfig::new(&[("commit_timestamp", commit), ("durable_timestamp", durable)]);
    let done = txn
        .session
        .commit_with(config.as_cstr())
        .map_err(|c| wt_error(c, "commit_transaction (prepared)"));
    crate::prepare_wait::resolved();
    done
}

pub(super) fn abort(held: &Mutex<HashMap<PreparedId, Held>>, id: PreparedId) -> Result<()> {
    let Some(mut txn) = held.lock().remove(&id) else {
        return Err(not_open(id));
    };
    let done = txn
        .session
        .rollback()
        .map_err(|c| wt_error(c, "rollback_transaction (prepared)"));
    crate::prepare_wait::resolved();
    done
}

fn not_open(id: PreparedId) -> StorageError {
    StorageError::Other(format!("no prepared transaction {id} is open"))
}
