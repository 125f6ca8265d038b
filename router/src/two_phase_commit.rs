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
/// others. The coordinator's commit waits for the majority whatever the client's write
/// concern: the others commit only once the decision is durable. When its outcome is
/// unknown, the coordinator's answer to `decideTransaction` settles it.
async fn decide_and_commit(
    txn: &Txn,
    writers: &[Participant],
    at: bson::Timestamp,
) -> MongoResult<Document> {
    let mut cmd = txn.command("commitTransaction");
    cmd.insert("commitTimestamp", at);
    cmd.insert("recordDecision", true);
    let durable = Txn {
        fwd: Forward {
            w: 0,
            wtimeout_ms: 0,
            ..txn.fwd.clone()
        },
        ..txn.clone()
    };
    let decision = match durable.send(&writers[0].1, cmd).await {
        Ok(reply) if !reply.contains_key("writeConcernError") => Some(at),
        // A recovery aborted it first (or it was resolved already): ask what stands.
        Ok(_) | Err(_) => match decide(txn, writers).await {
            Ok(decision) => decision,
            Err(e) => return Err(e),
        },
    };
    finish(txn, &writers[1..], decision).await
}

/// The coordinator's decision for the transaction, final once answered: `Some` commit
/// time, or `None` for abort.
async fn decide(txn: &Txn, participants: &[Participant]) -> MongoResult<Option<bson::Timestamp>> {
    let (name, coordinator) = &participants[0];
    // Outside the transaction's statements (no `autocommit`): the coordinator answers it
    // whatever state the transaction is in there.
    let cmd = doc! {
        "decideTransaction": 1, "lsid": txn.lsid.clone(), "txnNumber": txn.number,
        "coordinator": name.clone(),
    };
    let decided = txn.send(coordinator, cmd).await?;
    Ok(match decided.get_str("decision") {
        Ok("commit") => decided.get_timestamp("commitTimestamp").ok(),
        _ => None,
    })
}

/// Delivers a decision to the participants `rest` (not the coordinator): commit at its
/// time, or abort. The reply to the client: `{}`, with the first write concern error a
/// commit met, or NoSuchTransaction for an abort. A participant that cannot be reached
/// is resolved by the config server's recovery.
async fn finish(
    txn: &Txn,
    rest: &[Participant],
    decision: Option<bson::Timestamp>,
) -> MongoResult<Document> {
    let Some(at) = decision else {
        let _ = txn.to_all(rest, |_| txn.command("abortTransaction")).await;
        return Err(MongoError::new(
            ErrorCode::NoSuchTransaction,
            format!("Transaction {} has been aborted.", txn.number),
        ));
    };
    let replies = txn
        .to_all(rest, |_| {
            let mut cmd = txn.command("commitTransaction");
            cmd.insert("commitTimestamp", at);
            cmd
        })
        .await;
    let mut reply = doc! {};
    for r in replies {
        match r {
            Ok(r) => {
                if let (false, Some(wce)) = (
                    reply.contains_key("writeConcernError"),
                    r.get("writeConcernError"),
                ) {
                    reply.insert("writeConcernError", wce.clone());
                }
            }
            Err(e) if e.code == ErrorCode::NoSuchTransaction as i32 => {}
            Err(e) => {
                tracing::warn!(error = %e, "a participant's commit failed after the decision; recovery finishes it")
            }
        }
    }
    Ok(reply)
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

/// `abortTransaction` over several shards: the coordinator decides first (a transaction
/// it committed stays committed, TransactionCommitted), then the others abort.
pub async fn abort(txn: &Txn, participants: &[Participant]) -> MongoResult<Document> {
    if participants.len() == 1 {
        return txn
            .send(&participants[0].1, txn.command("abortTransaction"))
            .await;
    }
    if decide(txn, participants).await?.is_some() {
        return Err(MongoError::new(
            ErrorCode::TransactionCommitted,
            format!("Transaction {} has been committed.", txn.number),
        ));
    }
    let _ = txn
        .to_all(&participants[1..], |_| txn.command("abortTransaction"))
        .await;
    Ok(doc! {})
}

/// A commit sent again through a router that did not run the transaction: the
/// coordinator's decision, made final now if there was none (then the transaction
/// aborts), and delivered to the other participants.
pub async fn recover_commit(txn: &Txn, participants: &[Participant]) -> MongoResult<Document> {
    let decision = decide(txn, participants).await?;
    finish(txn, &participants[1..], decision).await
}

fn bad_reply(shard: &str) -> MongoError {
    MongoError::new(
        ErrorCode::InternalError,
        format!("shard {shard} answered prepareTransaction without a prepareTimestamp"),
    )
}
