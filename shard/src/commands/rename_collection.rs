//! `renameCollection` (run on `admin`): `{renameCollection: "db.a", to: "db.b", dropTarget}`.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::args::opt_bool;
use crate::node::Ctx;

fn split_ns(ns: &str) -> MongoResult<(&str, &str)> {
    ns.split_once('.')
        .filter(|(d, c)| !d.is_empty() && !c.is_empty())
        .ok_or_else(|| {
            MongoError::new(
                ErrorCode::InvalidNamespace,
                format!("Invalid namespace specified '{ns}'"),
            )
        })
}

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    if ctx.db != "admin" {
        return Err(MongoError::new(
            ErrorCode::Unauthorized,
            "renameCollection may only be run against the admin database.",
        ));
    }
    let (Some(Bson::String(from)), Some(Bson::String(to))) =
        (cmd.get("renameCollection"), cmd.get("to"))
    else {
        return Err(MongoError::type_mismatch(
            "'renameCollection' and 'to' must be namespace strings",
        ));
    };
    let (to_db, to_coll) = split_ns(to)?;
    split_ns(from)?;
    let drop_target = opt_bool(cmd, "dropTarget")?.unwrap_or(false);
    let catalog = &ctx.node.catalog;
    let source = catalog.get(from).ok_or_else(|| {
        MongoError::new(
            ErrorCode::NamespaceNotFound,
            format!("Source collection {from} does not exist"),
        )
    })?;
    if from == to {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            "Can't rename a collection to itself",
        ));
    }
    let _guard = ctx.node.catalog.exclusive(&source.write_lock);
    if let Some(target) = catalog.get(to) {
        if !drop_target {
            return Err(MongoError::new(
                ErrorCode::NamespaceExists,
                "target namespace exists",
            ));
        }
        let _t = ctx.node.catalog.exclusive(&target.write_lock);
        catalog.drop_collection(ctx.engine, to)?;
    }
    catalog.rename(ctx.engine, from, to_db, to_coll)?;
    Ok(Document::new())
}
