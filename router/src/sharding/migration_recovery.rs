//! Recovering migrations and `movePrimary`s whose coordinator stopped. A coordinator
//! renews its `config.migrations` lock after every step; a lock whose lease ran out
//! (`migrate::LEASE`) belongs to one that died or stalled, and until it is recovered the
//! donor may hold writes in its critical section. Every router looks for such locks every
//! `Sweep::EVERY` and recovers each one it wins (`migrate::recover_expired`: the takeover
//! is conditional, so one router recovers it), so nothing waits for the next migration.

use std::time::Duration;

use tracing::warn;
use wire::{ErrorCode, MongoResult};

use super::sweeper::Sweep;
use super::{catalog, migrate, Cluster};

pub struct MigrationRecovery;

impl Sweep for MigrationRecovery {
    const EVERY: Duration = Duration::from_secs(2);
    const DONE: &'static str = "recovered migrations abandoned by their coordinator";

    async fn sweep(cluster: &Cluster) -> MongoResult<usize> {
        let mut recovered = 0;
        for stale in catalog::expired_migrations(&cluster.config).await? {
            match migrate::recover_expired(cluster, &stale).await {
                Ok(()) => recovered += 1,
                // Another router won it.
                Err(e) if e.code == ErrorCode::LockBusy as i32 => {}
                Err(e) => warn!(error = %e, lock = %stale, "recovering an abandoned migration"),
            }
        }
        Ok(recovered)
    }
}
