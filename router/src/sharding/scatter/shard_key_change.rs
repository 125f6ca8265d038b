//! An update (or `findAndModify`) that changes a document's shard key, in a retryable
//! write (MongoDB allows it there and in transactions; anything else gets
//! `IllegalOperation`).
//!
//! The statement goes to the shard holding the document. If the new key stays in that
//! shard's ranges, the shard applies it like any update. Otherwise it applies nothing and
//! answers `WouldChangeOwningShard` (283) with the document before and after, and the
//! router moves the document (`sharding/doc_move.rs`): an intent recorded on the old
//! shard, the new document inserted on the shard owning its key, the old one deleted
//! with `_shardsvrDeleteIfUnchanged` as the update's statement of its retryable write
//! (so a retry is recognised and applies once). A move whose router died between the
//! insert and the delete is finished by the config server primary
//! (`configsvr/src/move_recovery.rs`); if the
//! old document changed in between, the insert is undone and the update starts again.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::{number, Ctx};
use crate::sharding::doc_move::{DocMove, ShardCalls};
use crate::sharding::routing::RoutingTable;

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

/// Moves the document from shard `from` (see `doc_move`), recording in the session of
/// `sub` (its `lsid`, `txnNumber` and `stmtIds`) the update's outcome, or `record`;
/// whether it moved (false: `pre` changed meanwhile, and the update starts again).
async fn move_document(
    ctx: &Ctx<'_>,
    sub: &Document,
    from: &str,
    pre: Document,
    post: Document,
    record: Option<&Document>,
) -> MongoResult<bool> {
    let mut session = Document::new();
    for f in ["lsid", "txnNumber", "stmtIds"] {
        if let Some(v) = sub.get(f) {
            session.insert(f, v.clone());
        }
    }
    DocMove {
        coll: ctx.coll.to_string(),
        from: from.to_string(),
        pre,
        post,
        session,
        record: record.cloned(),
    }
    .run(ctx)
    .await
}

impl ShardCalls for Ctx<'_> {
    fn table(&self) -> &RoutingTable {
        &self.table
    }

    async fn call(&self, shard: &str, cmd: Document) -> MongoResult<Document> {
        Ok(self.each(&[shard.to_string()], &cmd).await?.remove(0).reply)
    }
}
