//! Change streams on a replica-set member, read from the Raft log: every write entry
//! carries its change events (`repl::events`), so a stream is the committed log read from
//! a point in cluster time, and its resume tokens name the same event on every member.
//!
//! `log_reader` finds and reads applied entries; `entry_events` turns one entry into
//! events; `event_doc` shapes them as MongoDB does; `cursor` serves them.

mod cursor;
mod entry_events;
mod event_doc;
mod log_reader;

use bson::{Bson, Document};
use query::agg::Pipeline;
use query::change_stream::{check_pipeline, Spec, Start, Token};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::commands::args::{batch_reply, opt_count, opt_doc};
use crate::execution::cursor::DEFAULT_FIRST_BATCH;
use crate::node::Ctx;
use cursor::ChangeStreamCursor;
use log_reader::LogReader;

/// Opens a stream for `aggregate` on `coll` (None: `aggregate: 1`) whose pipeline starts
/// with `$changeStream`, and answers its first batch.
pub fn open(
    ctx: &Ctx,
    cmd: &Document,
    coll: Option<&str>,
    stages: &[Document],
) -> MongoResult<Document> {
    let replica = ctx.node.replica.clone().ok_or_else(|| {
        MongoError::new(
            ErrorCode::ChangeStreamUnsupportedTopology,
            "The $changeStream stage is only supported on replica sets",
        )
    })?;
    let spec = Spec::parse(stages[0].get("$changeStream").unwrap_or(&Bson::Null))?;
    check_pipeline(stages)?;
    let scope = spec.scope(ctx.db, coll)?;
    let vars = crate::commands::args::let_vars(cmd)?.unwrap_or_default();
    let (stream, rest) = Pipeline::parse(&stages[1..])?.split_streaming(vars);
    if !rest.is_empty() {
        return Err(MongoError::internal(
            "a change stream's stages must all stream",
        ));
    }
    let (at, after) = match &spec.start {
        Start::Now => {
            let t = replica.applied_time() + 1;
            (t, Token::high_water_mark(t))
        }
        Start::ResumeAfter(t) | Start::StartAfter(t) => (t.time, t.clone()),
        Start::At(t) => (*t, Token::high_water_mark(*t)),
    };
    // Writes after this one must not take times before the stream's start: a router
    // chose it from its own clock, which may be ahead of this member's.
    if matches!(spec.start, Start::At(_)) {
        let _ = replica.clock.advance(at);
    }
    let reader = LogReader::at_time(replica, at)?;
    let cursor = ChangeStreamCursor::new(reader, (spec, scope), stream, after);
    let max = opt_doc(cmd, "cursor")?
        .map(|c| opt_count(c, "batchSize"))
        .transpose()?
        .flatten()
        .map_or(DEFAULT_FIRST_BATCH, |b| b as usize);
    let ns = format!("{}.{}", ctx.db, coll.unwrap_or("$cmd.aggregate"));
    batch_reply(
        ctx.node,
        &ns,
        Box::new(cursor),
        None,
        max,
        false,
        &ctx.deadline,
    )
}
