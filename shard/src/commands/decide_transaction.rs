//! `decideTransaction` (internal), on a cross-shard transaction's coordinator: the
//! transaction's fate, made final. A recorded decision (`txn::decisions`) answers
//! commit, with its time. Without one the transaction aborts here first (prepared, open
//! or never seen: it can no longer prepare or commit), and the answer is abort. A commit
//! whose client stopped waiting at its `wtimeout` is awaited first: its outcome decides.
//! A shard that holds the transaction prepared under another coordinator refuses: a
//! reordered `recoveryToken` must not abort a part whose coordinator may have committed.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::prepare_transaction::{is_prepared, named, replica_of, resolve};
use crate::node::Ctx;
use crate::sessions::txn::decisions;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (session, number) = named(cmd)?;
    let replica = replica_of(ctx)?;
    let node = ctx.node;
    let named_coordinator = cmd.get_str("coordinator").ok();
    node.sessions.with_key(&session, || {
        node.await_timed_out_writes(&crate::control::deadline::Deadline::default())?;
        if let (Some(held), Some(name)) = (replica.prepared.get(&session), named_coordinator) {
            if held.number == number && held.coordinator != name {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    format!(
                        "this shard's part is coordinated by {}, not {name}",
                        held.coordinator
                    ),
                ));
            }
        }
        if let Some(at) = decisions::committed_at(node.engine.as_ref(), &session, number)? {
            return Ok(doc! {
                "decision": "commit",
                "commitTimestamp": proto::cluster_clock::to_bson(at),
            });
        }
        if is_prepared(replica, &session, number) {
            resolve(node, (&session, number), None, false)?;
        } else {
            node.transactions.end(&session, number);
        }
        Ok(doc! {"decision": "abort"})
    })
}
