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
    let target = catalog.get(to);
    if target.is_some() && !drop_target {
        return Err(MongoError::new(
            ErrorCode::NamespaceExists,
            "target namespace exists",
        ));
    }
    // Both locks in namespace order, as a transaction's commit takes them: source first,
    // a commit holding the target's lock and waiting for the source's would wait forever.
    let mut locks = vec![(from, &source.write_lock)];
    if let Some(t) = &target {
        locks.push((to, &t.write_lock));
    }
    locks.sort_by_key(|(ns, _)| *ns);
    let _held: Vec<_> = locks
        .iter()
        .map(|(_, l)| ctx.node.catalog.exclusive(l))
        .collect();
    let same = |now: Option<std::sync::Arc<crate::catalog::CollectionMeta>>| match (&target, now) {
        (None, None) => true,
        (Some(t), Some(n)) => std::sync::Arc::ptr_eq(&t.write_lock, &n.write_lock),
        _ => false,
    };
    if !same(catalog.get(to)) {
        return Err(MongoError::new(
            ErrorCode::ConflictingOperationInProgress,
            format!("{to} was created or dropped while the rename waited; run it again"),
        ));
    }
    let dropped = match target {
        Some(_) => catalog.drop_collection(ctx.engine, to)?.map(|m| m.uuid),
        None => None,
    };
    catalog.rename(ctx.engine, from, (to_db, to_coll), dropped)?;
    Ok(Document::new())
}
