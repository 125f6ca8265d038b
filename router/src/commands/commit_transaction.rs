//! `commitTransaction`, sent to the shard the transaction runs on (`transactions.rs`),
//! with the client's write concern.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::{RouterState, Session};
use crate::session_cache::SessionKey;
use crate::shard_client::{Forward, ShardHandle};
use crate::sharding::Cluster;
use crate::transactions;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    end(session, db, cmd, "commitTransaction").await
}

/// Sends `name` (commit or abort) for the session's transaction to its shard.
pub async fn end(
    session: &mut Session,
    db: &str,
    cmd: &Document,
    name: &str,
) -> MongoResult<Document> {
    if db != "admin" {
        return Err(MongoError::new(
            ErrorCode::Unauthorized,
            format!("{name} may only be run against the admin database."),
        ));
    }
    if !transactions::in_transaction(cmd) {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("{name} must be run within a transaction (autocommit: false)"),
        ));
    }
    let uid = super::sessions::connection_uid(session);
    let (key, number) = transactions::named(cmd, uid)?;
    let state = session.state.clone();
    let known = state.transactions.shard_of(&key, number);
    let shard = match (known, &state.cluster) {
        (Some(shard), _) => shard,
        // One shard holds everything: the transaction can only be there.
        (None, None) => state.shard.clone(),
        (None, Some(cluster)) => recovered_shard(cluster, cmd).await.ok_or_else(|| {
            MongoError::new(
                ErrorCode::NoSuchTransaction,
                format!(
                    "Transaction with txnNumber {number} was not started through this \
                         router, and the command names no recoveryToken"
                ),
            )
        })?,
    };
    let (w, wtimeout_ms) = super::forward::write_concern(cmd.get("writeConcern"))?;
    let lsid = cmd.get("lsid").cloned().unwrap_or(Bson::Null);
    let lsid = {
        let (recent, auth) = (&mut session.recent_session, &session.auth);
        super::sessions::bind_to_user(state.auth.enabled, recent, auth, lsid)
    };
    let sent = doc! {name: 1, "lsid": lsid, "txnNumber": number, "autocommit": false};
    let fwd = Forward {
        max_time_ms: 0,
        read_preference: Default::default(),
        w,
        wtimeout_ms,
        writes: true,
        pin: None,
        op_id: session.ops.current_opid(),
    };
    let (reply, _, _) = shard.run("admin", &sent, &fwd, &session.peer_text).await?;
    if name == "abortTransaction" {
        state.transactions.forget(&key, number);
    }
    Ok(reply)
}

/// The token a statement's reply carries (`recoveryToken`): the name of the shard the
/// transaction runs on. A driver sends it with `commitTransaction` and
/// `abortTransaction`, so a router that did not see the transaction start (the driver
/// sent the commit again through another) still finds the shard.
pub async fn recovery_token(
    state: &RouterState,
    key: &SessionKey,
    number: i64,
) -> Option<Document> {
    let shard = state.transactions.shard_of(key, number)?;
    let name = match &state.cluster {
        None => "shard".to_string(),
        Some(cluster) => cluster
            .shards()
            .await
            .ok()?
            .iter()
            .find(|s| s.handle.same_shard(&shard))?
            .name
            .clone(),
    };
    Some(bson::doc! {"recoveryShardId": name})
}

/// The shard a `recoveryToken` names, in a sharded cluster.
pub async fn recovered_shard(cluster: &Cluster, cmd: &Document) -> Option<ShardHandle> {
    let name = cmd
        .get_document("recoveryToken")
        .ok()?
        .get_str("recoveryShardId")
        .ok()?;
    cluster.shard(name).await.ok().map(|s| s.handle.clone())
}
