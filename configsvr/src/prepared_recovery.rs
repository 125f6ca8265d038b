//! Resolving transactions left prepared by a router that stopped between the two phases
//! of a cross-shard commit (`router::two_phase_commit`). The config server primary asks
//! each shard, every `EVERY`, for transactions prepared longer than `STALE`; a live
//! commit resolves its participants in milliseconds. For each, the transaction's
//! coordinator decides (`decideTransaction`): a recorded decision means commit at its
//! time, none means abort, made final on the coordinator before it is answered. The
//! participant is then resolved the same way. Asking again, or a slow original router,
//! ends in the same state: the coordinator's log orders its commit and its abort.
//!
//! A pass that heard from every shard then lets each shard delete the decisions it keeps
//! as a coordinator, except those of transactions still prepared somewhere
//! (`pruneTransactionDecisions`), every `PRUNE_EVERY` passes.

use std::time::Duration;

use bson::{doc, Document};
use tracing::{debug, info, warn};
use wire::MongoResult;

use router::sharding::{internal, Cluster};

use crate::context::Ctx;
use crate::sweeper::Sweep;

/// A transaction prepared this long has lost its router.
const STALE: Duration = Duration::from_secs(10);
/// The pause between sweeps.
const EVERY: Duration = Duration::from_secs(2);
/// Passes between two prunings of decisions.
const PRUNE_EVERY: u64 = 30;

static PASSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub struct PreparedRecovery;

impl Sweep for PreparedRecovery {
    const EVERY: Duration = EVERY;
    const DONE: &'static str = "resolved transactions their router left prepared";

    fn sweep(ctx: &Ctx) -> impl std::future::Future<Output = MongoResult<usize>> + Send {
        sweep(ctx)
    }
}

/// One pass over every shard; how many prepared transactions it resolved. A shard that
/// cannot be asked is left for the next pass.
pub async fn sweep(cluster: &Cluster) -> MongoResult<usize> {
    let mut done = 0;
    let mut heard_all = true;
    let mut still_prepared = Vec::new();
    let shards = cluster.reload_shards().await?;
    for shard in &shards {
        let ask = doc! {"listPreparedTransactions": 1};
        let reply = match internal(&shard.handle, "admin", &ask, false).await {
            Ok(r) => r,
            Err(e) => {
                debug!(shard = %shard.name, error = %e, "listing prepared transactions");
                heard_all = false;
                continue;
            }
        };
        for txn in reply.get_array("transactions").into_iter().flatten() {
            let Some(txn) = txn.as_document() else {
                continue;
            };
            still_prepared.push(bson::Bson::Document(doc! {
                "session": txn.get("session").cloned().unwrap_or_default(),
                "txnNumber": txn.get_i64("txnNumber").unwrap_or_default(),
            }));
            let age = txn.get_i64("preparedForMillis").unwrap_or(0);
            if age < STALE.as_millis() as i64 {
                continue;
            }
            match resolve(cluster, &shard.handle, txn).await {
                Ok(decision) => {
                    info!(shard = %shard.name, decision, "resolved a transaction its router left prepared");
                    done += 1;
                }
                Err(e) => {
                    warn!(shard = %shard.name, error = %e, "resolving a prepared transaction")
                }
            }
        }
    }
    let pass = PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if heard_all && pass.is_multiple_of(PRUNE_EVERY) {
        let prune = doc! {"pruneTransactionDecisions": 1, "keep": still_prepared};
        for shard in &shards {
            if let Err(e) = internal(&shard.handle, "admin", &prune, true).await {
                debug!(shard = %shard.name, error = %e, "pruning transaction decisions");
            }
        }
    }
    Ok(done)
}

/// Asks the coordinator of the prepared transaction `txn` for its fate, and resolves it
/// on `shard` accordingly; the decision.
async fn resolve(
    cluster: &Cluster,
    shard: &router::shard_client::ShardHandle,
    txn: &Document,
) -> MongoResult<&'static str> {
    let named = doc! {
        "session": txn.get("session").cloned().unwrap_or_default(),
        "txnNumber": txn.get_i64("txnNumber").unwrap_or_default(),
    };
    let coordinator = cluster
        .shard(txn.get_str("coordinator").unwrap_or_default())
        .await?;
    let mut decide = doc! {"decideTransaction": 1};
    decide.extend(named.clone());
    let decided = internal(&coordinator.handle, "admin", &decide, true).await?;
    let mut resolve = doc! {"resolvePreparedTransaction": 1};
    resolve.extend(named);
    let decision = match decided.get_timestamp("commitTimestamp") {
        Ok(at) if decided.get_str("decision") == Ok("commit") => {
            resolve.insert("commitTimestamp", at);
            "commit"
        }
        _ => "abort",
    };
    internal(shard, "admin", &resolve, true).await?;
    Ok(decision)
}
