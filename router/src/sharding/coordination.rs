//! Cluster operations that span several nodes (`shardCollection`, `moveChunk`/`moveRange`,
//! `movePrimary`, dropping a sharded collection or a database) run on the config server replica set's primary, not in the router that
//! was asked. A router writes the request to `config.coordinators` (majority write
//! concern, so it is in the config servers' Raft log) and waits for its outcome there.
//! The config servers' coordinator (`configsvr::coordinator`) runs every request it finds,
//! resumes them after a failover, and records each outcome. A router that dies after
//! writing the request leaves nothing half done: the operation finishes without it.

use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use query::shard_key::KeyValue;
use wire::{ErrorCode, MongoError, MongoResult};

use super::{catalog, Cluster};

/// The `config` collection that holds the requests and their outcomes.
pub const REQUESTS: &str = "coordinators";

/// Request states: waiting or running; `DONE` and `FAILED` are final.
pub const PENDING: &str = "pending";
pub const DONE: &str = "done";
pub const FAILED: &str = "failed";

/// How long a router waits for an outcome before answering that the operation goes on
/// without it (the client may look at the catalog, or ask again: every request is
/// idempotent).
const WAIT_LIMIT: Duration = Duration::from_secs(900);
/// The longest pause between two looks at a request.
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// One operation for the coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `shardCollection`, as the client sent it (validated by the router first).
    ShardCollection(Document),
    /// Move the range `[min, max)` of `ns` (inside one chunk; `max` defaults to the
    /// chunk's end) to shard `to`.
    MoveRange {
        ns: String,
        min: KeyValue,
        max: Option<KeyValue>,
        to: String,
    },
    /// Make `to` the primary shard of `db`.
    MovePrimary { db: String, to: String },
    /// Drop the sharded collection `ns` everywhere.
    DropCollection { ns: String },
    /// Drop the database `db` everywhere, its sharded collections included.
    DropDatabase { db: String },
}

impl Request {
    pub fn to_document(&self) -> Document {
        match self {
            Request::ShardCollection(cmd) => doc! {"kind": "shardCollection", "cmd": cmd},
            Request::MoveRange { ns, min, max, to } => doc! {
                "kind": "moveRange", "ns": ns, "min": min.clone(),
                "max": max.clone().map_or(Bson::Null, Bson::Array), "to": to,
            },
            Request::MovePrimary { db, to } => doc! {"kind": "movePrimary", "db": db, "to": to},
            Request::DropCollection { ns } => doc! {"kind": "drop", "ns": ns},
            Request::DropDatabase { db } => doc! {"kind": "dropDatabase", "db": db},
        }
    }

    pub fn from_document(d: &Document) -> MongoResult<Request> {
        let text = |f: &str| {
            d.get_str(f).map(str::to_string).map_err(|_| {
                MongoError::failed_to_parse(format!("coordinator request without '{f}'"))
            })
        };
        match d.get_str("kind").unwrap_or_default() {
            "shardCollection" => Ok(Request::ShardCollection(
                d.get_document("cmd").cloned().unwrap_or_default(),
            )),
            "moveRange" => Ok(Request::MoveRange {
                ns: text("ns")?,
                min: d.get_array("min").cloned().unwrap_or_default(),
                max: d.get_array("max").ok().cloned(),
                to: text("to")?,
            }),
            "movePrimary" => Ok(Request::MovePrimary {
                db: text("db")?,
                to: text("to")?,
            }),
            "drop" => Ok(Request::DropCollection { ns: text("ns")? }),
            "dropDatabase" => Ok(Request::DropDatabase { db: text("db")? }),
            other => Err(MongoError::failed_to_parse(format!(
                "unknown coordinator request kind '{other}'"
            ))),
        }
    }
}

/// Has the config servers run `request`; returns its reply once it has finished there.
pub async fn run(cluster: &Cluster, request: Request) -> MongoResult<Document> {
    let id = ObjectId::new();
    let mut entry = request.to_document();
    entry.insert("_id", id);
    entry.insert("state", PENDING);
    entry.insert("submitted", bson::DateTime::now());
    let insert = doc! {"insert": REQUESTS, "documents": [entry]};
    catalog::call(&cluster.config, insert, true).await?;
    let outcome = wait(cluster, id).await?;
    // The outcome is read: the entry has done its work. The coordinator removes the
    // entries of routers that died before this.
    let _ = catalog::delete(&cluster.config, REQUESTS, doc! {"_id": id}).await;
    outcome
}

/// The outcome of request `id`, once it has one.
async fn wait(cluster: &Cluster, id: ObjectId) -> MongoResult<MongoResult<Document>> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
        // A config server failover makes reads fail for a moment; the request survives it.
        if let Ok(found) =
            catalog::find_all(&cluster.config, "config", REQUESTS, doc! {"_id": id}).await
        {
            let Some(entry) = found.into_iter().next() else {
                return Err(MongoError::new(
                    ErrorCode::NoSuchKey,
                    format!("coordinator request {id} vanished before it had an outcome"),
                ));
            };
            if let Some(outcome) = outcome(&entry) {
                return Ok(outcome);
            }
        }
        if started.elapsed() > WAIT_LIMIT {
            return Err(MongoError::new(
                ErrorCode::ExceededTimeLimit,
                format!(
                    "the config servers are still running request {id}; it finishes without \
                     this router"
                ),
            ));
        }
    }
}

/// A finished request's reply or error; `None` while it runs.
pub fn outcome(entry: &Document) -> Option<MongoResult<Document>> {
    match entry.get_str("state").unwrap_or_default() {
        DONE => Some(Ok(entry.get_document("reply").cloned().unwrap_or_default())),
        FAILED => {
            let e = entry.get_document("error").cloned().unwrap_or_default();
            let code = e.get_i32("code").unwrap_or(ErrorCode::InternalError as i32);
            Some(Err(MongoError::coded(
                code,
                e.get_str("errmsg").unwrap_or("coordinator request failed"),
            )))
        }
        _ => None,
    }
}

/// The fields that record `result` on a request's entry.
pub fn outcome_fields(result: &MongoResult<Document>) -> Document {
    match result {
        Ok(reply) => doc! {"state": DONE, "reply": reply, "finished": bson::DateTime::now()},
        Err(e) => doc! {
            "state": FAILED, "finished": bson::DateTime::now(),
            "error": {"code": e.code, "codeName": e.code_name.as_ref(), "errmsg": &e.message},
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_outcomes_survive_their_documents() {
        for r in [
            Request::ShardCollection(doc! {"shardCollection": "a.b", "key": {"k": 1}}),
            Request::MoveRange {
                ns: "a.b".into(),
                min: vec![Bson::Int32(1)],
                max: None,
                to: "s1".into(),
            },
            Request::MoveRange {
                ns: "a.b".into(),
                min: vec![Bson::MinKey],
                max: Some(vec![Bson::Int32(5)]),
                to: "s1".into(),
            },
            Request::MovePrimary {
                db: "a".into(),
                to: "s0".into(),
            },
            Request::DropCollection { ns: "a.b".into() },
            Request::DropDatabase { db: "a".into() },
        ] {
            assert_eq!(Request::from_document(&r.to_document()).unwrap(), r);
        }
        let failed = outcome_fields(&Err(MongoError::new(ErrorCode::ShardNotFound, "no s9")));
        let e = outcome(&failed).unwrap().unwrap_err();
        assert_eq!((e.code, e.code_name.as_ref()), (70, "ShardNotFound"));
        let done = outcome_fields(&Ok(doc! {"millis": 0}));
        assert_eq!(outcome(&done).unwrap().unwrap(), doc! {"millis": 0});
        assert!(outcome(&doc! {"state": PENDING}).is_none());
    }
}
