//! Typed access to command arguments, with MongoDB's errors for wrong types.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::catalog::CollectionMeta;
use crate::control::deadline::Deadline;
use crate::execution::cursor::{CursorSource, Cursors};
use crate::node::Ctx;

pub use query::expr::type_name;

fn wrong_type(cmd: &str, field: &str, v: &Bson, expected: &str) -> MongoError {
    MongoError::type_mismatch(format!(
        "BSON field '{cmd}.{field}' is the wrong type '{}', expected type '{expected}'",
        type_name(v)
    ))
}

fn cmd_name(cmd: &Document) -> &str {
    cmd.keys().next().map(String::as_str).unwrap_or("")
}

/// The collection named by the command's first field.
pub fn collection_name(cmd: &Document) -> MongoResult<&str> {
    let name = cmd_name(cmd);
    match cmd.get(name) {
        Some(Bson::String(s)) if !s.is_empty() => Ok(s),
        Some(Bson::String(_)) => Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            "Invalid empty namespace specified",
        )),
        Some(v) => Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            format!("collection name has invalid type {}", type_name(v)),
        )),
        None => Err(MongoError::failed_to_parse("missing collection name")),
    }
}

pub fn opt_doc<'a>(cmd: &'a Document, field: &str) -> MongoResult<Option<&'a Document>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(v) => Err(wrong_type(cmd_name(cmd), field, v, "object")),
    }
}

pub fn opt_array<'a>(cmd: &'a Document, field: &str) -> MongoResult<Option<&'a Vec<Bson>>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Array(a)) => Ok(Some(a)),
        Some(v) => Err(wrong_type(cmd_name(cmd), field, v, "array")),
    }
}

pub fn opt_bool(cmd: &Document, field: &str) -> MongoResult<Option<bool>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(Bson::Int32(i)) => Ok(Some(*i != 0)),
        Some(Bson::Int64(i)) => Ok(Some(*i != 0)),
        Some(Bson::Double(d)) => Ok(Some(*d != 0.0)),
        Some(v) => Err(wrong_type(cmd_name(cmd), field, v, "bool")),
    }
}

pub fn opt_i64(cmd: &Document, field: &str) -> MongoResult<Option<i64>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(i)) => Ok(Some(i64::from(*i))),
        Some(Bson::Int64(i)) => Ok(Some(*i)),
        Some(Bson::Double(d)) if d.fract() == 0.0 && d.is_finite() => Ok(Some(*d as i64)),
        Some(v) => Err(wrong_type(cmd_name(cmd), field, v, "long")),
    }
}

/// A non-negative integer option (skip, limit, batchSize) with MongoDB's messages.
pub fn opt_count(cmd: &Document, field: &str) -> MongoResult<Option<u64>> {
    match opt_i64(cmd, field)? {
        None => Ok(None),
        Some(n) if n < 0 => Err(MongoError::bad_value(format!(
            "{field} value must be non-negative, but received: {n}"
        ))),
        Some(n) => Ok(Some(n as u64)),
    }
}

/// The `hint` of a find, count, update or delete (`null` means none).
pub fn opt_hint(cmd: &Document) -> Option<Bson> {
    cmd.get("hint")
        .cloned()
        .filter(|h| !matches!(h, Bson::Null))
}

/// Collection metadata if the collection exists.
pub fn existing(ctx: &Ctx, coll: &str) -> Option<Arc<CollectionMeta>> {
    ctx.node.catalog.get(&format!("{}.{}", ctx.db, coll))
}

/// [`existing`] for a read that may be a snapshot read: the collection must be the same
/// at the read's time as now (see `Ctx::same_collection_at_read_time`).
pub fn existing_to_read(ctx: &Ctx, coll: &str) -> MongoResult<Option<Arc<CollectionMeta>>> {
    ctx.same_collection_at_read_time(&format!("{}.{}", ctx.db, coll))?;
    Ok(existing(ctx, coll))
}

/// Collection metadata, or `NamespaceNotFound` worded by `message` (given the namespace:
/// each command words it as mongod does).
pub fn existing_or(
    ctx: &Ctx,
    coll: &str,
    message: impl FnOnce(&str) -> String,
) -> MongoResult<Arc<CollectionMeta>> {
    existing(ctx, coll).ok_or_else(|| {
        MongoError::new(
            ErrorCode::NamespaceNotFound,
            message(&format!("{}.{coll}", ctx.db)),
        )
    })
}

/// Collection metadata, creating the collection on first write as MongoDB does.
pub fn create_on_write(ctx: &Ctx, coll: &str) -> MongoResult<Arc<CollectionMeta>> {
    let (meta, _) =
        ctx.node
            .catalog
            .create_collection(ctx.engine, ctx.db, coll, Document::new())?;
    Ok(meta)
}

/// Rejects fields a statement (an `updates` or `deletes` entry) does not have, as
/// MongoDB 7's IDL parser does (for example `sort`, which only 8.0 accepts).
pub fn check_statement_fields(stmt: &Document, context: &str, allowed: &[&str]) -> MongoResult<()> {
    super::unsupported::check_collation(stmt.get("collation"))?;
    for k in stmt.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(MongoError::new(
                ErrorCode::UnknownField,
                format!("BSON field '{context}.{k}' is an unknown field."),
            ));
        }
    }
    Ok(())
}

/// The command's `let` variables, for `$expr` (and `$$NOW` pinned once per command).
pub fn let_vars(cmd: &Document) -> MongoResult<Option<query::expr::Variables>> {
    match opt_doc(cmd, "let")? {
        None => Ok(None),
        Some(lets) => {
            let mut vars = query::expr::Variables::default();
            vars.pin_now();
            vars.bind_let(lets, &Document::new())?;
            Ok(Some(vars))
        }
    }
}

pub fn ns(ctx: &Ctx, coll: &str) -> String {
    format!("{}.{}", ctx.db, coll)
}

/// Replies with the first batch of already computed results and parks the rest as a
/// cursor; the batch size comes from the command's `cursor.batchSize`.
pub fn materialized_reply(
    ctx: &Ctx,
    cmd: &Document,
    ns: &str,
    docs: std::collections::VecDeque<Document>,
    default_batch: usize,
) -> MongoResult<Document> {
    let source = Box::new(crate::execution::cursor::Materialized::new(docs));
    cursor_reply(ctx, cmd, ns, source, default_batch)
}

/// Replies with the first batch of `source` and parks the rest as a cursor; the batch
/// size comes from the command's `cursor.batchSize`.
pub fn cursor_reply(
    ctx: &Ctx,
    cmd: &Document,
    ns: &str,
    source: Box<dyn CursorSource>,
    default_batch: usize,
) -> MongoResult<Document> {
    let batch_size = opt_doc(cmd, "cursor")?
        .map(|c| opt_count(c, "batchSize"))
        .transpose()?
        .flatten();
    let max = batch_size.map(|b| b as usize).unwrap_or(default_batch);
    batch_reply(
        ctx.node,
        ns,
        ctx.at_time(source),
        None,
        max,
        false,
        &ctx.deadline,
    )
}

/// Runs one batch and either parks the cursor or closes it; returns the reply.
pub fn batch_reply(
    node: &crate::Node,
    ns: &str,
    mut source: Box<dyn CursorSource>,
    existing_id: Option<i64>,
    max_docs: usize,
    single_batch: bool,
    deadline: &Deadline,
) -> MongoResult<Document> {
    let (cursors, engine) = (&node.cursors, node.engine.as_ref());
    let batch = source.next_batch(engine, max_docs, deadline)?;
    let resume_token = source.post_batch_resume_token();
    let id = if single_batch || source.exhausted() {
        0
    } else {
        let id = existing_id.unwrap_or_else(Cursors::new_id);
        cursors.park(id, ns.to_string(), source, existing_id.is_none())?;
        id
    };
    let key = if existing_id.is_some() {
        "nextBatch"
    } else {
        "firstBatch"
    };
    let batch: Vec<Bson> = batch.into_iter().map(Bson::Document).collect();
    let mut cursor = doc! {key: batch, "id": id, "ns": ns};
    if let Some(token) = resume_token {
        cursor.insert("postBatchResumeToken", token);
    }
    Ok(doc! {"cursor": cursor, "ok": 1.0})
}

/// The member's replica, or MongoDB's error for a node that is not in a replica set.
pub fn replica<'a>(ctx: &'a Ctx) -> MongoResult<&'a Arc<crate::repl::Replica>> {
    ctx.node.replica.as_ref().ok_or_else(|| {
        MongoError::new(
            ErrorCode::NoReplicationEnabled,
            "not running with --replSet",
        )
    })
}
