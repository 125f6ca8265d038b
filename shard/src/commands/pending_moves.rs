//! `_shardsvrPendingMoves: 1, olderThanMs`: the intents to move a document (see
//! `doc_moves`) recorded at least `olderThanMs` ago, for a router to finish: their
//! router most likely died between the insert on the recipient and the delete here.

use bson::doc;
use bson::Document;
use wire::MongoResult;

use super::args::opt_i64;
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let older_than = opt_i64(cmd, "olderThanMs")?.unwrap_or(0).max(0);
    let moves = crate::migrations::doc_moves::pending(ctx.node, older_than)?;
    Ok(doc! {"moves": moves})
}
