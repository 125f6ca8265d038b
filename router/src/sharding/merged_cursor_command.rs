//! `getMore` on a cursor the router holds (`merge_cursor.rs`).

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;
use crate::cursors::Merged;

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
    let mut cursor = merged.lock().await;
    let cursors = &session.state.cursors;
    let batch = match cursor.next_batch(max).await {
        Ok(b) => b,
        Err(e) => {
            cursor.kill().await;
            cursors.closed(id);
            return Err(e);
        }
    };
    let exhausted = cursor.exhausted();
    if exhausted {
        // A `limit` (or an aggregation's `$limit`) can end it while shards still hold
        // cursors: they are closed now rather than left to time out.
        cursor.kill().await;
        cursors.closed(id);
    }
    Ok(doc! {"cursor": {
        "nextBatch": batch,
        "id": if exhausted { 0 } else { id },
        "ns": format!("{}.{}", cursor.db, cursor.coll),
    }})
}
