//! `balancerStatus`: whether the balancer is on, whether a round runs now, and how many
//! rounds have run, in mongos's reply shape.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;
use crate::sharding::{admin_only, catalog, require};

pub async fn run(session: &mut Session, db: &str, _cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "balancerStatus")?;
    let cluster = require(session)?;
    let mode = catalog::balancer_mode(&cluster.config).await?;
    Ok(doc! {
        "mode": mode,
        "inBalancerRound": catalog::balancer_busy(&cluster.config).await?,
        "numBalancerRounds": catalog::balancer_rounds(&cluster.config).await?,
    })
}
