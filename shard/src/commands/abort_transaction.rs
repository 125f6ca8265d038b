//! `abortTransaction`: forgets the session's open transaction and what it wrote, or
//! aborts its prepared one (`prepare_transaction.rs`).

use bson::{doc, Document};
use wire::MongoResult;

use super::commit_transaction::transaction_of;
use crate::node::{Ctx, Node};
use crate::sessions::retry::session_key;
use crate::sessions::txn::no_such;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let st = transaction_of(cmd)?;
    abort(ctx.node, st.lsid, st.number)?;
    Ok(doc! {})
}

/// Aborts the session's transaction `number`.
pub fn abort(node: &Node, lsid: &Document, number: i64) -> MongoResult<()> {
    let key = session_key(lsid)?;
    if let Some(replica) = node.replica.as_deref() {
        if super::prepare_transaction::is_prepared(replica, &key, number) {
            return super::prepare_transaction::resolve(node, (&key, number), None, false);
        }
    }
    match node.transactions.get(&key) {
        Some(t) if t.number == number => {
            node.transactions.end(&key, number);
            Ok(())
        }
        _ => Err(no_such(number, "is not open on this member")),
    }
}
