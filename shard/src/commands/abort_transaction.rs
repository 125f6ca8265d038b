//! `abortTransaction`: forgets the session's open transaction and what it wrote.

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
    match node.transactions.get(&key) {
        Some(t) if t.number == number => {
            node.transactions.end(&key, number);
            Ok(())
        }
        _ => Err(no_such(number, "is not open on this member")),
    }
}
