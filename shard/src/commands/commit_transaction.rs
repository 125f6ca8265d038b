//! `commitTransaction`: writes the session's open transaction as one replicated entry
//! (`sessions::txn::commit`).

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;
use crate::sessions::txn::statement::Statement;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let st = transaction_of(cmd)?;
    crate::sessions::txn::commit::commit(ctx.node, st.lsid, st.number)?;
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
