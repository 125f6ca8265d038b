//! Committing a transaction across shards: two phases, the first participant
//! coordinating (`shard::sessions::txn::decisions`).
//!
//! 1. **Prepare** every participant at once. Each checks its part as a commit would and
//!    holds it prepared at a prepare time it answers, durable on its replica set; a
//!    participant that wrote nothing answers `readOnly` and is done (the coordinator never
//!    is: it must hold the decision).
//! 2. **Decide**: the commit time is the latest prepare time. The coordinator commits
//!    first, recording the decision in the same replicated entry. From that entry on the
//!    transaction is committed; before it, any failure aborts it.
//! 3. **Commit** the other participants at the same time, so a reader at any cluster time
//!    sees all of the transaction or none of it.
//!
//! A router that stops between the phases leaves participants prepared. The config
//! server's primary finds them (`configsvr::prepared_recovery`) and asks the
//! coordinator, whose answer is final (`decideTransaction`). A driver that sends the
//! commit again through another router (with the `recoveryToken`) gets the same answer.

use bson::{doc, Bson, Document};
use tokio::task::JoinSet;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::shard_client::{reply_ok, Forward, ShardHandle};

/// A transaction being committed: what every message to its participants carries.
#[derive(Clone)]
pub struct Txn {
    pub lsid: Bson,
    pub number: i64,
    /// The client's write concern, for the commits.
    pub fwd: Forward,
    pub peer: String,
}

/// A participant: its shard's name and handle.
pub type Participant = (String, ShardHandle);

impl Txn {
    fn command(&self, name: &str) -> Document {
        doc! {name: 1, "lsid": self.lsid.clone(), "txnNumber": self.number, "autocommit": false}
    }

    async fn send(&self, shard: &ShardHandle, cmd: Document) -> MongoResult<Document> {
        let (reply, _, _) = shard.run("admin", &cmd, &self.fwd, &self.peer).await?;
        reply_ok(reply)
    }

    /// Sends `cmd(i)` to participant `i` of `to`, all at once; the replies in order.
    async fn to_all(
        &self,
        to: &[Participant],
        cmd: impl Fn(usize) -> Document,
    ) -> Vec<MongoResult<Document>> {
        let mut set = JoinSet::new();
        for (i, (_, shard)) in to.iter().enumerate() {
            let (txn, shard, cmd) = (self.clone(), shard.clone(), cmd(i));
            set.spawn(async move { (i, txn.send(&shard, cmd).await) });
        }
        let mut replies: Vec<Option<MongoResult<Document>>> = (0..to.len()).map(|_| None).collect();
        while let Some(done) = set.join_next().await {
            if let Ok((i, reply)) = done {
                replies[i] = Some(reply);
            }
        }
        replies
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(MongoError::new(ErrorCode::InternalError, "a send stopped"))
                })
            })
            .collect()
    }
}

/// Commits the transaction across `participants` (the first coordinates).
pub async fn commit(txn: &Txn, participants: &[Participant]) -> MongoResult<Document> {
    let coordinator = participants[0].0.clone();
    let prepared = txn
        .to_all(participants, |i| {
            let mut cmd = txn.command("prepareTransaction");
            cmd.insert("coordinator", coordinator.clone());
            cmd.insert("isCoordinator", i == 0);
            cmd
        })
        .await;
    let mut commit_at: Option<bson::Timestamp> = None;
    let mut writers = Vec::new();
    for (i, reply) in prepared.into_iter().enumerate() {
        match reply {
            Ok(r) if r.get_bool("readOnly").unwrap_or(false) => {}
            Ok(r) => match r.get_timestamp("prepareTimestamp") {
                Ok(t) => {
                    commit_at = commit_at.max(Some(t));
                    writers.push(participants[i].clone());
                }
                Err(_) => {
                    return abort_after(txn, participants, bad_reply(&participants[i].0)).await
                }
            },
            // A commit sent again after it succeeded: the coordinator's decision answers.
            Err(e) if e.code == ErrorCode::TransactionCommitted as i32 => {
                return recover_commit(txn, participants).await;
            }
            Err(e) => return abort_after(txn, participants, e).await,
        }
    }
    let Some(at) = commit_at else {
        return Ok(doc! {});
    };
    decide_and_commit(txn, &writers, at).await
}

/// Phase two: the coordinator (first of `writers`) commits with the decision, then the
/// others.
async fn decide_and_commit(
    txn: &Txn,
    writers: &[Participant],
    at: bson::Timestamp,
) -> MongoResult<Document> {
    let commit = |decide: bool| {
        let mut cmd = txn.command("commitTransaction");
        cmd.insert("commitTimestamp", at);
        if decide {
            cmd.insert("recordDecision", true);
        }
        cmd
    };
    match txn.send(&writers[0].1, commit(true)).await {
        Ok(_) => {}
        Err(e) if e.code == ErrorCode::NoSuchTransaction as i32 => {
            // A recovery aborted it first: the decision is abort.
            return abort_after(txn, &writers[1..], e).await;
        }
        Err(e) => return Err(e),
    }
    let rest = txn.to_all(&writers[1..], |_| commit(false)).await;
    if let Some(Err(e)) = rest.iter().find(|r| r.is_err()) {
        // Committed: the decision is durable, and the config server's recovery commits a
        // participant this router could not reach.
        tracing::warn!(error = %e, "a participant's commit failed after the decision; recovery finishes it");
    }
    Ok(doc! {})
}

/// Aborts the transaction on `participants` (the coordinator first, which makes the
/// abort final) and answers `why` as NoSuchTransaction; if the coordinator cannot be
/// reached the outcome is unknown, and the error says so.
pub async fn abort_after(
    txn: &Txn,
    participants: &[Participant],
    why: MongoError,
) -> MongoResult<Document> {
    if let Some((first, rest)) = participants.split_first() {
        if let Err(e) = txn.send(&first.1, txn.command("abortTransaction")).await {
            if e.code != ErrorCode::NoSuchTransaction as i32 {
                return Err(e);
            }
        }
        let _ = txn.to_all(rest, |_| txn.command("abortTransaction")).await;
    }
    if why.code == ErrorCode::NoSuchTransaction as i32 {
        return Err(why);
    }
    Err(MongoError::new(
        ErrorCode::NoSuchTransaction,
        format!("the transaction was aborted: {}", why.message),
    ))
}

/// Aborts the transaction on every participant; the coordinator's answer is the reply.
pub async fn abort(txn: &Txn, participants: &[Participant]) -> MongoResult<Document> {
    let (first, rest) = participants
        .split_first()
        .expect("a transaction has a participant");
    let reply = txn.send(&first.1, txn.command("abortTransaction")).await;
    let _ = txn.to_all(rest, |_| txn.command("abortTransaction")).await;
    reply
}

/// A commit sent again through a router that did not run the transaction: the
/// coordinator's decision, made final now if there was none (then the transaction
/// aborts), and delivered to the other participants.
pub async fn recover_commit(txn: &Txn, participants: &[Participant]) -> MongoResult<Document> {
    // Outside the transaction's statements (no `autocommit`): the coordinator answers it
    // whatever state the transaction is in there.
    let cmd = doc! {"decideTransaction": 1, "lsid": txn.lsid.clone(), "txnNumber": txn.number};
    let decided = txn.send(&participants[0].1, cmd).await?;
    let at = match decided.get_str("decision") {
        Ok("commit") => decided.get_timestamp("commitTimestamp").ok(),
        _ => None,
    };
    let Some(at) = at else {
        let _ = txn
            .to_all(&participants[1..], |_| txn.command("abortTransaction"))
            .await;
        return Err(MongoError::new(
            ErrorCode::NoSuchTransaction,
            format!("Transaction {} was aborted", txn.number),
        ));
    };
    let rest = txn
        .to_all(&participants[1..], |_| {
            let mut cmd = txn.command("commitTransaction");
            cmd.insert("commitTimestamp", at);
            cmd
        })
        .await;
    if let Some(Err(e)) = rest.iter().find(|r| {
        r.as_ref()
            .is_err_and(|e| e.code != ErrorCode::NoSuchTransaction as i32)
    }) {
        tracing::warn!(error = %e, "delivering a recovered commit decision failed; recovery finishes it");
    }
    Ok(doc! {})
}

fn bad_reply(shard: &str) -> MongoError {
    MongoError::new(
        ErrorCode::InternalError,
        format!("shard {shard} answered prepareTransaction without a prepareTimestamp"),
    )
}
