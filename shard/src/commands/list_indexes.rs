//! `listIndexes`: a cursor over index specifications, `_id_` first.

use std::collections::VecDeque;

use bson::{doc, Document};
use wire::MongoResult;

use super::args::{collection_name, existing_or, materialized_reply};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let coll = collection_name(cmd)?;
    let meta = existing_or(ctx, coll, |ns| format!("ns does not exist: {ns}"))?;
    let mut out = VecDeque::new();
    out.push_back(doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"});
    for i in &meta.indexes {
        out.push_back(i.spec.clone());
    }
    let ns = format!("{}.{coll}", ctx.db);
    materialized_reply(ctx, cmd, &ns, out, usize::MAX)
}
