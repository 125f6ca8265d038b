//! Finishing shard key moves their routers abandoned (`router::sharding::doc_move`). The
//! config server primary asks each shard, every `EVERY`, for move intents older than
//! `STALE`; a live move takes milliseconds, so an older one lost its router (or its
//! router lost the shards). Each is run again from its insert: every step may run twice,
//! so a pass finishing a move and a slow original router end in the same state.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use tracing::{debug, info, warn};
use wire::MongoResult;

use router::shard_client::Forward;
use router::sharding::doc_move::{DocMove, ShardCalls};
use router::sharding::routing::RoutingTable;
use router::sharding::{internal, versioning, Cluster};

use crate::context::Ctx;
use crate::sweeper::Sweep;

/// An intent this old has lost its router.
const STALE: Duration = Duration::from_secs(5);
/// The pause between sweeps.
const EVERY: Duration = Duration::from_secs(2);

pub struct MoveRecovery;

impl Sweep for MoveRecovery {
    const EVERY: Duration = EVERY;
    const DONE: &'static str = "finished shard key moves abandoned by their router";

    fn sweep(ctx: &Ctx) -> impl std::future::Future<Output = MongoResult<usize>> + Send {
        sweep(ctx)
    }
}

/// One pass over every shard; the moves finished or undone. A shard that cannot be asked,
/// or a move that fails, is logged and left for the next pass: it must not hold up the
/// moves behind it.
pub async fn sweep(cluster: &Cluster) -> MongoResult<usize> {
    let ask = doc! {"_shardsvrPendingMoves": 1, "olderThanMs": STALE.as_millis() as i64};
    let mut done = 0;
    for shard in cluster.reload_shards().await? {
        let reply = match internal(&shard.handle, "admin", &ask, false).await {
            Ok(r) => r,
            Err(e) => {
                debug!(shard = %shard.name, error = %e, "listing abandoned shard key moves");
                continue;
            }
        };
        for intent in reply.get_array("moves").into_iter().flatten() {
            let Some(intent) = intent.as_document() else {
                continue;
            };
            match finish(cluster, &shard.name, intent).await {
                Ok(true) => done += 1,
                Ok(false) => {}
                Err(e) => {
                    warn!(shard = %shard.name, error = %e, %intent, "finishing an abandoned shard key move")
                }
            }
        }
    }
    Ok(done)
}

/// Finishes (or undoes) the move `intent` recorded on shard `from`; false if its
/// collection is no longer sharded.
async fn finish(cluster: &Cluster, from: &str, intent: &Document) -> MongoResult<bool> {
    let db = intent.get_str("db").unwrap_or_default();
    let m = DocMove::from_intent(from, intent)?;
    let Some(table) = cluster.refresh(&format!("{db}.{}", m.coll)).await? else {
        return Ok(false);
    };
    let moved = m.finish(&Recovery { cluster, db, table }).await?;
    let id = m.pre.get("_id").unwrap_or(&Bson::Null);
    info!(shard = %from, db, coll = %m.coll, %id, moved, "finished an abandoned shard key move");
    Ok(true)
}

/// Shard calls of a recovery: versioned by the freshly read routing.
struct Recovery<'a> {
    cluster: &'a Cluster,
    db: &'a str,
    table: Arc<RoutingTable>,
}

impl ShardCalls for Recovery<'_> {
    fn table(&self) -> &RoutingTable {
        &self.table
    }

    async fn call(&self, shard: &str, mut cmd: Document) -> MongoResult<Document> {
        let name = cmd.keys().next().cloned().unwrap_or_default();
        versioning::attach(&name, &mut cmd, &self.table);
        let fwd = Forward {
            writes: name != "find",
            ..Default::default()
        };
        let shard = self.cluster.shard(shard).await?;
        let (reply, _, _) = shard
            .handle
            .run(self.db, &cmd, &fwd, "configsvr-move-recovery")
            .await?;
        Ok(reply)
    }
}
