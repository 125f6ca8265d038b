//! `abortTransaction`: forgets the session's open transaction and what it wrote.

use bson::{doc, Document};
use wire::MongoResult;

use super::commit_transaction::transaction_of;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let st = transaction_of(cmd)?;
    crate::sessions::txn::commit::abort(ctx.node, st.lsid, st.number)?;
    Ok(doc! {})
}
