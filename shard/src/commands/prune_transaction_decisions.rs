//! `pruneTransactionDecisions` (internal): deletes the commit decisions this shard keeps
//! as a coordinator that no participant needs any more (`txn::decisions`). The config
//! server sends it after a pass that listed every shard's prepared transactions, naming
//! them in `keep`.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::Ctx;
use crate::sessions::txn::decisions;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let bad = || {
        MongoError::new(
            ErrorCode::TypeMismatch,
            "keep lists {session: <binary>, txnNumber: <long>} documents",
        )
    };
    let keep = cmd
        .get_array("keep")
        .map_err(|_| bad())?
        .iter()
        .map(|k| {
            let k = k.as_document().ok_or_else(bad)?;
            match (k.get("session"), k.get_i64("txnNumber")) {
                (Some(Bson::Binary(b)), Ok(n)) => Ok((b.bytes.clone(), n)),
                _ => Err(bad()),
            }
        })
        .collect::<MongoResult<Vec<_>>>()?;
    let pruned = decisions::prune(ctx.engine, &keep)?;
    Ok(doc! {"pruned": pruned as i64})
}
