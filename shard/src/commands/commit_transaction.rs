//! `commitTransaction` on the primary: writes the session's open transaction
//! (`sessions::txn`) as one replicated entry.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use storage::{WriteBatch, WriteOpRef};
use wire::{ErrorCode, MongoError, MongoResult};

use super::transaction_statement::Statement;
use crate::catalog::CollectionMeta;
use crate::error::storage_to_mongo;
use crate::node::{Ctx, Node};
use crate::sessions::retry::{committed_record, newest_number, session_key, TXN_TABLE};
use crate::sessions::txn::{check_alive, no_such, Staged, Txn};

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let st = transaction_of(cmd)?;
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
        return match newest_number(node.engine.as_ref(), &key)? {
            Some((n, true)) if n == number => Ok(()),
            _ => Err(no_such(number, "is not open on this member")),
        };
    };
    let result = write(node, &key, &txn);
    node.transactions.end(&key, number);
    result
}

/// Writes the transaction under the write locks of the collections it wrote (taken in
/// namespace order, so two commits never wait on each other in a circle), once nothing
/// it writes changed after its read time.
fn write(node: &Node, key: &[u8], txn: &Txn) -> MongoResult<()> {
    let replica = node.replica.as_deref().ok_or_else(|| {
        MongoError::new(
            ErrorCode::IllegalOperation,
            "transactions need a replica set",
        )
    })?;
    check_alive(txn, replica.status().term)?;
    let staged = std::mem::take(&mut *txn.staged());
    if staged.writes.is_empty() {
        return Ok(());
    }
    let metas = collections(node, &staged)?;
    let _held: Vec<_> = metas
        .iter()
        .map(|m| node.catalog.exclusive(&m.write_lock))
        .collect();
    let now = collections(node, &staged)?;
    if now
        .iter()
        .zip(&metas)
        .any(|(a, b)| !Arc::ptr_eq(&a.write_lock, &b.write_lock))
    {
        return Err(MongoError::new(
            ErrorCode::WriteConflict,
            "a collection the transaction wrote was dropped while its commit waited",
        ));
    }
    let metas = now;
    check_tables(&metas, &staged)?;
    let mut batch = WriteBatch::new();
    for ((table, k), v) in &staged.writes {
        match v {
            Some(v) => batch.put(table.clone(), k.clone(), v.clone()),
            None => batch.delete(table.clone(), k.clone()),
        };
    }
    let ops: Vec<WriteOpRef<'_>> = batch.ops.iter().map(|o| o.as_ref()).collect();
    if node
        .engine
        .write_conflict(&ops, txn.read_at)
        .map_err(storage_to_mongo)?
    {
        return Err(MongoError::new(
            ErrorCode::WriteConflict,
            "a document this transaction writes was written by another after it started",
        ));
    }
    let moved = moved_ids(node, &metas, &staged, txn);
    batch.put(TXN_TABLE, key.to_vec(), committed_record(txn.number)?);
    node.engine.write_owned(batch).map_err(storage_to_mongo)?;
    // A migration copying these documents out sends them again.
    for (meta, ids) in moved {
        ids.iter().for_each(|id| meta.moves.record(id));
    }
    Ok(())
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
        table == crate::catalog::CATALOG_TABLE
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
