//! `_shardsvrMoveLog`: the donor of a migration starts (`on: true`) or stops recording
//! the documents written while the range is copied (see `catalog/moves.rs`).

use bson::Document;
use wire::MongoResult;

use super::args::opt_bool;
use crate::migrations::migration::{expect_version, owned};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let (meta, owner) = owned(ctx, cmd)?;
    expect_version(&meta, &owner, cmd)?;
    if opt_bool(cmd, "on")?.unwrap_or(true) {
        meta.moves.start();
    } else {
        meta.moves.stop();
    }
    Ok(Document::new())
}
