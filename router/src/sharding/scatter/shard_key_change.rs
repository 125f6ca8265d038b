//! An update (or `findAndModify`) that changes a document's shard key, in a retryable
//! write (MongoDB allows it there and in transactions; anything else gets
//! `IllegalOperation`).
//!
//! The statement goes to the shard holding the document. If the new key stays in that
//! shard's ranges, the shard applies it like any update. Otherwise it applies nothing and
//! answers `WouldChangeOwningShard` (283) with the document before and after, and the
//! router moves the document: it inserts the new one on the shard owning the new key
//! (without the session), then deletes the old one with `_shardsvrDeleteIfUnchanged`,
//! which deletes it only if it is still exactly the pre-image and records the update's
//! outcome under the statement's id in the session. A retry of the update after that is
//! recognised by the old shard and applies once.
//!
//! What a transaction would add (Bulwark has no cross-shard transactions yet): between
//! the insert and the delete both documents are visible; if the router dies there, both
//! stay until the driver retries, which finds the old document unchanged, the new one
//! already inserted (the same document: accepted), and finishes the delete. If the old
//! document changed in between, the insert is undone and the update starts again.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::{number, Ctx};
use crate::shard_client::reply_ok;

/// Times the update starts again after a concurrent change of the document it moves.
pub(super) const ATTEMPTS: usize = 3;

/// Runs `sub`, one single-document update statement (with its session and statement id)
/// whose filter is `filter` and which changes the shard key; the replies to merge.
pub async fn update(
    ctx: &Ctx<'_>,
    sub: &Document,
    filter: &Document,
) -> MongoResult<Vec<Document>> {
    let targets = match ctx.table.key.equality(filter) {
        Some(key) => vec![ctx.table.shard_for_key(&key).to_string()],
        None => ctx.targets(filter),
    };
    for _ in 0..ATTEMPTS {
        let mut replies = Vec::new();
        let mut refused = None;
        // One document, somewhere: the shards in turn until one matches.
        for s in &targets {
            let a = ctx.each(std::slice::from_ref(s), sub).await?.remove(0);
            if let Some(images) = images(&a.reply) {
                refused = Some((a.shard.name.clone(), images));
                break;
            }
            let matched = number(&a.reply, "n") > 0 || a.reply.contains_key("writeErrors");
            replies.push(a.reply);
            if matched {
                break;
            }
        }
        let Some((from, (pre, post))) = refused else {
            return Ok(replies);
        };
        if move_document(ctx, sub, &from, pre, post, None).await? {
            return Ok(vec![doc! {"n": 1, "nModified": 1, "ok": 1.0}]);
        }
    }
    Err(kept_changing())
}

/// The error after `ATTEMPTS` moves found the document changed each time.
pub(super) fn kept_changing() -> MongoError {
    MongoError::new(
        ErrorCode::WriteConflict,
        "the document kept changing while its shard key update moved it to another shard",
    )
}

/// The pre- and post-image of a `WouldChangeOwningShard` answer: the command's error
/// (`findAndModify`) or one of its write errors (`update`).
pub(super) fn images(reply: &Document) -> Option<(Document, Document)> {
    let refused = |d: &Document| d.get_i32("code") == Ok(ErrorCode::WouldChangeOwningShard as i32);
    let e = if refused(reply) {
        reply
    } else {
        reply
            .get_array("writeErrors")
            .ok()?
            .iter()
            .filter_map(Bson::as_document)
            .find(|w| refused(w))?
    };
    let info = e.get_document("errInfo").ok()?;
    Some((
        info.get_document("preImage").ok()?.clone(),
        info.get_document("postImage").ok()?.clone(),
    ))
}

/// After `findAndModify` (`cmd`) was refused by shard `from` with these images: moves the
/// document, recording the reply a retry must get; the reply, or `None` if the document
/// changed meanwhile (the command starts again).
pub(super) async fn find_and_modify(
    ctx: &Ctx<'_>,
    cmd: &Document,
    from: &str,
    (pre, post): (Document, Document),
) -> MongoResult<Option<Document>> {
    let shown = if cmd.get_bool("new").unwrap_or(false) {
        &post
    } else {
        &pre
    };
    let value = match cmd.get_document("fields") {
        Ok(f) if !f.is_empty() => query::projection::Projection::new(f)?.apply(shown)?,
        _ => shown.clone(),
    };
    let reply = doc! {
        "lastErrorObject": {"n": 1, "updatedExisting": true},
        "value": value,
        "ok": 1.0,
    };
    let mut session = Document::new();
    for f in ["lsid", "txnNumber"] {
        if let Some(v) = cmd.get(f) {
            session.insert(f, v.clone());
        }
    }
    session.insert("stmtIds", vec![cmd.get_i32("stmtId").unwrap_or(0)]);
    let moved = move_document(ctx, &session, from, pre, post, Some(&reply)).await?;
    Ok(moved.then_some(reply))
}

/// Inserts `post` where its key belongs and deletes `pre` from `from`, recording in the
/// session of `sub` (its `lsid`, `txnNumber` and `stmtIds`) the update's outcome, or
/// `record`; whether it moved (false: `pre` changed meanwhile, and the insert was undone).
async fn move_document(
    ctx: &Ctx<'_>,
    sub: &Document,
    from: &str,
    pre: Document,
    post: Document,
    record: Option<&Document>,
) -> MongoResult<bool> {
    let to = ctx
        .table
        .shard_for_key(&ctx.table.key.value_of(&post)?)
        .to_string();
    let insert = doc! {"insert": ctx.coll, "documents": [post.clone()]};
    let inserted = ctx
        .each(std::slice::from_ref(&to), &insert)
        .await?
        .remove(0);
    match reply_ok(inserted.reply) {
        Ok(_) => {}
        // A retry after a router died between the insert and the delete meets its own
        // insert: the same document, so the move goes on.
        Err(e) if e.code == ErrorCode::DuplicateKey as i32 && holds(ctx, &to, &post).await? => {}
        Err(e) => return Err(e),
    }
    let mut delete = doc! {"_shardsvrDeleteIfUnchanged": ctx.coll, "doc": pre};
    if let Some(r) = record {
        delete.insert("record", r.clone());
    }
    for f in ["lsid", "txnNumber", "stmtIds"] {
        if let Some(v) = sub.get(f) {
            delete.insert(f, v.clone());
        }
    }
    let deleted = reply_ok(
        ctx.each(&[from.to_string()], &delete)
            .await?
            .remove(0)
            .reply,
    )?;
    if number(&deleted, "n") == 1 {
        return Ok(true);
    }
    let undo = doc! {"_shardsvrDeleteIfUnchanged": ctx.coll, "doc": post};
    reply_ok(ctx.each(&[to], &undo).await?.remove(0).reply)?;
    Ok(false)
}

/// Whether shard `shard` stores exactly `doc` under its `_id`.
async fn holds(ctx: &Ctx<'_>, shard: &str, doc: &Document) -> MongoResult<bool> {
    let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
    let find = doc! {"find": ctx.coll, "filter": {"_id": id}, "limit": 1, "singleBatch": true};
    let a = ctx.each(&[shard.to_string()], &find).await?.remove(0);
    let (_, found) = super::first_batch(&a.reply)?;
    Ok(found.first() == Some(doc))
}
