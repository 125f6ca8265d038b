//! `commitTransaction`, sent to the shard the transaction runs on (`transactions.rs`),
//! with the client's write concern.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::shard_client::Forward;
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
        (None, Some(cluster)) => transactions::recovered_shard(cluster, cmd)
            .await
            .ok_or_else(|| {
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
