//! `decideTransaction` (internal), on a cross-shard transaction's coordinator: the
//! transaction's fate, made final. A recorded decision (`txn::decisions`) answers
//! commit, with its time. Without one the transaction aborts here first (prepared, open
//! or never seen: it can no longer prepare or commit), and the answer is abort.

use bson::{doc, Document};
use wire::MongoResult;

use super::prepare_transaction::{is_prepared, named, replica_of, resolve};
use crate::node::Ctx;
use crate::sessions::txn::decisions;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (session, number) = named(cmd)?;
    let replica = replica_of(ctx)?;
    let node = ctx.node;
    node.sessions.with_key(&session, || {
        if let Some(at) = decisions::committed_at(node.engine.as_ref(), &session, number)? {
            return Ok(doc! {
                "decision": "commit",
                "commitTimestamp": proto::cluster_clock::to_bson(at),
            });
        }
        if is_prepared(replica, &session, number) {
            resolve(replica, (&session, number), None, false)?;
        } else {
            node.transactions.end(&session, number);
        }
        Ok(doc! {"decision": "abort"})
    })
}
