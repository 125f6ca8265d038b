//! `update` and `delete` on a sharded collection, one statement at a time.
//!
//! A multi statement goes to every shard its filter can touch. A single-document
//! statement goes to the shard its full shard key names; without one, the shards its
//! filter can touch are tried in turn until one matches (a document lives on one
//! shard). An upsert must name its full shard key, as in MongoDB (`ShardKeyNotFound`).
//! An update that changes a document's shard key must be a retryable write and a
//! single-document one (`IllegalOperation` otherwise, as in MongoDB); the document may
//! then move to another shard (`shard_key_change`).

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::write_reply::{retryable_ids, statements, Merged};
use super::{number, Ctx};

pub async fn run(ctx: &Ctx<'_>, name: &str, mut cmd: Document) -> MongoResult<Document> {
    let field = if name == "update" {
        "updates"
    } else {
        "deletes"
    };
    let stmts = statements(&mut cmd, field)?;
    let ordered = cmd.get_bool("ordered").unwrap_or(true);
    let mut merged = Merged::default();
    if name == "update" {
        merged.n_modified = Some(0);
    }
    for (i, stmt) in stmts.into_iter().enumerate() {
        let errors_before = merged.write_errors.len();
        match statement(ctx, name, field, &cmd, stmt, i).await {
            Ok(replies) => replies.iter().for_each(|r| merged.add(r, &[i])),
            Err(e) if is_statement_error(&e, ctx.txn.is_some()) => {
                merged.write_errors.push(e.to_write_error(i))
            }
            Err(e) => return Err(e),
        }
        if ordered && merged.write_errors.len() > errors_before {
            break;
        }
    }
    Ok(merged.reply())
}

/// Errors that fail one statement rather than the whole command. Inside a transaction
/// a write conflict fails the command, as MongoDB's does: it is what carries the
/// `TransientTransactionError` label the driver retries the transaction on.
fn is_statement_error(e: &MongoError, in_transaction: bool) -> bool {
    e.code == ErrorCode::ShardKeyNotFound as i32
        || e.code == ErrorCode::ImmutableField as i32
        || e.code == ErrorCode::IllegalOperation as i32
        || (e.code == ErrorCode::WriteConflict as i32 && !in_transaction)
}

/// Runs one statement; the replies of the shards it went to.
async fn statement(
    ctx: &Ctx<'_>,
    name: &str,
    field: &str,
    cmd: &Document,
    stmt: Document,
    index: usize,
) -> MongoResult<Vec<Document>> {
    let filter = stmt.get_document("q").cloned().unwrap_or_default();
    let update = name == "update";
    let multi = if update {
        stmt.get_bool("multi").unwrap_or(false)
    } else {
        super::count_arg(&stmt, "limit")?.unwrap_or(0) == 0
    };
    let upsert = update && stmt.get_bool("upsert").unwrap_or(false);
    let changes_key = update && check_key_unchanged(ctx, &filter, stmt.get("u")).is_err();
    if changes_key && (multi || !cmd.contains_key("txnNumber")) {
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            if multi {
                "Multi-update operations may not change a document's shard key"
            } else {
                "Must run update to shard key field in a multi-statement transaction or with retryWrites: true."
            },
        ));
    }
    let mut sub = cmd.clone();
    sub.insert(field, vec![stmt.clone()]);
    retryable_ids(&mut sub, &[index]);
    // An upsert without its full shard key is refused below.
    if changes_key && (!upsert || ctx.table.key.equality(&filter).is_some()) {
        return super::shard_key_change::update(ctx, &sub, &filter).await;
    }
    let key = ctx.table.key.equality(&filter).or_else(|| {
        // A replacement upsert inserts the replacement: its key decides.
        upsert
            .then(|| replacement(stmt.get("u")))
            .flatten()
            .and_then(|r| ctx.table.key.value_of(r).ok())
    });
    if let Some(key) = key {
        let shard = ctx.table.shard_for_key(&key).to_string();
        return Ok(ctx
            .each(&[shard], &sub)
            .await?
            .into_iter()
            .map(|a| a.reply)
            .collect());
    }
    if upsert {
        return Err(MongoError::new(
            ErrorCode::ShardKeyNotFound,
            format!(
                "Failed to target upsert by query :: could not extract exact shard key from {filter} for shard key {}",
                ctx.table.key.pattern()
            ),
        ));
    }
    let shards = ctx.targets(&filter);
    if multi || shards.len() == 1 {
        return Ok(ctx
            .each(&shards, &sub)
            .await?
            .into_iter()
            .map(|a| a.reply)
            .collect());
    }
    // One document, somewhere: ask the shards in turn.
    let mut replies = Vec::new();
    for s in shards {
        let a = ctx.each(&[s], &sub).await?.remove(0);
        let matched = number(&a.reply, "n") > 0 || a.reply.contains_key("writeErrors");
        replies.push(a.reply);
        if matched {
            break;
        }
    }
    Ok(replies)
}

/// The replacement document of an update, if it is one (not operators, not a pipeline).
pub(super) fn replacement(u: Option<&Bson>) -> Option<&Document> {
    match u {
        Some(Bson::Document(d)) if !d.keys().next().is_some_and(|k| k.starts_with('$')) => Some(d),
        _ => None,
    }
}

/// Refuses an update that would change the shard key of the document it matches.
pub(super) fn check_key_unchanged(
    ctx: &Ctx<'_>,
    filter: &Document,
    u: Option<&Bson>,
) -> MongoResult<()> {
    let key = &ctx.table.key;
    let altered = |field: &str| {
        MongoError::new(
            ErrorCode::ImmutableField,
            format!(
                "After applying the update, the (immutable) shard key field '{field}' would be altered; \
                 changing a document's shard key is not supported yet"
            ),
        )
    };
    if let Some(r) = replacement(u) {
        // A replacement keeps the key the filter pinned down (when it did).
        if let Some(pinned) = key.equality(filter) {
            if key.value_of(r)? != pinned {
                return Err(altered(&key.fields().join(", ")));
            }
        }
        return Ok(());
    }
    let Some(Bson::Document(ops)) = u else {
        return Ok(());
    };
    for (op, fields) in ops {
        // Only an insert sets these: it cannot move an existing document.
        if op == "$setOnInsert" {
            continue;
        }
        let Bson::Document(fields) = fields else {
            continue;
        };
        for path in fields.keys() {
            let path = path.split(".$").next().unwrap_or(path);
            let touches = key.fields().iter().find(|f| {
                f.as_str() == path
                    || f.starts_with(&format!("{path}."))
                    || path.starts_with(&format!("{f}."))
            });
            if let Some(f) = touches {
                // `$set` to the value the filter pins is no change.
                let same = ops
                    .get_document("$set")
                    .ok()
                    .and_then(|s| s.get(f.as_str()))
                    .zip(filter.get(f.as_str()))
                    .is_some_and(|(a, b)| query::order::values_equal(a, b));
                if !same {
                    return Err(altered(f));
                }
            }
        }
    }
    Ok(())
}
