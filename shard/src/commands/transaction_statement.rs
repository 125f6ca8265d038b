//! A command that belongs to a transaction (`autocommit: false`): which transaction, and
//! running it there.

use std::sync::Arc;

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::Handler;
use crate::node::{Ctx, Node};
use crate::repl::snapshot_read;
use crate::repl::Replica;
use crate::sessions::retry::{newest_number, session_key};
use crate::sessions::txn::view::TxnView;
use crate::sessions::txn::{check_alive, no_such, Txn};

/// What a transaction may run: MongoDB's list, less DDL (collections and indexes are
/// made outside transactions here).
const ALLOWED: &[&str] = &[
    "find",
    "aggregate",
    "distinct",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "getMore",
    "killCursors",
    "commitTransaction",
    "abortTransaction",
    "prepareTransaction",
];

/// An aggregation that writes its output (`$out`, `$merge`): MongoDB refuses it in a
/// transaction, as it writes another collection than it names.
fn writes_output(name: &str, cmd: &Document) -> bool {
    name == "aggregate"
        && cmd.get_array("pipeline").is_ok_and(|stages| {
            stages
                .iter()
                .filter_map(Bson::as_document)
                .any(|s| s.contains_key("$out") || s.contains_key("$merge"))
        })
}

/// Commands that end a transaction rather than run in it.
const ENDS: &[&str] = &[
    "commitTransaction",
    "abortTransaction",
    "prepareTransaction",
];

/// The transaction fields of a command.
pub struct Statement<'a> {
    pub lsid: &'a Document,
    pub number: i64,
    pub start: bool,
}

impl Statement<'_> {
    /// `Some` when the command belongs to a transaction.
    pub fn parse(cmd: &Document) -> MongoResult<Option<Statement<'_>>> {
        match cmd.get("autocommit") {
            None => return Ok(None),
            Some(Bson::Boolean(false)) => {}
            Some(Bson::Boolean(true)) => {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    "autocommit must be false: a command with autocommit true is not part of a transaction",
                ))
            }
            Some(_) => return Err(MongoError::type_mismatch("autocommit must be a boolean")),
        }
        let Ok(lsid) = cmd.get_document("lsid") else {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                "a transaction needs a session (lsid)",
            ));
        };
        let number = match cmd.get("txnNumber") {
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(_) => return Err(MongoError::type_mismatch("txnNumber must be a long")),
            None => {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    "'autocommit' may only be given with a txnNumber",
                ))
            }
        };
        let start = match cmd.get("startTransaction") {
            None => false,
            Some(Bson::Boolean(true)) => true,
            Some(Bson::Boolean(false)) => {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    "startTransaction may only be true",
                ))
            }
            Some(_) => {
                return Err(MongoError::type_mismatch(
                    "startTransaction must be a boolean",
                ))
            }
        };
        Ok(Some(Statement {
            lsid,
            number,
            start,
        }))
    }
}

/// Runs `handler` inside the statement's transaction: starting it, or in the open one.
/// A statement that fails ends the transaction, as in MongoDB.
pub fn run(
    ctx: Ctx<'_>,
    cmd: &Document,
    st: &Statement<'_>,
    handler: Handler,
) -> MongoResult<Document> {
    let node = ctx.node;
    let name = cmd.keys().next().map(String::as_str).unwrap_or_default();
    let Some(replica) = node.replica.as_deref() else {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "Transaction numbers are only allowed on a replica set member or mongos",
        ));
    };
    if !ALLOWED.contains(&name) || writes_output(name, cmd) {
        return Err(MongoError::new(
            ErrorCode::OperationNotSupportedInTransaction,
            format!("Cannot run '{name}' in a multi-document transaction."),
        ));
    }
    if ENDS.contains(&name) {
        return handler(&ctx, cmd);
    }
    let key = session_key(st.lsid)?;
    // A new transaction waits for the session's prepared one to end (see
    // `Prepared::await_session`); a statement of the prepared one is refused.
    let mut held = replica.prepared.get(&key);
    if st.start && held.as_ref().is_some_and(|h| h.number < st.number) {
        replica
            .prepared
            .await_session(&key, storage::prepare_wait::limit());
        held = replica.prepared.get(&key);
    }
    if let Some(held) = held {
        return Err(MongoError::new(
            ErrorCode::PreparedTransactionInProgress,
            format!(
                "transaction {} of this session is prepared: only commitTransaction or \
                 abortTransaction may run until it ends",
                held.number
            ),
        ));
    }
    let txn = match st.start {
        true => start(node, replica, &key, st, cmd, &ctx)?,
        false => current(node, replica, &key, st, cmd)?,
    };
    let view = Arc::new(TxnView {
        below: node.engine.clone(),
        txn: txn.clone(),
        registry: node.transactions.clone(),
        session: key.clone(),
    });
    let ctx = Ctx {
        engine: view.as_ref(),
        read_at: Some(txn.read_at),
        view: Some(view.clone()),
        txn: Some(txn.clone()),
        ..ctx
    };
    let outcome = in_transaction(&ctx, cmd, name, &txn)
        .and_then(|()| crate::sessions::txn::staging(|| handler(&ctx, cmd)));
    match outcome.and_then(conflicts_are_errors) {
        Ok(mut reply) if !reply.contains_key("writeErrors") => {
            if st.start {
                reply.insert(
                    wire::command_fields::TXN_READ_TIME,
                    proto::cluster_clock::to_bson(txn.read_at),
                );
            }
            Ok(reply)
        }
        other => {
            node.transactions.end(&key, st.number);
            other
        }
    }
}

/// Starts transaction `st.number`, reading at the time its read concern asks for.
fn start(
    node: &Node,
    replica: &Replica,
    key: &[u8],
    st: &Statement<'_>,
    cmd: &Document,
    ctx: &Ctx<'_>,
) -> MongoResult<Arc<Txn>> {
    let open = node.transactions.get(key).map(|t| t.number);
    let recorded = newest_number(node.engine.as_ref(), key)?.map(|(n, _)| n);
    match open.max(recorded) {
        Some(newest) if newest > st.number => {
            return Err(MongoError::new(
                ErrorCode::TransactionTooOld,
                format!(
                    "Cannot start transaction {} on session because a newer transaction {newest} \
                     has already started",
                    st.number
                ),
            ))
        }
        Some(newest) if newest == st.number => {
            return Err(MongoError::new(
                ErrorCode::ConflictingOperationInProgress,
                format!(
                    "Cannot start transaction {}: this session already used that txnNumber",
                    st.number
                ),
            ))
        }
        _ => {}
    }
    let rc = cmd.get_document("readConcern").ok();
    let read_at = read_time(replica, rc, ctx)?;
    let txn = Arc::new(Txn::new(st.number, read_at, replica.status().term));
    node.transactions.begin(key, txn.clone())?;
    Ok(txn)
}

/// The time a new transaction reads at: the client's `atClusterTime` (level snapshot
/// only), or the newest this member has applied, at or after `afterClusterTime`.
fn read_time(
    replica: &Replica,
    rc: Option<&Document>,
    ctx: &Ctx<'_>,
) -> MongoResult<storage::Timestamp> {
    let rc = rc.cloned().unwrap_or_default();
    let level = rc.get_str("level").unwrap_or("local");
    if !["local", "majority", "snapshot"].contains(&level) {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!(
                "The readConcern level must be either 'local', 'majority' or 'snapshot' in a \
                 transaction, not '{level}'"
            ),
        ));
    }
    if level != "snapshot" && rc.contains_key("atClusterTime") {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "atClusterTime requires readConcern level snapshot",
        ));
    }
    snapshot_read::at_or_after(replica, &rc, ctx.deadline.remaining())
}

/// The session's open transaction `st.number`, still alive.
fn current(
    node: &Node,
    replica: &Replica,
    key: &[u8],
    st: &Statement<'_>,
    cmd: &Document,
) -> MongoResult<Arc<Txn>> {
    if cmd.contains_key("readConcern") {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "Only the first command in a transaction may specify a readConcern",
        ));
    }
    match node.transactions.get(key) {
        Some(t) if t.number == st.number => {
            if let Err(e) = check_alive(&t, replica.status().term) {
                node.transactions.end(key, st.number);
                return Err(e);
            }
            Ok(t)
        }
        Some(t) if t.number > st.number => Err(MongoError::new(
            ErrorCode::TransactionTooOld,
            format!(
                "txnNumber {} is older than the session's transaction {}",
                st.number, t.number
            ),
        )),
        _ => match newest_number(node.engine.as_ref(), key)? {
            Some((n, true)) if n == st.number => Err(MongoError::new(
                ErrorCode::TransactionCommitted,
                format!("Transaction {n} has been committed."),
            )),
            _ => Err(no_such(
                st.number,
                "is not open on this member: it ended, or never started here",
            )),
        },
    }
}

/// Before a statement runs: a collection it names must be the one the transaction's time
/// saw, and one it writes is remembered for the commit's locks.
fn in_transaction(ctx: &Ctx<'_>, cmd: &Document, name: &str, txn: &Txn) -> MongoResult<()> {
    let Ok(coll) = cmd.get_str(name) else {
        return Ok(());
    };
    let ns = format!("{}.{coll}", ctx.db);
    // Dropped since the read time, too: the transaction must not read it as empty.
    ctx.same_collection_at_read_time(&ns)?;
    if crate::commands::lookup(name).is_some_and(|c| c.writes) {
        txn.staged().namespaces.insert(ns);
    }
    Ok(())
}

/// A write conflict inside a transaction is the command's error, not one write's: the
/// whole transaction must run again.
fn conflicts_are_errors(reply: Document) -> MongoResult<Document> {
    let conflict = reply.get_array("writeErrors").ok().and_then(|errors| {
        errors
            .iter()
            .filter_map(Bson::as_document)
            .find(|e| e.get_i32("code").ok() == Some(ErrorCode::WriteConflict as i32))
    });
    match conflict {
        Some(e) => Err(MongoError::new(
            ErrorCode::WriteConflict,
            e.get_str("errmsg").unwrap_or("write conflict").to_string(),
        )),
        None => Ok(reply),
    }
}
