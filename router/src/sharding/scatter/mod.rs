//! Commands on a sharded collection: each is sent to the shards its shard key allows
//! (all of them when it says nothing about the key), in parallel, and the replies are
//! merged into the one reply MongoDB would give.

mod aggregate;
mod count;
mod distinct;
mod explain;
mod find;
mod find_and_modify;
mod insert;
mod shard_key_change;
mod whole_collection;
mod write;
mod write_reply;

use std::sync::Arc;

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use super::routing::RoutingTable;
use super::{Cluster, Shard};
use crate::context::Session;
use crate::session_cache::SessionKey;
use crate::shard_client::Forward;
use crate::sharding::merge_cursor::Source;

pub use aggregate::{leading_filter, shard_local};

/// What every scattered command needs.
pub struct Ctx<'a> {
    pub session: &'a Session,
    pub cluster: &'a Cluster,
    pub table: Arc<RoutingTable>,
    pub db: &'a str,
    pub coll: &'a str,
    pub fwd: Forward,
    /// Shard calls sent by the current attempt: a write refused by the only shard it was
    /// sent to ran nowhere, and may be sent again even if it is not retryable.
    pub calls: std::sync::atomic::AtomicU32,
    /// The transaction the command is a statement of: each shard it reaches joins it.
    pub txn: Option<(SessionKey, i64)>,
}

/// One shard's answer.
pub struct Answer {
    pub shard: Arc<Shard>,
    pub reply: Document,
    /// The member that answered (a cursor continues there).
    pub member: usize,
}

/// Runs `name` on a sharded collection. A shard at another version than the routing
/// used answers `StaleConfig`; the command is then routed again with fresh routing (see
/// `versioning`), when that is safe: a read, a retryable write (the shards' session
/// records make statements that already ran apply once), or a write sent to one shard
/// only, which refused it whole. Other writes return the error, as a part of them may
/// have been applied.
pub async fn run(mut ctx: Ctx<'_>, name: &str, cmd: Document) -> MongoResult<Document> {
    use std::sync::atomic::Ordering::Relaxed;
    let writes = matches!(
        name,
        "insert" | "update" | "delete" | "findAndModify" | "findandmodify"
    );
    // Inside a transaction nothing is sent again: a statement's part that a shard ran
    // stays in the transaction, and the error ends the attempt (it is transient).
    let again_safe = ctx.txn.is_none() && (!writes || cmd.contains_key("txnNumber"));
    let mut attempt = 0;
    loop {
        ctx.calls.store(0, Relaxed);
        let result = dispatch(&ctx, name, cmd.clone()).await;
        let ran_nowhere = result.is_err() && ctx.calls.load(Relaxed) == 1;
        let stale = match &result {
            Err(e) if e.code == ErrorCode::StaleConfig as i32 => Some(e.clone()),
            Ok(reply) if writes => super::versioning::stale_error(reply),
            _ => None,
        };
        let retries = if ctx.txn.is_some() {
            0
        } else {
            super::versioning::STALE_RETRIES
        };
        let Some(error) = stale.filter(|_| attempt < retries) else {
            return result;
        };
        let shard = super::versioning::stale_shard(&error);
        let fresh = ctx
            .cluster
            .on_stale(&ctx.table.ns, shard.as_deref(), &error, attempt)
            .await?;
        match fresh {
            Some(table) if again_safe || ran_nowhere => ctx.table = table,
            _ => return result,
        }
        attempt += 1;
    }
}

async fn dispatch(ctx: &Ctx<'_>, name: &str, cmd: Document) -> MongoResult<Document> {
    match name {
        "insert" => insert::run(ctx, cmd).await,
        "update" | "delete" => write::run(ctx, name, cmd).await,
        "find" => find::run(ctx, cmd).await,
        "count" => count::run(ctx, cmd).await,
        "distinct" => distinct::run(ctx, cmd).await,
        "aggregate" => aggregate::run(ctx, cmd).await,
        "findAndModify" | "findandmodify" => find_and_modify::run(ctx, cmd).await,
        "explain" => explain::run(ctx, cmd).await,
        "drop" => whole_collection::drop(ctx).await,
        "createIndexes" | "dropIndexes" | "deleteIndexes" | "collMod" => {
            whole_collection::everywhere(ctx, cmd).await
        }
        "collStats" => whole_collection::coll_stats(ctx, cmd).await,
        "validate" => whole_collection::validate(ctx, cmd).await,
        "listIndexes" | "create" => whole_collection::on_primary(ctx, cmd).await,
        _ => Err(MongoError::new(
            ErrorCode::IllegalOperation,
            format!(
                "{name} is not supported on sharded collection {}",
                ctx.table.ns
            ),
        )),
    }
}

impl Ctx<'_> {
    pub fn ns(&self) -> String {
        format!("{}.{}", self.db, self.coll)
    }

    /// Runs `cmd` on each shard named, in parallel; answers in the order named. A shard
    /// that answers `ok: 0` makes the whole call fail with its error.
    pub async fn each(&self, shards: &[String], cmd: &Document) -> MongoResult<Vec<Answer>> {
        let per_shard: Vec<(String, Document)> =
            shards.iter().map(|s| (s.clone(), cmd.clone())).collect();
        self.each_own(per_shard).await
    }

    /// Like [`Ctx::each`], with a command of its own for each shard.
    pub async fn each_own(&self, calls: Vec<(String, Document)>) -> MongoResult<Vec<Answer>> {
        let mut set = tokio::task::JoinSet::new();
        for (i, (name, mut cmd)) in calls.into_iter().enumerate() {
            let shard = self.cluster.shard(&name).await?;
            versioned(&mut cmd, &self.table);
            self.join(&shard, &mut cmd)?;
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let db = self.db.to_string();
            let fwd = self.fwd.clone();
            let client = self.session.peer_text.clone();
            set.spawn(async move {
                let r = shard.handle.run(&db, &cmd, &fwd, &client).await;
                (i, shard, r)
            });
        }
        let mut answers = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (i, shard, r) =
                joined.map_err(|e| MongoError::internal(format!("shard call failed: {e}")))?;
            let (mut reply, member, _) = r?;
            reply.remove(wire::command_fields::TXN_READ_TIME);
            answers.push((
                i,
                Answer {
                    reply: ok(reply, &shard.name)?,
                    shard,
                    member,
                },
            ));
        }
        answers.sort_by_key(|(i, _)| *i);
        Ok(answers.into_iter().map(|(_, a)| a).collect())
    }

    /// Runs `cmd` on one shard; the reply as it came (`ok: 0` included).
    pub async fn one(&self, shard: &str, cmd: &Document) -> MongoResult<(Document, usize)> {
        let shard = self.cluster.shard(shard).await?;
        let mut cmd = cmd.clone();
        versioned(&mut cmd, &self.table);
        self.join(&shard, &mut cmd)?;
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (mut reply, member, _) = shard
            .handle
            .run(self.db, &cmd, &self.fwd, &self.session.peer_text)
            .await?;
        reply.remove(wire::command_fields::TXN_READ_TIME);
        if let Some(mut stale) = super::versioning::stale_error(&reply) {
            stale
                .extra
                .get_or_insert_with(Default::default)
                .insert("shardId", &shard.name);
            return Err(stale);
        }
        Ok((reply, member))
    }

    /// Makes `cmd` a statement of the command's transaction on `shard`, which joins it.
    fn join(&self, shard: &Shard, cmd: &mut Document) -> MongoResult<()> {
        if let Some((key, number)) = self.txn {
            let transactions = &self.session.state.transactions;
            let joined = transactions.enlist(key, number, false, &shard.handle)?;
            crate::transactions::join_fields(cmd, joined);
        }
        Ok(())
    }

    /// The primary shard of the collection's database.
    pub async fn primary(&self) -> MongoResult<Arc<Shard>> {
        self.cluster.primary(self.db, false).await
    }

    /// The shards a filter can touch.
    pub fn targets(&self, filter: &Document) -> Vec<String> {
        self.table.shards_for(filter)
    }
}

/// The shards' cursor replies as the sources of a merge cursor.
pub fn cursor_sources(answers: Vec<Answer>) -> MongoResult<Vec<Source>> {
    answers
        .into_iter()
        .map(|a| {
            let (id, docs) = first_batch(&a.reply)?;
            Ok(Source {
                handle: Some(a.shard.handle.clone()),
                member: a.member,
                id,
                buffer: docs.into(),
            })
        })
        .collect()
}

/// Adds the routing's version to a command that carries one.
fn versioned(cmd: &mut Document, table: &RoutingTable) {
    let name = cmd.keys().next().cloned().unwrap_or_default();
    super::versioning::attach(&name, cmd, table);
}

/// A shard's reply, or its error when it says `ok: 0` (a `StaleConfig` keeps its
/// `errInfo` and names the shard, for the retry).
fn ok(reply: Document, shard: &str) -> MongoResult<Document> {
    let good = match reply.get("ok") {
        Some(Bson::Double(d)) => *d == 1.0,
        Some(Bson::Int32(n)) => *n == 1,
        _ => false,
    };
    if good {
        return Ok(reply);
    }
    let code = reply
        .get_i32("code")
        .unwrap_or(ErrorCode::InternalError as i32);
    let msg = reply.get_str("errmsg").unwrap_or("command failed");
    let mut e = MongoError::coded(code, format!("{msg} (shard {shard})"));
    if code == ErrorCode::StaleConfig as i32 {
        let mut extra = bson::doc! {"shardId": shard};
        if let Ok(info) = reply.get_document("errInfo") {
            extra.insert("errInfo", info.clone());
        }
        e = e.with_extra(extra);
    }
    Err(e)
}

/// A number field of a reply as i64 (shards answer Int32 or Int64).
pub fn number(d: &Document, field: &str) -> i64 {
    match d.get(field) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) => *f as i64,
        _ => 0,
    }
}

/// An `i64` as the smallest integer type holding it, as MongoDB replies count.
pub fn count_value(n: i64) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

/// The first batch of a cursor reply.
pub fn first_batch(reply: &Document) -> MongoResult<(i64, Vec<Document>)> {
    let cursor = reply
        .get_document("cursor")
        .map_err(|_| MongoError::internal("shard sent a cursor reply without a cursor"))?;
    let batch = cursor
        .get_array("firstBatch")
        .or_else(|_| cursor.get_array("nextBatch"))
        .map_err(|_| MongoError::internal("shard sent a cursor without a batch"))?;
    Ok((
        cursor.get_i64("id").unwrap_or(0),
        batch
            .iter()
            .filter_map(|d| d.as_document().cloned())
            .collect(),
    ))
}

/// A non-negative integer argument (`limit`, `skip`, `batchSize`).
pub fn count_arg(cmd: &Document, field: &str) -> MongoResult<Option<i64>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(v) => query::order::as_i64_exact(v)
            .or_else(|| query::order::as_f64(v).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| MongoError::type_mismatch(format!("'{field}' must be a number"))),
    }
}
