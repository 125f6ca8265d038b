//! Moving one document to the shard its new shard key belongs to, after an update in a
//! retryable write changed the key (`scatter/shard_key_change.rs`), in steps that each
//! may run twice, so that a move its router abandoned (it died, or lost its shards) is
//! finished by the config server primary (`configsvr/src/move_recovery.rs`) with the
//! same code:
//!
//! 1. **Intent** on the donor (`_shardsvrBeginMove`): the pre- and post-image and the
//!    statement's session, recorded only while the stored document is exactly the
//!    pre-image. From here on the move is durable.
//! 2. **Insert** the post-image on the shard that owns its key. Meeting the same document
//!    there is a second run of this step; meeting another one ends the move with
//!    `DuplicateKey`.
//! 3. **Delete** the pre-image on the donor if unchanged (`_shardsvrDeleteIfUnchanged`),
//!    recording the statement's outcome in its session and removing the intent, in one
//!    write: a retry of the update, or a second run of this step, is answered from the
//!    record.
//! 4. If the donor's document changed meanwhile, **undo** the insert (only if it is still
//!    exactly the post-image) and then remove the intent (`_shardsvrEndMove`); the update
//!    starts again.
//!
//! At every point, the document is on the donor (with or without an intent) or the move
//! finished. What MongoDB's internal transaction adds and this does not: between steps 2
//! and 3, a read may see both copies (for milliseconds, or until a router finishes an
//! abandoned move).

use std::future::Future;

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::routing::RoutingTable;
use crate::shard_client::reply_ok;

/// How a move reaches shards: a command's scatter context, or a recovering router's.
pub trait ShardCalls: Sync {
    /// The routing the move places the new document by.
    fn table(&self) -> &RoutingTable;
    /// Runs `cmd` (on the moved document's collection, in its database) on shard
    /// `shard`, with the routing's version; the shard's reply, as it answered.
    fn call(
        &self,
        shard: &str,
        cmd: Document,
    ) -> impl Future<Output = MongoResult<Document>> + Send;
}

/// One document's move.
pub struct DocMove {
    pub coll: String,
    /// The donor: the shard holding `pre`.
    pub from: String,
    pub pre: Document,
    pub post: Document,
    /// The statement's `lsid`, `txnNumber` and `stmtIds`.
    pub session: Document,
    /// What a retry must be answered (a `findAndModify` reply); else the update's outcome.
    pub record: Option<Document>,
}

impl DocMove {
    /// Runs the whole move; whether it happened (false: the document changed, the update
    /// starts again).
    pub async fn run(&self, c: &impl ShardCalls) -> MongoResult<bool> {
        let mut begin = doc! {
            "_shardsvrBeginMove": &self.coll, "pre": self.pre.clone(),
            "post": self.post.clone(), "session": self.session.clone(),
        };
        if let Some(r) = &self.record {
            begin.insert("record", r.clone());
        }
        let began = reply_ok(c.call(&self.from, begin).await?)?;
        if !began.get_bool("began").unwrap_or(false) {
            return Ok(false);
        }
        self.finish(c).await
    }

    /// Steps 2 to 4, after the intent is recorded; whether the document moved.
    pub async fn finish(&self, c: &impl ShardCalls) -> MongoResult<bool> {
        let to = c
            .table()
            .shard_for_key(&c.table().key.value_of(&self.post)?)
            .to_string();
        let insert = doc! {"insert": &self.coll, "documents": [self.post.clone()]};
        match reply_ok(c.call(&to, insert).await?) {
            Ok(_) => {}
            // A second run of this step meets its own insert.
            Err(e)
                if e.code == ErrorCode::DuplicateKey as i32
                    && self.holds(c, &to, &self.post).await? => {}
            Err(e) => {
                if e.code == ErrorCode::DuplicateKey as i32 {
                    self.end(c).await?;
                }
                return Err(e);
            }
        }
        let mut delete = doc! {"_shardsvrDeleteIfUnchanged": &self.coll, "doc": self.pre.clone()};
        if let Some(r) = &self.record {
            delete.insert("record", r.clone());
        }
        for (k, v) in &self.session {
            delete.insert(k.clone(), v.clone());
        }
        let deleted = match reply_ok(c.call(&self.from, delete).await?) {
            Ok(d) => super::scatter::number(&d, "n"),
            // The session has moved on to a newer statement: the client was answered, and
            // the delete (which removes the intent with it) did not happen, since the
            // intent is still there.
            Err(e) if e.code == ErrorCode::TransactionTooOld as i32 => 0,
            Err(e) => return Err(e),
        };
        if deleted == 1 {
            return Ok(true);
        }
        let undo = doc! {"_shardsvrDeleteIfUnchanged": &self.coll, "doc": self.post.clone()};
        reply_ok(c.call(&to, undo).await?)?;
        self.end(c).await?;
        Ok(false)
    }

    /// Removes the intent.
    async fn end(&self, c: &impl ShardCalls) -> MongoResult<()> {
        let id = self.pre.get("_id").cloned().unwrap_or(Bson::Null);
        reply_ok(
            c.call(&self.from, doc! {"_shardsvrEndMove": &self.coll, "id": id})
                .await?,
        )
        .map(|_| ())
    }

    /// Whether shard `shard` stores exactly `d` under its `_id`.
    async fn holds(&self, c: &impl ShardCalls, shard: &str, d: &Document) -> MongoResult<bool> {
        let id = d.get("_id").cloned().unwrap_or(Bson::Null);
        let find =
            doc! {"find": &self.coll, "filter": {"_id": id}, "limit": 1, "singleBatch": true};
        let (_, found) = super::scatter::first_batch(&reply_ok(c.call(shard, find).await?)?)?;
        Ok(found.first() == Some(d))
    }

    /// A move recorded on shard `from` (a `_shardsvrPendingMoves` entry).
    pub fn from_intent(from: &str, intent: &Document) -> MongoResult<DocMove> {
        let field = |f: &str| {
            intent.get_document(f).cloned().map_err(|_| {
                MongoError::internal(format!("a recorded move without '{f}': {intent}"))
            })
        };
        Ok(DocMove {
            coll: intent.get_str("coll").unwrap_or_default().to_string(),
            from: from.to_string(),
            pre: field("pre")?,
            post: field("post")?,
            session: field("session")?,
            record: intent.get_document("record").ok().cloned(),
        })
    }
}
