//! `resolvePreparedTransaction` (internal): commits (with `commitTimestamp`) or aborts a
//! transaction prepared here, as its coordinator decided (`decide_transaction.rs`). One
//! no longer prepared here is answered as done.

use bson::{doc, Document};
use wire::MongoResult;

use super::prepare_transaction::{is_prepared, named, replica_of, resolve};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (session, number) = named(cmd)?;
    let replica = replica_of(ctx)?;
    let commit = super::prepare_transaction::commit_timestamp(cmd)?;
    ctx.node.sessions.with_key(&session, || {
        if is_prepared(replica, &session, number) {
            resolve(ctx.node, (&session, number), commit, false)?;
        }
        Ok(doc! {})
    })
}
