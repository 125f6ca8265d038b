//! `killCursors`: close open cursors and report which were found.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use super::args::opt_array;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let ids = opt_array(cmd, "cursors")?.ok_or_else(|| {
        MongoError::failed_to_parse(
            "BSON field 'killCursors.cursors' is missing but a required field",
        )
    })?;
    let (mut killed, mut not_found) = (Vec::new(), Vec::new());
    for id in ids {
        let Bson::Int64(id) = id else {
            return Err(MongoError::type_mismatch(
                "BSON field 'killCursors.cursors' must contain longs",
            ));
        };
        if ctx.node.cursors.kill(*id) {
            killed.push(*id);
        } else {
            not_found.push(*id);
        }
    }
    Ok(
        doc! {"cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [], "cursorsUnknown": [], "ok": 1.0},
    )
}
