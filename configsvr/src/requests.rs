//! Running the operations routers ask for (`router::sharding::coordination`): each entry
//! of `config.coordinators` still pending runs as its own task on the primary, and its
//! outcome is written back to the entry. An entry a former primary was running is still
//! pending, and runs again from the start here: every operation is written to be run
//! again (and finds orphaned locks of its first run to recover: `migrate.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Document};
use parking_lot::Mutex;
use router::sharding::catalog::{call, delete, find_all};
use router::sharding::coordination::{outcome_fields, Request, DONE, FAILED, PENDING, REQUESTS};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use wire::MongoResult;

use crate::context::Ctx;
use crate::term::Term;
use crate::{drop_collection, drop_database, migrate, move_primary, shard_collection};

/// How often the primary looks for new requests.
const POLL: Duration = Duration::from_millis(20);
/// Finished entries older than this lost their router (it reads and deletes its own).
const KEEP_FINISHED: Duration = Duration::from_secs(600);
/// Polls between two removals of finished entries.
const CLEAN_EVERY: u32 = 1_000;

/// Runs requests until `stop`.
pub fn spawn(term: &Term) {
    let (ctx, settings, stop) = (term.ctx.clone(), term.settings.clone(), term.stop.clone());
    let inner = term.tasks.clone();
    term.tasks.spawn(async move {
        let started: Arc<Mutex<Started>> = Arc::default();
        let mut polls = 0u32;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(POLL) => {}
            }
            if settings.paused() {
                continue;
            }
            let found = tokio::select! {
                _ = stop.cancelled() => return,
                found = find_all(&ctx.config, "config", REQUESTS, doc! {"state": PENDING}) => found,
            };
            let Ok(pending) = found else {
                continue;
            };
            let ids: HashSet<ObjectId> = pending
                .iter()
                .filter_map(|e| e.get_object_id("_id").ok())
                .collect();
            started.lock().finished.retain(|id| ids.contains(id));
            for entry in pending {
                let Ok(id) = entry.get_object_id("_id") else {
                    continue;
                };
                if started.lock().claim(id) {
                    inner.spawn(run_one(ctx.clone(), entry, started.clone(), stop.clone()));
                }
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(CLEAN_EVERY) {
                if let Err(e) = clean(&ctx).await {
                    debug!(error = %e, "removing finished coordinator requests");
                }
            }
        }
    });
}

/// The requests this primary started: those running, and those whose outcome it recorded
/// while a poll that began earlier may still read them as pending (each stays here until
/// a poll no longer finds it pending, so no request runs twice).
#[derive(Default)]
struct Started {
    running: HashSet<ObjectId>,
    finished: HashSet<ObjectId>,
}

impl Started {
    /// Whether `id` is to run now (neither running nor finished here).
    fn claim(&mut self, id: ObjectId) -> bool {
        !self.finished.contains(&id) && self.running.insert(id)
    }

    /// `id` stopped running; `recorded`: its outcome is in its entry.
    fn end(&mut self, id: ObjectId, recorded: bool) {
        self.running.remove(&id);
        if recorded {
            self.finished.insert(id);
        }
    }
}

/// Runs the request `entry` and records its outcome, unless `stop` (a step-down) comes
/// first: then the entry stays pending for the next primary.
async fn run_one(
    ctx: Arc<Ctx>,
    entry: Document,
    started: Arc<Mutex<Started>>,
    stop: CancellationToken,
) {
    let Ok(id) = entry.get_object_id("_id") else {
        return;
    };
    let kind = entry.get_str("kind").unwrap_or_default().to_string();
    info!(%id, %kind, "running a coordinator request");
    let recorded = tokio::select! {
        _ = stop.cancelled() => false,
        result = execute(&ctx, &entry) => {
            let update = doc! {
                "q": {"_id": id, "state": PENDING},
                "u": {"$set": outcome_fields(&result)},
            };
            match call(&ctx.config, doc! {"update": REQUESTS, "updates": [update]}, true).await {
                Ok(_) => {
                    info!(%id, %kind, ok = result.is_ok(), "coordinator request finished");
                    true
                }
                Err(e) => {
                    debug!(%id, error = %e, "recording a coordinator request's outcome");
                    false
                }
            }
        }
    };
    started.lock().end(id, recorded);
}

async fn execute(ctx: &Ctx, entry: &Document) -> MongoResult<Document> {
    match Request::from_document(entry)? {
        Request::ShardCollection(cmd) => shard_collection::run(ctx, &cmd).await,
        Request::MoveRange { ns, min, max, to } => {
            migrate::move_range(ctx, &ns, &min, max.as_ref(), &to).await?;
            Ok(Document::new())
        }
        Request::MovePrimary { db, to } => {
            move_primary::move_primary(ctx, &db, &to).await?;
            Ok(Document::new())
        }
        Request::DropCollection { ns } => drop_collection::run(ctx, &ns).await,
        Request::DropDatabase { db } => drop_database::run(ctx, &db).await,
    }
}

/// Removes the finished entries no router came back for.
async fn clean(ctx: &Ctx) -> MongoResult<()> {
    let before = bson::DateTime::from_millis(
        bson::DateTime::now().timestamp_millis() - KEEP_FINISHED.as_millis() as i64,
    );
    let q = doc! {"state": {"$in": [DONE, FAILED]}, "finished": {"$lt": before}};
    delete(&ctx.config, REQUESTS, q).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_runs_once_even_when_a_late_poll_still_reads_it_pending() {
        let mut started = Started::default();
        let id = ObjectId::new();
        assert!(started.claim(id));
        assert!(!started.claim(id), "running");
        started.end(id, true);
        assert!(
            !started.claim(id),
            "a poll that began before its outcome was recorded"
        );
        started.finished.retain(|_| false);
        assert!(started.claim(id), "no longer pending, so never found again");
    }

    #[test]
    fn a_request_whose_outcome_was_not_recorded_runs_again() {
        let mut started = Started::default();
        let id = ObjectId::new();
        assert!(started.claim(id));
        started.end(id, false);
        assert!(started.claim(id));
    }
}
