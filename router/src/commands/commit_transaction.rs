//! `commitTransaction`, sent to the transaction's one shard, or committed across its
//! shards in two phases (`two_phase_commit.rs`), with the client's write concern.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::{RouterState, Session};
use crate::session_cache::SessionKey;
use crate::shard_client::{Forward, ShardHandle};
use crate::sharding::Cluster;
use crate::transactions;
use crate::two_phase_commit::{self as two_phase, Participant, Txn};

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    end(session, db, cmd, "commitTransaction").await
}

/// Sends `name` (commit or abort) for the session's transaction to its shards.
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
    let known = state.transactions.participants(&key, number);
    let recovering = known.is_empty();
    let participants = match (recovering, &state.cluster) {
        (false, _) => named(&state, known).await?,
        // One shard holds everything: the transaction can only be there.
        (true, None) => vec![("shard".to_string(), state.shard.clone())],
        (true, Some(cluster)) => recovered(cluster, cmd).await.ok_or_else(|| {
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
    let txn = Txn {
        lsid,
        number,
        fwd: Forward {
            max_time_ms: 0,
            read_preference: Default::default(),
            w,
            wtimeout_ms,
            writes: true,
            pin: None,
            op_id: session.ops.current_opid(),
        },
        peer: session.peer_text.clone(),
    };
    let reply = match (name, participants.len()) {
        ("abortTransaction", _) => two_phase::abort(&txn, &participants).await,
        (_, 1) => {
            let sent =
                doc! {name: 1, "lsid": txn.lsid.clone(), "txnNumber": number, "autocommit": false};
            let (reply, _, _) = participants[0]
                .1
                .run("admin", &sent, &txn.fwd, &txn.peer)
                .await?;
            Ok(reply)
        }
        _ if recovering => two_phase::recover_commit(&txn, &participants).await,
        _ => two_phase::commit(&txn, &participants).await,
    };
    if name == "abortTransaction" {
        state.transactions.forget(&key, number);
    }
    reply
}

/// Participants' names, as the catalog has them (a single replica set's is `shard`).
async fn named(state: &RouterState, shards: Vec<ShardHandle>) -> MongoResult<Vec<Participant>> {
    let Some(cluster) = &state.cluster else {
        return Ok(shards
            .into_iter()
            .map(|s| ("shard".to_string(), s))
            .collect());
    };
    let all = cluster.shards().await?;
    shards
        .into_iter()
        .map(|h| {
            let name = all
                .iter()
                .find(|s| s.handle.same_shard(&h))
                .map(|s| s.name.clone())
                .ok_or_else(|| {
                    MongoError::new(
                        ErrorCode::ShardNotFound,
                        "a shard of the transaction is no longer in the cluster",
                    )
                })?;
            Ok((name, h))
        })
        .collect()
}

/// The token a statement's reply carries (`recoveryToken`): the name of the shard that
/// coordinates the transaction, and the other participants' names when there are any. A
/// driver sends it with `commitTransaction` and `abortTransaction`, so a router that did
/// not see the transaction start (the driver sent the commit again through another) still
/// finds its shards.
pub async fn recovery_token(
    state: &RouterState,
    key: &SessionKey,
    number: i64,
) -> Option<Document> {
    let shards = state.transactions.participants(key, number);
    if shards.is_empty() {
        return None;
    }
    let names: Vec<String> = named(state, shards)
        .await
        .ok()?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut token = doc! {"recoveryShardId": names[0].clone()};
    if names.len() > 1 {
        token.insert("participants", names);
    }
    Some(token)
}

/// The shards a `recoveryToken` names, in a sharded cluster: the coordinator first.
pub async fn recovered(cluster: &Cluster, cmd: &Document) -> Option<Vec<Participant>> {
    let token = cmd.get_document("recoveryToken").ok()?;
    let first = token.get_str("recoveryShardId").ok()?;
    let mut names = vec![first.to_string()];
    if let Ok(all) = token.get_array("participants") {
        names = all
            .iter()
            .filter_map(|b| b.as_str().map(str::to_string))
            .collect();
    }
    if names.is_empty() || names[0] != first {
        return None;
    }
    let mut out = Vec::new();
    for name in names {
        let handle = cluster.shard(&name).await.ok()?.handle.clone();
        out.push((name, handle));
    }
    Some(out)
}
