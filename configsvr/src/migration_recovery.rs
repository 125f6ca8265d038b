//! Recovering migrations and `movePrimary`s whose coordinator stopped: a former primary's,
//! or one of this primary's that failed half way. Until it is recovered the donor may
//! hold writes in its critical section, so the primary looks for orphaned locks
//! (`locks::orphans`) as soon as it steps up and every `Sweep::EVERY` after, and recovers
//! each (`migrate::recover_orphan`); nothing waits for the next migration.

use std::time::Duration;

use tracing::warn;
use wire::{ErrorCode, MongoResult};

use crate::context::Ctx;
use crate::sweeper::Sweep;
use crate::{locks, migrate};

pub struct MigrationRecovery;

impl Sweep for MigrationRecovery {
    const EVERY: Duration = Duration::from_secs(2);
    const DONE: &'static str = "recovered migrations abandoned by their coordinator";

    async fn sweep(ctx: &Ctx) -> MongoResult<usize> {
        let mut recovered = 0;
        for stale in locks::orphans(ctx).await? {
            match migrate::recover_orphan(ctx, &stale).await {
                Ok(()) => recovered += 1,
                // Another recovery has it (the next migration of the collection).
                Err(e) if e.code == ErrorCode::LockBusy as i32 => {}
                Err(e) => warn!(error = %e, lock = %stale, "recovering an abandoned migration"),
            }
        }
        Ok(recovered)
    }
}
