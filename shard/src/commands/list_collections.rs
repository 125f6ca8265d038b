//! `listCollections`: a cursor over collection descriptions, filtered and optionally nameOnly.

use std::collections::VecDeque;

use bson::{doc, Document};
use query::matcher::Matcher;
use wire::MongoResult;

use super::args::{materialized_reply, opt_bool, opt_doc};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let filter = Matcher::new(&opt_doc(cmd, "filter")?.cloned().unwrap_or_default())?;
    let name_only = opt_bool(cmd, "nameOnly")?.unwrap_or(false);
    let mut out = VecDeque::new();
    for meta in ctx.node.catalog.list(ctx.db) {
        let full = doc! {
            "name": &meta.name, "type": "collection", "options": meta.options.clone(),
            "info": {"readOnly": false, "uuid": meta.uuid},
            "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        };
        if filter.matches(&full) {
            out.push_back(if name_only {
                doc! {"name": &meta.name, "type": "collection"}
            } else {
                full
            });
        }
    }
    let ns = format!("{}.$cmd.listCollections", ctx.db);
    materialized_reply(ctx, cmd, &ns, out, usize::MAX)
}
