//! `listDatabases` (admin): databases with their sizes; `nameOnly` and `filter` supported.

use bson::{doc, Bson, Document};
use query::matcher::Matcher;
use wire::MongoResult;

use super::args::{opt_bool, opt_doc};
use crate::node::Ctx;

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let filter = Matcher::new(&opt_doc(cmd, "filter")?.cloned().unwrap_or_default())?;
    let name_only = opt_bool(cmd, "nameOnly")?.unwrap_or(false);
    let mut total = 0i64;
    let mut dbs = Vec::new();
    for db in ctx.node.catalog.databases() {
        let mut size = 0i64;
        for meta in ctx.node.catalog.list(&db) {
            size += ctx
                .node
                .engine
                .stats(&meta.table)
                .map(|s| s.bytes as i64)
                .unwrap_or(0);
        }
        let entry = if name_only {
            doc! {"name": &db}
        } else {
            doc! {"name": &db, "sizeOnDisk": size, "empty": false}
        };
        if filter.matches(&entry) {
            total += size;
            dbs.push(Bson::Document(entry));
        }
    }
    let mut reply = doc! {"databases": dbs};
    if !name_only {
        reply.insert("totalSize", total);
        reply.insert("totalSizeMb", total / (1024 * 1024));
    }
    Ok(reply)
}
