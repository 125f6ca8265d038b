//! `getMore` on a cursor the router holds (`merge_cursor.rs`, `change_stream.rs`).

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;
use crate::cursors::{Held, Merged};

pub async fn get_more(
    session: &Session,
    id: i64,
    merged: Merged,
    cmd: &Document,
) -> MongoResult<Document> {
    let max = super::scatter::count_arg(cmd, "batchSize")?
        .filter(|n| *n > 0)
        .map_or(usize::MAX, |n| n as usize);
    // One getMore at a time per cursor: a second waits for the first.
    let mut held = merged.lock().await;
    let cursors = &session.state.cursors;
    let batch = match &mut *held {
        Held::Merge(cursor) => cursor.next_batch(max).await,
        Held::Stream(stream) => {
            let wait = super::scatter::count_arg(cmd, "maxTimeMS")?
                .map(|ms| std::time::Duration::from_millis(ms as u64));
            stream
                .next_batch(max, wait)
                .await
                .map_err(super::change_stream::labelled)
        }
    };
    let batch = match batch {
        Ok(b) => b,
        Err(e) => {
            held.kill().await;
            cursors.closed(id);
            return Err(e);
        }
    };
    let (exhausted, ns, token) = match &*held {
        Held::Merge(c) => (c.exhausted(), format!("{}.{}", c.db, c.coll), None),
        Held::Stream(s) => (
            s.exhausted(),
            format!("{}.{}", s.db, s.coll),
            Some(s.resume_token()),
        ),
    };
    if exhausted {
        // A `limit` (or an aggregation's `$limit`) can end it while shards still hold
        // cursors: they are closed now rather than left to time out.
        held.kill().await;
        cursors.closed(id);
    }
    let mut cursor = doc! {
        "nextBatch": batch,
        "id": if exhausted { 0 } else { id },
        "ns": ns,
    };
    if let Some(token) = token {
        cursor.insert("postBatchResumeToken", token);
    }
    Ok(doc! {"cursor": cursor})
}
