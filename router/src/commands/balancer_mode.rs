//! `balancerStart` and `balancerStop`: turn the cluster's balancer on or off (a setting
//! on the config servers, read by the config server primary's balancer). Stopping waits, bounded,
//! for a round in progress to finish, as mongos does.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

/// How long `balancerStop` waits for a round in progress.
const STOP_WAIT: Duration = Duration::from_secs(60);

pub async fn start(session: &mut Session, db: &str, _cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "balancerStart")?;
    let cluster = require(session)?;
    catalog::set_balancer_mode(&cluster.config, "full").await?;
    Ok(doc! {})
}

pub async fn stop(session: &mut Session, db: &str, _cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "balancerStop")?;
    let cluster = require(session)?;
    catalog::set_balancer_mode(&cluster.config, "off").await?;
    let started = Instant::now();
    while catalog::balancer_busy(&cluster.config).await? {
        if started.elapsed() > STOP_WAIT {
            return Err(MongoError::new(
                ErrorCode::ExceededTimeLimit,
                "the balancer is off, but its round in progress has not finished",
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(doc! {})
}
