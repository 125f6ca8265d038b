//! `commitTransaction` on the primary: writes the session's open transaction
//! (`sessions::txn`) as one replicated entry, or commits the session's prepared one at
//! the `commitTimestamp` its two-phase commit chose (`prepare_transaction.rs`).

use std::sync::Arc;

use bson::{doc, Bson, Document};
use storage::{WriteBatch, WriteOpRef};
use wire::{ErrorCode, MongoError, MongoResult};

use super::transaction_statement::Statement;
use crate::catalog::{CollectionMeta, CATALOG_TABLE};
use crate::error::storage_to_mongo;
use crate::node::{Ctx, Node};
use crate::repl::entry::OplogEntry;
use crate::repl::txn_parts;
use crate::sessions::retry::{committed_record, newest_number, session_key, TXN_TABLE};
use crate::sessions::txn::{check_alive, no_such, Staged, Txn};

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let st = transaction_of(cmd)?;
    let commit_at = super::prepare_transaction::commit_timestamp(cmd)?;
    let key = session_key(st.lsid)?;
    if let Some(replica) = ctx.node.replica.as_deref() {
        if super::prepare_transaction::is_prepared(replica, &key, st.number) {
            let at = commit_at.ok_or_else(|| {
                MongoError::new(
                    ErrorCode::InvalidOptions,
                    "commitTransaction for a prepared transaction must provide commitTimestamp",
                )
            })?;
            let decide = cmd.get_bool("recordDecision").unwrap_or(false);
            super::prepare_transaction::resolve(ctx.node, (&key, st.number), Some(at), decide)?;
            return Ok(doc! {});
        }
    }
    if commit_at.is_some() && ctx.node.transactions.get(&key).is_some() {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "commitTimestamp is only for a prepared transaction",
        ));
    }
    commit(ctx.node, st.lsid, st.number)?;
    Ok(doc! {})
}

/// The transaction a `commitTransaction` or `abortTransaction` names.
pub fn transaction_of(cmd: &Document) -> MongoResult<Statement<'_>> {
    let name = cmd.keys().next().map(String::as_str).unwrap_or_default();
    match Statement::parse(cmd)? {
        Some(st) if !st.start => Ok(st),
        Some(_) => Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("{name} cannot start a transaction"),
        )),
        None => Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("{name} must be run within a transaction (autocommit: false)"),
        )),
    }
}

/// Commits the session's transaction `number`: its writes and the session's record as
/// one replicated entry. A commit sent again after it succeeded succeeds again.
pub fn commit(node: &Node, lsid: &Document, number: i64) -> MongoResult<()> {
    let key = session_key(lsid)?;
    let Some(txn) = node.transactions.get(&key).filter(|t| t.number == number) else {
        // A first attempt whose client stopped waiting at its wtimeout may still apply:
        // its outcome decides the answer, or a driver would run the transaction again.
        node.await_timed_out_writes(&crate::control::deadline::Deadline::default())?;
        return match newest_number(node.engine.as_ref(), &key)? {
            Some((n, true)) if n == number => Ok(()),
            _ => Err(no_such(number, "is not open on this member")),
        };
    };
    let result = write(node, &key, &txn, Finish::Commit);
    node.transactions.end(&key, number);
    result.map(|_| ())
}

/// How a checked transaction's writes leave it.
pub enum Finish<'a> {
    /// Committed at once, with the session's record.
    Commit,
    /// Prepared for a two-phase commit (`prepare_transaction.rs`) that shard `{0}`
    /// coordinates.
    Prepare(&'a str),
}

/// Writes the transaction under the write locks of the collections it wrote (taken in
/// namespace order, so two commits never wait on each other in a circle), once nothing
/// it writes changed after its read time. A prepare answers its prepare time; a
/// transaction that wrote nothing, `None`.
pub fn write(
    node: &Node,
    key: &[u8],
    txn: &Txn,
    finish: Finish<'_>,
) -> MongoResult<Option<storage::Timestamp>> {
    let replica = node.replica.as_deref().ok_or_else(|| {
        MongoError::new(
            ErrorCode::IllegalOperation,
            "transactions need a replica set",
        )
    })?;
    check_alive(txn, replica.status().term)?;
    let staged = std::mem::take(&mut *txn.staged());
    if staged.writes.is_empty() {
        return Ok(None);
    }
    let metas = collections(node, &staged)?;
    let _held: Vec<_> = metas
        .iter()
        .map(|m| node.catalog.exclusive(&m.write_lock))
        .collect();
    let metas = unchanged_since(node, &metas, &staged, txn.read_at)?;
    let mut batch = WriteBatch::new();
    batch.events = staged.events.clone();
    for ((table, k), v) in &staged.writes {
        match v {
            Some(v) => batch.put(table.clone(), k.clone(), v.clone()),
            None => batch.delete(table.clone(), k.clone()),
        };
    }
    refuse_conflicts(node, &batch, txn.read_at)?;
    refuse_newer_session_use(node, key, txn.number)?;
    let moved = moved_ids(node, &metas, &staged, txn);
    let prepared = match finish {
        Finish::Commit => {
            let (mut rest, parts) = txn_parts::split_off(replica, (key, txn.number), batch)?;
            rest.put(TXN_TABLE, key.to_vec(), committed_record(txn.number)?);
            rest.ops.extend(parts.deletes());
            txn_parts::replicate_final(replica, &OplogEntry::Write(rest), &parts)?;
            None
        }
        Finish::Prepare(coordinator) => Some(super::prepare_transaction::replicate(
            replica,
            (key, txn.number),
            coordinator,
            batch,
        )?),
    };
    // The metadata the writes changed (an index now multikey) is installed before the
    // locks go: a writer waiting for them must not flip another flag from stale metadata.
    if staged.writes.keys().any(|(t, _)| t == CATALOG_TABLE) {
        node.catalog.reload(node.engine.as_ref())?;
    }
    // A migration copying these documents out sends them again.
    for (meta, ids) in moved {
        ids.iter().for_each(|id| meta.moves.record(id));
    }
    Ok(prepared)
}

/// The collections the transaction wrote, as they are now that their locks are held: the
/// same collections (not dropped and recreated), with the same catalog rows as at the
/// read time, and every table it writes still there. An index built since holds no
/// entries for the transaction's documents, and a migration or its critical section
/// since may have moved them: either is a conflict, and the transaction runs again.
fn unchanged_since(
    node: &Node,
    held: &[Arc<CollectionMeta>],
    staged: &Staged,
    read_at: storage::Timestamp,
) -> MongoResult<Vec<Arc<CollectionMeta>>> {
    let now = collections(node, staged)?;
    let conflict = |why: String| Err(MongoError::new(ErrorCode::WriteConflict, why));
    for (a, b) in now.iter().zip(held) {
        if !Arc::ptr_eq(&a.write_lock, &b.write_lock) {
            return conflict(format!("{} was dropped while the commit waited", a.ns()));
        }
        if crate::catalog::row_changed_since(node.engine.as_ref(), &a.ns(), read_at)? {
            return conflict(format!(
                "{} changed (an index, its ownership) after the transaction started",
                a.ns()
            ));
        }
    }
    check_tables(&now, staged)?;
    Ok(now)
}

/// No key the transaction writes has a version committed after its read time.
fn refuse_conflicts(
    node: &Node,
    batch: &WriteBatch,
    read_at: storage::Timestamp,
) -> MongoResult<()> {
    let ops: Vec<WriteOpRef<'_>> = batch.ops.iter().map(|o| o.as_ref()).collect();
    if node
        .engine
        .write_conflict(&ops, read_at)
        .map_err(storage_to_mongo)?
    {
        return Err(MongoError::new(
            ErrorCode::WriteConflict,
            "a document this transaction writes was written by another after it started",
        ));
    }
    Ok(())
}

/// The session went on to a newer `txnNumber` (a retryable write) while the transaction
/// was open: its record must not move back, or a retry of that write would run again.
fn refuse_newer_session_use(node: &Node, key: &[u8], number: i64) -> MongoResult<()> {
    match newest_number(node.engine.as_ref(), key)? {
        Some((newest, _)) if newest > number => Err(MongoError::new(
            ErrorCode::TransactionTooOld,
            format!(
                "the session already used txnNumber {newest}, after this transaction's {number}"
            ),
        )),
        _ => Ok(()),
    }
}

/// The collections the transaction wrote, as the catalog has them now. A collection
/// dropped since is a conflict: its writes have nowhere to go.
fn collections(node: &Node, staged: &Staged) -> MongoResult<Vec<Arc<CollectionMeta>>> {
    staged
        .namespaces
        .iter()
        .map(|ns| {
            node.catalog.get(ns).ok_or_else(|| {
                MongoError::new(
                    ErrorCode::WriteConflict,
                    format!("{ns} was dropped while the transaction wrote to it"),
                )
            })
        })
        .collect()
}

/// Every table the transaction writes still exists: a replicated write to a missing table
/// would stop replication on every member.
fn check_tables(metas: &[Arc<CollectionMeta>], staged: &Staged) -> MongoResult<()> {
    let exists = |table: &str| {
        table == CATALOG_TABLE
            || metas
                .iter()
                .any(|m| m.table == table || m.indexes.iter().any(|i| i.table == table))
    };
    match staged.writes.keys().find(|(t, _)| !exists(t)) {
        Some((table, _)) => Err(MongoError::new(
            ErrorCode::WriteConflict,
            format!("table {table} was dropped while the transaction wrote to it"),
        )),
        None => Ok(()),
    }
}

/// The `_id`s the transaction writes in collections that migrations may be copying out:
/// the new document's, or for a delete the one the transaction read.
fn moved_ids(
    node: &Node,
    metas: &[Arc<CollectionMeta>],
    staged: &Staged,
    txn: &Txn,
) -> Vec<(Arc<CollectionMeta>, Vec<Bson>)> {
    let id_of = |bytes: &[u8]| {
        bson::RawDocument::from_bytes(bytes)
            .ok()?
            .get("_id")
            .ok()??
            .to_raw_bson()
            .try_into()
            .ok()
    };
    metas
        .iter()
        .filter(|m| m.ownership.is_some())
        .map(|m| {
            let ids = staged
                .writes
                .iter()
                .filter(|((t, _), _)| *t == m.table)
                .filter_map(|((t, k), v)| match v {
                    Some(doc) => id_of(doc),
                    None => node
                        .engine
                        .get_at(t, k, txn.read_at)
                        .ok()
                        .flatten()
                        .and_then(|doc| id_of(&doc)),
                })
                .collect();
            (m.clone(), ids)
        })
        .collect()
}
