//! `prepareTransaction`: a participant's first phase of a commit across shards.
//!
//! The router sends it to every shard a transaction wrote once all its statements have
//! run (`router::transactions`). The participant checks the transaction as a commit
//! would (`commit_transaction::write`) and replicates a Prepare entry: every member then
//! holds the writes in a WiredTiger transaction prepared at the entry's time, which it
//! answers as `prepareTimestamp`. From then on only `commitTransaction` with a
//! `commitTimestamp` (at or after every participant's prepare time) or `abortTransaction`
//! ends it, whatever happens to the primary (`repl::prepared`).
//!
//! A transaction that wrote nothing here has nothing to prepare: it ends, and the reply
//! says `readOnly`, so the router sends this shard no second phase.

use bson::{doc, Document};
use storage::{Timestamp, WriteBatch};
use wire::{ErrorCode, MongoError, MongoResult};

use super::commit_transaction::{transaction_of, write, Finish};
use crate::catalog::CATALOG_TABLE;
use crate::node::{Ctx, Node};
use crate::repl::entry::{OplogEntry, TxnName};
use crate::repl::{txn_parts, Replica};
use crate::sessions::retry::{committed_record, newest_number, session_key};
use crate::sessions::txn::{decisions, no_such};

/// The longest coordinator name a Prepare entry carries.
const MAX_SHARD_NAME: usize = 255;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let st = transaction_of(cmd)?;
    let node = ctx.node;
    let replica = replica_of(ctx)?;
    let key = session_key(st.lsid)?;
    if let Some(held) = replica.prepared.get(&key).filter(|h| h.number == st.number) {
        if held.id.is_some() {
            return Ok(doc! {"prepareTimestamp": proto::cluster_clock::to_bson(held.at)});
        }
    }
    let Some(txn) = node
        .transactions
        .get(&key)
        .filter(|t| t.number == st.number)
    else {
        node.await_timed_out_writes(&crate::control::deadline::Deadline::default())?;
        return match newest_number(node.engine.as_ref(), &key)? {
            Some((n, true)) if n == st.number => Err(MongoError::new(
                ErrorCode::TransactionCommitted,
                format!("Transaction {n} has been committed."),
            )),
            _ => Err(no_such(st.number, "is not open on this member")),
        };
    };
    let coordinator = cmd
        .get_str("coordinator")
        .ok()
        .filter(|c| !c.is_empty() && c.len() <= MAX_SHARD_NAME)
        .ok_or_else(|| {
            MongoError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "prepareTransaction names the coordinator shard (coordinator: <name of at \
                     most {MAX_SHARD_NAME} bytes>)"
                ),
            )
        })?;
    let result = if cmd.get_bool("isCoordinator").unwrap_or(false) && txn.staged().writes.is_empty()
    {
        // The coordinator holds the decision, so it prepares even with nothing to write.
        replicate(replica, (&key, st.number), coordinator, WriteBatch::new()).map(Some)
    } else {
        write(node, &key, &txn, Finish::Prepare(coordinator))
    };
    node.transactions.end(&key, st.number);
    Ok(match result? {
        Some(at) => doc! {"prepareTimestamp": proto::cluster_clock::to_bson(at)},
        None => doc! {"readOnly": true},
    })
}

/// Replicates the Prepare entry of the session's transaction `number` and answers its
/// prepare time. The catalog rows it writes (an index becoming multikey) are written at
/// once beside it, not prepared: every member reads the catalog table while it applies
/// entries, and must never wait there for a resolution later in its own log. A multikey
/// flag left set by an abort only widens index bounds.
pub fn replicate(
    replica: &Replica,
    (session, number): (&[u8], i64),
    coordinator: &str,
    batch: WriteBatch,
) -> MongoResult<Timestamp> {
    let (side, ops): (Vec<_>, Vec<_>) = batch
        .ops
        .into_iter()
        .partition(|op| op.table() == CATALOG_TABLE);
    let ops = WriteBatch {
        ops,
        events: batch.events,
    };
    let (ops, parts) = txn_parts::split_off(replica, (session, number), ops)?;
    let txn = TxnName {
        session: session.to_vec(),
        number,
    };
    let entry = OplogEntry::Prepare {
        txn,
        coordinator: coordinator.to_string(),
        ops,
        side: WriteBatch::of(side.into_iter().chain(parts.deletes()).collect()),
    };
    txn_parts::replicate_final(replica, &entry, &parts)?;
    match replica.prepared.get(session) {
        Some(held) if held.number == number && held.id.is_some() => Ok(held.at),
        _ => Err(MongoError::new(
            ErrorCode::InternalError,
            "the prepared transaction was applied but is not held",
        )),
    }
}

/// Whether the session's transaction `number` is prepared on this member.
pub fn is_prepared(replica: &Replica, session: &[u8], number: i64) -> bool {
    replica
        .prepared
        .get(session)
        .is_some_and(|h| h.number == number && h.id.is_some())
}

/// Commits (at `commit`) or aborts the session's prepared transaction `number`; a
/// coordinator's commit (`decide`) records the decision with it (`txn::decisions`). The
/// caller holds the session's lock, so a commit and a recovery's abort never both pass
/// the check.
pub fn resolve(
    node: &Node,
    (session, number): (&[u8], i64),
    commit: Option<Timestamp>,
    decide: bool,
) -> MongoResult<()> {
    let replica = node.replica.as_deref().ok_or_else(not_a_member)?;
    // A resolution whose client stopped waiting at its wtimeout may still apply.
    node.await_timed_out_writes(&crate::control::deadline::Deadline::default())?;
    let Some(held) = replica.prepared.get(session).filter(|h| h.number == number) else {
        return Err(no_such(number, "is not prepared on this member"));
    };
    if held.id.is_none() {
        return Err(MongoError::new(
            ErrorCode::PreparedTransactionInProgress,
            "the transaction's prepare is still replicating",
        ));
    }
    let txn = TxnName {
        session: session.to_vec(),
        number,
    };
    let entry = match commit {
        Some(at) if at < held.at => {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "commitTimestamp {at:#x} is before the transaction's prepareTimestamp {:#x}",
                    held.at
                ),
            ))
        }
        Some(at) => {
            // The entry's own time (its durable time) must not be before the commit time:
            // the clock goes past `at` before the entry is stamped.
            replica.clock.advance(at).map_err(|_| {
                MongoError::new(
                    ErrorCode::InvalidOptions,
                    "commitTimestamp is too far ahead of this member's clock",
                )
            })?;
            let mut side = WriteBatch::new();
            // The session's record never moves back (a retryable write of a later number
            // would run again).
            if newest_number(node.engine.as_ref(), session)?.is_none_or(|(n, _)| n <= number) {
                side.put(
                    crate::sessions::retry::TXN_TABLE,
                    session.to_vec(),
                    committed_record(number)?,
                );
            }
            if decide {
                decisions::record(&mut side, session, number, at)?;
            }
            OplogEntry::CommitPrepared {
                txn,
                commit: at,
                side,
            }
        }
        None => OplogEntry::AbortPrepared {
            txn,
            side: WriteBatch::new(),
        },
    };
    replica.replicate(entry).map_err(MongoError::from)
}

/// The transaction an internal recovery command names: its `lsid` (from a router), or
/// `session` (the session key, as `listPreparedTransactions` gives it), and `txnNumber`.
pub fn named(cmd: &Document) -> MongoResult<(Vec<u8>, i64)> {
    let session = match (cmd.get_document("lsid"), cmd.get("session")) {
        (Ok(lsid), _) => session_key(lsid)?,
        (_, Some(bson::Bson::Binary(b))) => b.bytes.clone(),
        _ => {
            return Err(MongoError::new(
                ErrorCode::TypeMismatch,
                "name the transaction's lsid, or its session as binary data",
            ))
        }
    };
    let number = cmd
        .get_i64("txnNumber")
        .map_err(|_| MongoError::new(ErrorCode::TypeMismatch, "txnNumber must be a long"))?;
    Ok((session, number))
}

/// The `commitTimestamp` a commit of a prepared transaction names, if any.
pub fn commit_timestamp(cmd: &Document) -> MongoResult<Option<Timestamp>> {
    match cmd.get("commitTimestamp") {
        None => Ok(None),
        Some(bson::Bson::Timestamp(t)) => Ok(Some(proto::cluster_clock::pack(t.time, t.increment))),
        Some(_) => Err(MongoError::new(
            ErrorCode::TypeMismatch,
            "commitTimestamp must be a timestamp",
        )),
    }
}

/// The replica set a recovery command needs.
pub fn replica_of<'a>(ctx: &'a Ctx) -> MongoResult<&'a Replica> {
    ctx.node.replica.as_deref().ok_or_else(not_a_member)
}

fn not_a_member() -> MongoError {
    MongoError::new(
        ErrorCode::IllegalOperation,
        "transactions need a replica set",
    )
}
