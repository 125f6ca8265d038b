//! A cursor over several shards' cursors, held by the router: a `find` that touched
//! several shards streams from all of them, merge-sorted when it has a sort, with `skip`
//! and `limit` applied here (each shard was asked for `skip + limit` documents and no
//! skip). An aggregation whose stages after the shards' all stream runs them here, on
//! the merged stream (`MergeCursor::then`); otherwise its merged result is held here
//! whole and handed out in batches.

use std::collections::VecDeque;

use bson::{doc, Document};
use query::agg::Stream;
use query::projection::Projection;
use query::sort::SortSpec;
use wire::MongoResult;

use crate::shard_client::{Forward, ShardHandle};

/// Documents asked of a shard per `getMore`.
const SHARD_BATCH: i32 = 1000;
/// A batch stops growing past this many bytes (a reply must stay under 16 MB).
const BATCH_BYTES: usize = 8 * 1024 * 1024;

/// One shard's cursor.
pub struct Source {
    /// `None` for results computed here.
    pub handle: Option<ShardHandle>,
    /// The member holding the cursor.
    pub member: usize,
    /// 0 once the shard has nothing more.
    pub id: i64,
    pub buffer: VecDeque<Document>,
}

pub struct MergeCursor {
    pub db: String,
    pub coll: String,
    sources: Vec<Source>,
    sort: Option<SortSpec>,
    /// Applied here when the shards could not (they needed the sort fields).
    projection: Option<Projection>,
    skip: u64,
    /// Documents still to return under `limit`.
    remaining: Option<u64>,
    /// An aggregation's streaming stages, run on each merged document, and what they
    /// made of the last one and has not been returned yet.
    after: Option<Stream>,
    pending: VecDeque<Document>,
    client: String,
}

impl MergeCursor {
    pub fn new(db: &str, coll: &str, sources: Vec<Source>, client: &str) -> MergeCursor {
        MergeCursor {
            db: db.to_string(),
            coll: coll.to_string(),
            sources,
            sort: None,
            projection: None,
            skip: 0,
            remaining: None,
            after: None,
            pending: VecDeque::new(),
            client: client.to_string(),
        }
    }

    /// Results already computed (an aggregation merged here).
    pub fn buffered(db: &str, coll: &str, docs: Vec<Document>) -> MergeCursor {
        let source = Source {
            handle: None,
            member: 0,
            id: 0,
            buffer: docs.into(),
        };
        MergeCursor::new(db, coll, vec![source], "")
    }

    pub fn sorted(mut self, sort: Option<SortSpec>) -> Self {
        self.sort = sort.filter(|s| !s.is_empty());
        self
    }

    pub fn projected(mut self, projection: Option<Projection>) -> Self {
        self.projection = projection;
        self
    }

    pub fn skip_limit(mut self, skip: u64, limit: Option<u64>) -> Self {
        self.skip = skip;
        self.remaining = limit;
        self
    }

    /// Runs `stages` on every merged document before it is returned.
    pub fn then(mut self, stages: Stream) -> Self {
        self.after = Some(stages);
        self
    }

    /// Whether nothing more can come.
    pub fn exhausted(&self) -> bool {
        if !self.pending.is_empty() {
            return false;
        }
        self.remaining == Some(0)
            || self.after.as_ref().is_some_and(Stream::done)
            || self
                .sources
                .iter()
                .all(|s| s.id == 0 && s.buffer.is_empty())
    }

    /// Up to `max` documents (fewer when they pass `BATCH_BYTES`).
    pub async fn next_batch(&mut self, max: usize) -> MongoResult<Vec<Document>> {
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max && bytes < BATCH_BYTES {
            let Some(d) = self.next().await? else { break };
            // Its encoded size: a reply must stay under the 48 MB message limit whatever
            // the documents hold.
            bytes += bson::to_vec(&d).map_or(0, |v| v.len());
            out.push(d);
        }
        Ok(out)
    }

    async fn next(&mut self) -> MongoResult<Option<Document>> {
        loop {
            if let Some(d) = self.pending.pop_front() {
                return Ok(Some(d));
            }
            if self.after.as_ref().is_some_and(Stream::done) {
                return Ok(None);
            }
            let Some(d) = self.next_merged().await? else {
                return Ok(None);
            };
            match &mut self.after {
                Some(stages) => self.pending.extend(stages.push(d)?),
                None => return Ok(Some(d)),
            }
        }
    }

    async fn next_merged(&mut self) -> MongoResult<Option<Document>> {
        loop {
            if self.remaining == Some(0) {
                return Ok(None);
            }
            let Some(i) = self.pick().await? else {
                return Ok(None);
            };
            let Some(d) = self.sources[i].buffer.pop_front() else {
                continue;
            };
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            if let Some(r) = &mut self.remaining {
                *r -= 1;
            }
            return match &self.projection {
                Some(p) => p.apply(&d).map(Some),
                None => Ok(Some(d)),
            };
        }
    }

    /// The source whose head comes next, after fetching what the choice needs: with a
    /// sort, every open source's head; without, the first open source's.
    async fn pick(&mut self) -> MongoResult<Option<usize>> {
        for i in 0..self.sources.len() {
            if self.sources[i].buffer.is_empty() && self.sources[i].id != 0 {
                self.get_more(i).await?;
                // A live cursor that returns nothing (tailable) cannot be merged: its
                // next document may sort anywhere.
                if self.sources[i].buffer.is_empty() && self.sources[i].id != 0 {
                    return Err(wire::MongoError::new(
                        wire::ErrorCode::IllegalOperation,
                        "a shard returned an empty batch on an open cursor; tailable cursors over several shards are not supported",
                    ));
                }
            }
            if self.sort.is_none() && !self.sources[i].buffer.is_empty() {
                return Ok(Some(i));
            }
        }
        let Some(sort) = &self.sort else {
            return Ok(None);
        };
        Ok(self
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.buffer.is_empty())
            .min_by(|(_, a), (_, b)| sort.compare(&a.buffer[0], &b.buffer[0]))
            .map(|(i, _)| i))
    }

    async fn get_more(&mut self, i: usize) -> MongoResult<()> {
        let s = &mut self.sources[i];
        let Some(handle) = &s.handle else {
            s.id = 0;
            return Ok(());
        };
        let cmd = doc! {"getMore": s.id, "collection": &self.coll, "batchSize": SHARD_BATCH};
        let fwd = Forward {
            pin: Some(s.member),
            ..Default::default()
        };
        let (reply, _, _) = handle.run(&self.db, &cmd, &fwd, &self.client).await?;
        let reply = crate::shard_client::reply_ok(reply)?;
        let (id, docs) = super::scatter::first_batch(&reply)?;
        s.id = id;
        s.buffer.extend(docs);
        Ok(())
    }

    /// Closes the shards' cursors still open.
    pub async fn kill(&mut self) {
        for s in &mut self.sources {
            if let (true, Some(handle)) = (s.id != 0, &s.handle) {
                let cmd = doc! {"killCursors": &self.coll, "cursors": [s.id]};
                let fwd = Forward {
                    pin: Some(s.member),
                    ..Default::default()
                };
                let _ = handle.run(&self.db, &cmd, &fwd, &self.client).await;
                s.id = 0;
            }
        }
    }
}
