//! `killOp`: stops an operation. A number names one of this router's operations (the
//! `opid` of its `currentOp` entry): its client is answered `Interrupted` (11601) at once,
//! and the call to the shard is dropped, which stops the shard's work at its next yield
//! point. A string `member:opid` names a shard operation, and is passed to that member.
//!
//! As in MongoDB, `killop` on the cluster allows killing any operation, and without it a
//! user may kill their own (a router operation run by the same user).

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::authz::{self, acts};
use crate::auth::roles::{Action, Target};
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    if db != "admin" {
        return Err(MongoError::new(
            ErrorCode::Unauthorized,
            "killOp may only be run against the admin database.",
        ));
    }
    match cmd.get("op") {
        None => Err(MongoError::failed_to_parse(
            "BSON field 'killOp.op' is missing but a required field",
        )),
        Some(Bson::String(s)) => {
            let (member, opid) = s
                .rsplit_once(':')
                .and_then(|(m, n)| Some((m, n.parse::<i64>().ok()?)))
                .ok_or_else(|| {
                    MongoError::new(
                        ErrorCode::BadValue,
                        format!("invalid op : {s}. Op ID must be a number or member:number"),
                    )
                })?;
            may_kill_any(session, db, cmd).await?;
            let killed = doc! {"killOp": 1, "op": opid};
            session
                .state
                .shard
                .on_member(member, "admin", &killed)
                .await?;
            Ok(doc! {"info": "attempting to kill op"})
        }
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
            let opid = match v {
                Bson::Int32(n) => *n as i64,
                Bson::Int64(n) => *n,
                Bson::Double(f) if f.fract() == 0.0 => *f as i64,
                _ => -1,
            };
            if opid < 0 {
                return Err(MongoError::new(
                    ErrorCode::BadValue,
                    format!("invalid op : {v}. Op ID must be a non-negative integer"),
                ));
            }
            if let Err(e) = may_kill_any(session, db, cmd).await {
                let owner = session.state.current_ops.owner_of(opid as u64);
                let own =
                    matches!(owner, Some(Some(ref o)) if Some(o) == session.auth.owner().as_ref());
                if !own {
                    return Err(e);
                }
            }
            // mongod answers the same whether or not the operation was still running.
            session.state.current_ops.kill(opid as u64);
            Ok(doc! {"info": "attempting to kill op"})
        }
        Some(v) => Err(MongoError::type_mismatch(format!(
            "BSON field 'killOp.op' must be a number or a string, not {v}"
        ))),
    }
}

/// Whether the connection holds `killop` on the cluster (always, with auth off).
async fn may_kill_any(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<()> {
    let killop = acts(&[Action::Killop]);
    authz::require(session, Target::Cluster, killop, "killOp", db, cmd).await
}
