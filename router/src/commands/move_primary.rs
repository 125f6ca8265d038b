//! `movePrimary: db, to: shard`: makes `to` the primary shard of `db`, moving its
//! unsharded collections there. The config servers run the move
//! (`sharding::coordination`; the work is in `configsvr::move_primary`).

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::sharding::coordination::{self, Request};
use crate::sharding::{admin_only, require};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "movePrimary")?;
    let cluster = require(session)?;
    let name = cmd
        .get_str("movePrimary")
        .map_err(|_| MongoError::type_mismatch("'movePrimary' must be a database name"))?;
    if name.is_empty() || name.contains('.') {
        return Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            format!("invalid database name for movePrimary: '{name}'"),
        ));
    }
    if matches!(name, "admin" | "config" | "local") {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("Can't move primary for {name} database"),
        ));
    }
    let to = cmd
        .get_str("to")
        .map_err(|_| MongoError::failed_to_parse("movePrimary needs 'to', a shard name"))?;
    let request = Request::MovePrimary {
        db: name.to_string(),
        to: to.to_string(),
    };
    coordination::run(cluster, request).await?;
    cluster.forget_primary(name);
    Ok(doc! {})
}
