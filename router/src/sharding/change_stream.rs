//! Change streams through the router: the stream is opened on every shard (each reads its
//! own log, `shard::change_stream`) from one explicit start, and the router merges the
//! shards' events in resume-token order.
//!
//! A shard's `postBatchResumeToken` promises that none of its later events sorts at or
//! before it, so an event is returned once it sorts at or before every shard's next
//! event or promise. A shard that has nothing to say holds the others back until its
//! promise passes their next event: the router then asks it to reach that event's time
//! (`reachTime`), which on an idle shard writes one empty entry after it, so the stream
//! never waits for a shard's periodic no-op as MongoDB's routers do.
//!
//! Every shard is asked, whatever the stream watches: a collection's documents can be on
//! any shard, and a migration, `movePrimary` or `shardCollection` mid-stream then needs no
//! second path. Shards send only events in the stream's scope.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use query::change_stream::{check_pipeline, Spec, Start, Token};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::shard_client::{reply_ok, Forward, ShardHandle};

fn all_ended() -> MongoError {
    MongoError::new(
        ErrorCode::ChangeStreamFatalError,
        "every shard's change stream ended",
    )
}

/// The field of a shard `getMore` that asks for an answer as soon as the shard's stream
/// reads further (`shard::commands::get_more`).
const RETURN_ON_PROGRESS: &str = "$_returnOnProgress";

/// How long a `getMore` without `maxTimeMS` waits for events (MongoDB's default).
const DEFAULT_AWAIT: Duration = Duration::from_secs(1);
/// Events asked of a shard per call.
const SHARD_BATCH: i32 = 1000;

/// One shard's stream.
struct Source {
    handle: ShardHandle,
    member: usize,
    id: i64,
    buffer: Tokened,
    /// None of the shard's later events sorts at or before it.
    promise: Token,
    /// A `getMore` to it is under way.
    asked: bool,
}

impl Source {
    /// The least token this shard may still return.
    fn floor(&self) -> &Token {
        self.buffer.front().map_or(&self.promise, |(t, _)| t)
    }

    /// Whether the shard may still return an event before `token`: its stream is open,
    /// nothing is buffered from it, and its promise is before `token`.
    fn holds_back(&self, token: &Token) -> bool {
        self.id != 0 && self.buffer.is_empty() && self.promise < *token
    }
}

pub struct StreamMerge {
    pub db: String,
    /// The cursor's namespace's collection part (`$cmd.aggregate` for `aggregate: 1`).
    pub coll: String,
    sources: Vec<Source>,
    /// The token of the last event returned, or the start.
    last: Token,
    /// An `invalidate` was returned: the stream is over.
    ended: bool,
    client: String,
    /// The shards' `getMore`s under way, by source: they outlive a client's `getMore`
    /// that returned before them, and the next one takes their answers.
    in_flight: tokio::task::JoinSet<(usize, MongoResult<Document>)>,
    /// The time the shards holding back the merge were last asked to reach.
    reach_asked: Option<u64>,
}

/// Whether `cmd` is an `aggregate` that opens a change stream.
pub fn opens(cmd: &Document) -> MongoResult<bool> {
    let Ok(stages) = cmd.get_array("pipeline") else {
        return Ok(false);
    };
    let docs: Vec<Document> = stages
        .iter()
        .filter_map(|s| s.as_document().cloned())
        .collect();
    query::change_stream::opens_stream(&docs)
}

impl StreamMerge {
    /// Opens the stream of `cmd` (an `aggregate` in `db`) on `shards`, and answers the
    /// first batch's documents.
    pub async fn open(
        shards: Vec<ShardHandle>,
        db: &str,
        cmd: &Document,
        client: &str,
    ) -> MongoResult<(StreamMerge, Vec<Document>)> {
        let stages: Vec<Document> = cmd
            .get_array("pipeline")
            .map_err(|_| MongoError::failed_to_parse("aggregate needs a pipeline"))?
            .iter()
            .filter_map(|s| s.as_document().cloned())
            .collect();
        let spec = Spec::parse(stages[0].get("$changeStream").unwrap_or(&Bson::Null))?;
        check_pipeline(&stages)?;
        check_read_concern(cmd)?;
        let coll = match cmd.get("aggregate") {
            Some(Bson::String(c)) => Some(c.as_str()),
            _ => None,
        };
        spec.scope(db, coll)?;
        let (shard_cmd, start) = shard_command(cmd, &stages, &spec)?;
        let calls = shards
            .iter()
            .map(|h| (h.clone(), shard_cmd.clone(), Forward::default()))
            .collect();
        let replies = run_all(db, calls, client).await;
        let mut sources = Vec::with_capacity(shards.len());
        let mut failed = None;
        for (handle, reply) in shards.into_iter().zip(replies) {
            match reply.and_then(|(r, member)| Ok((reply_ok(r)?, member))) {
                Ok((reply, member)) => {
                    let (id, buffer, promise) = batch_of(&reply, &start)?;
                    sources.push(Source {
                        handle,
                        member,
                        id,
                        buffer,
                        promise,
                        asked: false,
                    });
                }
                Err(e) => failed = Some(e),
            }
        }
        let mut merge = StreamMerge {
            db: db.to_string(),
            coll: coll.unwrap_or("$cmd.aggregate").to_string(),
            sources,
            last: start,
            ended: false,
            client: client.to_string(),
            in_flight: tokio::task::JoinSet::new(),
            reach_asked: None,
        };
        if let Some(e) = failed {
            merge.kill().await;
            return Err(e);
        }
        let max = crate::sharding::scatter::count_arg(
            &cmd.get_document("cursor").cloned().unwrap_or_default(),
            "batchSize",
        )?
        .map_or(101, |n| n as usize);
        let first = merge.release(max);
        Ok((merge, first))
    }

    pub fn exhausted(&self) -> bool {
        self.ended
    }

    pub fn resume_token(&self) -> Document {
        let open = self
            .sources
            .iter()
            .filter(|s| s.id != 0 || !s.buffer.is_empty());
        let floor = open.map(Source::floor).min();
        match floor {
            Some(f) if *f > self.last && self.sources.iter().all(|s| s.buffer.is_empty()) => {
                f.to_document()
            }
            _ => self.last.to_document(),
        }
    }

    /// Up to `max` events, waiting up to `await_for` for the first.
    pub async fn next_batch(
        &mut self,
        max: usize,
        await_for: Option<Duration>,
    ) -> MongoResult<Vec<Document>> {
        let until = Instant::now() + await_for.unwrap_or(DEFAULT_AWAIT);
        loop {
            let out = self.release(max);
            let left = until.saturating_duration_since(Instant::now());
            if !out.is_empty() || self.ended || left.is_zero() {
                return Ok(out);
            }
            self.ask(left);
            self.reach_asked = self.reach_held_back(self.reach_asked);
            match tokio::time::timeout(left, self.in_flight.join_next()).await {
                Err(_) => return Ok(out),
                Ok(None) => return Err(all_ended()),
                Ok(Some(joined)) => {
                    let (i, reply) = joined
                        .map_err(|e| MongoError::internal(format!("a shard call failed: {e}")))?;
                    let s = &mut self.sources[i];
                    s.asked = false;
                    let (id, buffer, promise) = batch_of(&reply?, &s.promise)?;
                    (s.id, s.buffer, s.promise) = (id, buffer, promise);
                }
            }
        }
    }

    /// Sends a `getMore` to every open shard with nothing buffered and none under way,
    /// waiting up to `left` there, or less once its stream reads further
    /// (`$_returnOnProgress`), so that a shard's new promise is heard of at once.
    fn ask(&mut self, left: Duration) {
        for (i, s) in self.sources.iter_mut().enumerate() {
            if !s.buffer.is_empty() || s.id == 0 || s.asked {
                continue;
            }
            s.asked = true;
            let cmd = doc! {
                "getMore": s.id,
                "collection": &self.coll,
                "batchSize": SHARD_BATCH,
                "maxTimeMS": left.as_millis() as i64,
                RETURN_ON_PROGRESS: true,
            };
            let fwd = Forward {
                pin: Some(s.member),
                ..Default::default()
            };
            let (handle, db, client) = (s.handle.clone(), self.db.clone(), self.client.clone());
            self.in_flight.spawn(async move {
                let reply = handle.run(&db, &cmd, &fwd, &client).await;
                (i, reply.and_then(|(r, _, _)| reply_ok(r)))
            });
        }
    }

    /// Returns the events every shard has passed, in token order.
    fn release(&mut self, max: usize) -> Vec<Document> {
        let mut out = Vec::new();
        while out.len() < max && !self.ended {
            let Some(next) = self
                .sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.buffer.front().map(|(t, _)| (i, t)))
                .min_by(|a, b| a.1.cmp(b.1))
                .map(|(i, _)| i)
            else {
                break;
            };
            let head = &self.sources[next].buffer[0].0;
            if self.sources.iter().any(|s| s.holds_back(head)) {
                break;
            }
            let (token, d) = self.sources[next].buffer.pop_front().expect("checked");
            self.ended = d.get_str("operationType") == Ok("invalidate");
            self.last = token;
            out.push(d);
        }
        out
    }

    /// Asks the shards that hold back the earliest buffered event to reach its time,
    /// unless they were asked for that time already (`asked`); the time asked for.
    fn reach_held_back(&self, asked: Option<u64>) -> Option<u64> {
        match self.held_back_time() {
            Some(t) if asked != Some(t) => {
                self.reach(t);
                Some(t)
            }
            _ => asked,
        }
    }

    /// The time of the earliest event buffered behind a shard's promise, if any.
    fn held_back_time(&self) -> Option<u64> {
        let head = self
            .sources
            .iter()
            .filter_map(|s| s.buffer.front())
            .map(|(t, _)| t)
            .min()?;
        let held = self.sources.iter().any(|s| s.holds_back(head));
        held.then_some(head.time)
    }

    /// Asks every shard whose promise is before `t` to reach `t`, without waiting: the
    /// shard's waiting `getMore` answers once it has.
    fn reach(&self, t: u64) {
        let mark = Token::high_water_mark(t + 1);
        for s in self.sources.iter().filter(|s| s.holds_back(&mark)) {
            let cmd = doc! {"_shardsvrReachTime": 1, "time": proto::cluster_clock::to_bson(t)};
            let (handle, db, client) = (s.handle.clone(), self.db.clone(), self.client.clone());
            tokio::spawn(async move {
                if let Err(e) = handle.run(&db, &cmd, &Forward::default(), &client).await {
                    tracing::debug!(error = %e, "asking a shard to reach a change stream's time");
                }
            });
        }
    }

    /// Closes the shards' streams.
    pub async fn kill(&mut self) {
        self.in_flight.abort_all();
        for s in &mut self.sources {
            if s.id != 0 {
                let cmd = doc! {"killCursors": &self.coll, "cursors": [s.id]};
                let fwd = Forward {
                    pin: Some(s.member),
                    ..Default::default()
                };
                let _ = s.handle.run(&self.db, &cmd, &fwd, &self.client).await;
                s.id = 0;
            }
        }
    }
}

/// Runs each call on its shard in parallel; the replies (with the member that answered)
/// in the calls' order.
async fn run_all(
    db: &str,
    calls: Vec<(ShardHandle, Document, Forward)>,
    client: &str,
) -> Vec<MongoResult<(Document, usize)>> {
    let mut set = tokio::task::JoinSet::new();
    let n = calls.len();
    for (i, (handle, cmd, fwd)) in calls.into_iter().enumerate() {
        let (db, client) = (db.to_string(), client.to_string());
        set.spawn(async move {
            let r = handle.run(&db, &cmd, &fwd, &client).await;
            (i, r.map(|(reply, member, _)| (reply, member)))
        });
    }
    let mut out: Vec<MongoResult<(Document, usize)>> = (0..n)
        .map(|_| Err(MongoError::internal("a shard call did not finish")))
        .collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((i, r)) = joined {
            out[i] = r;
        }
    }
    out
}

/// The `aggregate` each shard runs: the same stages, with the start made explicit so
/// that every shard starts at the same point.
fn shard_command(
    cmd: &Document,
    stages: &[Document],
    spec: &Spec,
) -> MongoResult<(Document, Token)> {
    let mut stream = stages[0]
        .get_document("$changeStream")
        .cloned()
        .unwrap_or_default();
    let start = match &spec.start {
        Start::Now => {
            let t = crate::cluster_time::now();
            let at = (u64::from(t.time) << 32 | u64::from(t.increment)) + 1;
            stream.insert("startAtOperationTime", proto::cluster_clock::to_bson(at));
            Token::high_water_mark(at)
        }
        Start::At(t) => Token::high_water_mark(*t),
        Start::ResumeAfter(t) | Start::StartAfter(t) => t.clone(),
    };
    let mut pipeline: Vec<Bson> = vec![Bson::Document(doc! {"$changeStream": stream})];
    pipeline.extend(stages[1..].iter().cloned().map(Bson::Document));
    let mut out = doc! {
        "aggregate": cmd.get("aggregate").cloned().unwrap_or(Bson::Int32(1)),
        "pipeline": pipeline,
        "cursor": {"batchSize": SHARD_BATCH},
    };
    if let Some(l) = cmd.get("let") {
        out.insert("let", l.clone());
    }
    Ok((out, start))
}

/// Events with their tokens, in the order a shard returned them.
type Tokened = VecDeque<(Token, Document)>;

/// A shard's cursor id, events with their tokens, and promise.
fn batch_of(reply: &Document, previous: &Token) -> MongoResult<(i64, Tokened, Token)> {
    let (id, docs) = super::scatter::first_batch(reply)?;
    let mut buffer = VecDeque::with_capacity(docs.len());
    for d in docs {
        let token = Token::parse(d.get("_id").unwrap_or(&Bson::Null))?;
        buffer.push_back((token, d));
    }
    let promise = reply
        .get_document("cursor")
        .ok()
        .and_then(|c| c.get("postBatchResumeToken"))
        .map(Token::parse)
        .transpose()?
        .unwrap_or_else(|| previous.clone());
    Ok((id, buffer, promise.max(previous.clone())))
}

/// `aggregate` with `$changeStream` first, through this router.
pub async fn aggregate(
    session: &crate::context::Session,
    db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    let shards: Vec<ShardHandle> = match &session.state.cluster {
        Some(cluster) => cluster
            .shards()
            .await?
            .iter()
            .map(|s| s.handle.clone())
            .collect(),
        None => vec![session.state.shard.clone()],
    };
    let (merge, first) = StreamMerge::open(shards, db, cmd, &session.peer_text).await?;
    let token = merge.resume_token();
    let ns = format!("{db}.{}", merge.coll);
    let id = if merge.exhausted() {
        0
    } else {
        let owner = session.auth.owner();
        session
            .state
            .cursors
            .opened_merged(crate::cursors::Held::Stream(merge), owner)
    };
    Ok(doc! {"cursor": {
        "firstBatch": first,
        "id": id,
        "ns": ns,
        "postBatchResumeToken": token,
    }})
}

/// The codes after which a driver resumes a change stream (the change streams
/// specification's list; since wire version 9 the server says so with a label).
const RESUMABLE: [i32; 16] = [
    6, 7, 63, 89, 91, 133, 150, 189, 234, 262, 9001, 10107, 11600, 11602, 13388, 13435,
];

/// A `getMore` error of a change stream with the label that tells the driver whether to
/// resume from its last token (`ResumableChangeStreamError`) or give up.
pub fn labelled(e: MongoError) -> MongoError {
    let Some(label) = label_for(e.code) else {
        return e;
    };
    let mut extra = e.extra.as_deref().cloned().unwrap_or_default();
    if extra.contains_key("errorLabels") {
        return e;
    }
    extra.insert("errorLabels", vec![label]);
    e.with_extra(extra)
}

/// The label a change stream's `getMore` failing with `code` carries, if any.
pub fn label_for(code: i32) -> Option<&'static str> {
    if RESUMABLE.contains(&code) || code == ErrorCode::NotPrimaryOrSecondary as i32 {
        Some("ResumableChangeStreamError")
    } else if code == ErrorCode::ChangeStreamFatalError as i32 {
        Some("NonResumableChangeStreamError")
    } else {
        None
    }
}

/// A stream reads only majority-committed entries: any other read concern level is
/// refused, as MongoDB refuses it.
fn check_read_concern(cmd: &Document) -> MongoResult<()> {
    let level = cmd
        .get_document("readConcern")
        .ok()
        .and_then(|rc| rc.get_str("level").ok());
    match level {
        None | Some("majority") => Ok(()),
        Some(other) => Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("$changeStream reads majority-committed changes: readConcern level '{other}' is not allowed"),
        )),
    }
}
