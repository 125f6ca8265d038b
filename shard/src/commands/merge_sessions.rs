//! `_shardsvrMergeSessions`: the recipient of a migration merges the donor's session
//! records into its own (`retry::merge_record`), in one replicated write, so a retried
//! write of a moved document is recognised here as already done.

use bson::{doc, Bson, Document};
use storage::WriteBatch;
use wire::{MongoError, MongoResult};

use super::args::opt_array;
use crate::error::storage_to_mongo;
use crate::execution::write_path::decode_document;
use crate::node::Ctx;
use crate::sessions::retry::{merge_record, TXN_TABLE};

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let records = opt_array(cmd, "records")?.cloned().unwrap_or_default();
    let mut batch = WriteBatch::default();
    for r in &records {
        let bad =
            || MongoError::failed_to_parse("a session record must be {k: BinData, v: object}");
        let r = r.as_document().ok_or_else(bad)?;
        let key = r.get_binary_generic("k").map_err(|_| bad())?.clone();
        let incoming = r.get_document("v").map_err(|_| bad())?;
        let held = ctx
            .engine
            .get(TXN_TABLE, &key)
            .map_err(storage_to_mongo)?
            .map(|b| decode_document(&b))
            .transpose()?;
        let merged = merge_record(held.as_ref(), incoming);
        if held.as_ref() != Some(&merged) {
            batch.put(
                TXN_TABLE,
                key,
                bson::to_vec(&merged).map_err(crate::error::invalid_bson)?,
            );
        }
    }
    let merged = batch.len();
    if merged > 0 {
        crate::control::ops::check_before_write()?;
        ctx.engine.write_owned(batch).map_err(storage_to_mongo)?;
    }
    Ok(doc! {"merged": merged as i64, "records": Bson::Int64(records.len() as i64)})
}
