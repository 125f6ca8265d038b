//! `currentOp` and the `$currentOp` stage (what mongosh's `db.currentOp()` runs): every
//! operation this router is running, joined to the entry its shard member keeps for it,
//! so one entry shows where the operation is now and where its time went:
//! `routerMicros` (parsing, authorization, network), `routerQueueMicros` (waiting in the
//! router's line for one of the shard's slots), `shardQueueMicros` (waiting for a
//! ticket), `shardExecMicros` (running) and `replicationMicros` (waiting for the write
//! concern). Shard operations no router here owns (another router's) follow, with the
//! `member:opid` id `killOp` takes.

use std::time::SystemTime;

use bson::{doc, Bson, Document};
use wire::op_display;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::authz::{self, acts};
use crate::auth::roles::{Action, Target};
use crate::context::Session;
use crate::current_ops::{ConnOps, SlotWait};
use crate::owner::Owner;

/// Whose operations an answer lists: everyone's, or only the asking user's (`$ownOps`,
/// and `$currentOp`'s `allUsers: false`).
enum Whose {
    All,
    Own(Owner),
}

/// Only the user's own operations when `own` is asked with auth on (`inprog` is then
/// needed only if `inprog_anyway`); otherwise everyone's, which needs `inprog`.
async fn whose(
    session: &mut Session,
    db: &str,
    cmd: &Document,
    own: bool,
    inprog_anyway: bool,
) -> MongoResult<Whose> {
    if inprog_anyway || !own || !session.state.auth.enabled {
        let inprog = acts(&[Action::Inprog]);
        authz::require(session, Target::Cluster, inprog, "currentOp", db, cmd).await?;
    }
    Ok(if own && session.state.auth.enabled {
        Whose::Own(session.auth.owner())
    } else {
        Whose::All
    })
}

/// Fields of the `currentOp` command that are not part of its filter.
const NOT_FILTER: &[&str] = &[
    "currentOp",
    "$all",
    "$ownOps",
    "$truncateOps",
    "comment",
    "$db",
    "lsid",
    "$clusterTime",
    "$readPreference",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "readConcern",
];

/// `{currentOp: 1, $all?, <filter>...}`.
pub async fn command(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "currentOp")?;
    // As mongos: the command needs `inprog` even for `$ownOps` (mongod would not).
    let own_ops = cmd.get_bool("$ownOps").unwrap_or(false);
    let own = whose(session, db, cmd, own_ops, true).await?;
    let all = cmd.get_bool("$all").unwrap_or(false);
    let mut inprog = collect(session, all, &own).await;
    let filter: Document = cmd
        .iter()
        .filter(|(k, _)| !NOT_FILTER.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // `$all: true` overrides the filter, as in mongod.
    if !all && !filter.is_empty() {
        let matcher = query::matcher::Matcher::new(&filter)?;
        inprog.retain(|d| matcher.matches(d));
    }
    Ok(doc! {"inprog": inprog})
}

/// `aggregate: 1` on admin whose pipeline starts with `{$currentOp: {...}}`: the same
/// entries as a cursor, through the rest of the pipeline.
pub async fn aggregate(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "$currentOp")?;
    let stages = query::agg::command_stages(cmd)?;
    let spec = match stages[0].get("$currentOp") {
        Some(Bson::Document(d)) => d.clone(),
        _ => {
            return Err(MongoError::failed_to_parse(
                "$currentOp options must be specified in an object",
            ))
        }
    };
    let idle = spec.get_bool("idleConnections").unwrap_or(false);
    let all_users = spec.get_bool("allUsers").unwrap_or(false);
    let own = whose(session, db, cmd, !all_users, false).await?;
    let rest = query::agg::Pipeline::parse(&stages[1..])?;
    let entries = collect(session, idle, &own).await;
    let batch = rest.run(entries, &query::agg::NoCollections)?;
    Ok(doc! {
        "cursor": {"firstBatch": batch, "id": 0_i64, "ns": "admin.$cmd.aggregate"},
    })
}

fn admin_only(db: &str, what: &str) -> MongoResult<()> {
    if db == "admin" {
        return Ok(());
    }
    Err(MongoError::new(
        ErrorCode::Unauthorized,
        format!("{what} may only be run against the admin database."),
    ))
}

/// Every operation in progress: this router's (with idle connections when `idle`),
/// then the shard operations none of them owns.
async fn collect(session: &Session, idle: bool, whose: &Whose) -> Vec<Document> {
    let state = &session.state;
    let asked = doc! {"currentOp": 1};
    let mut shard_ops: Vec<(String, Document)> = Vec::new();
    for (member, reply) in state.shard.on_every_member("admin", &asked).await {
        let Ok(reply) = reply else { continue };
        let Ok(inprog) = reply.get_array("inprog") else {
            continue;
        };
        for e in inprog.iter().filter_map(Bson::as_document) {
            shard_ops.push((member.clone(), e.clone()));
        }
    }
    let mut out = Vec::new();
    for conn in state.current_ops.connections() {
        if let Some(d) = router_entry(&conn, &state.host, idle, &mut shard_ops, whose) {
            out.push(d);
        }
    }
    if let Whose::Own(_) = whose {
        // Shard operations no router connection here claimed have no known user.
        return out;
    }
    for (member, mut e) in shard_ops {
        let opid = e.get_i64("opid").unwrap_or_default();
        e.insert("shard", member.clone());
        e.insert("opid", format!("{member}:{opid}"));
        out.push(e);
    }
    out
}

/// One connection's entry (`None` when idle and idle connections were not asked for).
/// Claims the shard entries of its operation from `shard_ops`.
fn router_entry(
    conn: &ConnOps,
    host: &str,
    idle: bool,
    shard_ops: &mut Vec<(String, Document)>,
    whose: &Whose,
) -> Option<Document> {
    let now = bson::DateTime::from_system_time(SystemTime::now());
    let mut d = doc! {
        "type": "op",
        "host": host,
        "desc": format!("conn{}", conn.conn_id),
        "connectionId": conn.conn_id as i64,
        "client": conn.peer.as_str(),
        "currentOpTime": now.try_to_rfc3339_string().unwrap_or_default(),
    };
    if let Some(app) = conn.app_name.lock().clone() {
        d.insert("appName", app);
    }
    let running = conn.running.lock();
    let Some(r) = running.as_ref() else {
        drop(running);
        d.insert("active", false);
        // An idle connection has no user to show it to.
        return (idle && matches!(whose, Whose::All)).then_some(d);
    };
    if let Whose::Own(owner) = whose {
        if r.owner != *owner {
            return None;
        }
    }
    if let Some((user, db)) = &r.owner {
        d.insert(
            "effectiveUsers",
            vec![doc! {"user": user.as_str(), "db": db.as_str()}],
        );
    }
    let total = r.started.elapsed();
    let command = match &r.forwarded {
        Some((_, bytes)) => op_display::summarize(bytes),
        None => doc! {r.name.clone(): 1, "$db": r.db.clone()},
    };
    d.insert("active", true);
    d.insert("opid", r.opid as i64);
    d.insert("secs_running", total.as_secs() as i64);
    d.insert("microsecs_running", total.as_micros() as i64);
    d.insert("op", op_display::op_kind(&r.name));
    d.insert("ns", op_display::namespace(&r.db, &command));
    d.insert("command", command);
    d.insert(
        "startedAt",
        bson::DateTime::from_system_time(r.started_wall),
    );
    // The shard's entries for this operation (one, or none before it arrives there).
    let (mine, others): (Vec<_>, Vec<_>) =
        std::mem::take(shard_ops).into_iter().partition(|(_, e)| {
            e.get_str("client") == Ok(conn.peer.as_str())
                && e.get_i64("routerOpid") == Ok(r.opid as i64)
        });
    *shard_ops = others;
    let total_us = total.as_micros() as i64;
    let (in_line, router_queue) = match r.slot_wait {
        Some(SlotWait::Since(t)) => (true, t.elapsed()),
        Some(SlotWait::Waited(d)) => (false, d),
        None => (false, std::time::Duration::ZERO),
    };
    let (phase, shard_waits) = match (&r.forwarded, mine.first()) {
        _ if in_line => ("routerQueue", doc! {}),
        (None, _) => ("router", doc! {}),
        // Sent, not yet listed there, or already finished there: on the network.
        (Some(_), None) => ("network", doc! {}),
        (Some(_), Some((_, e))) => (
            match e.get_str("phase") {
                Ok("queued") => "shardQueue",
                Ok("replicating") => "replication",
                _ => "shardExec",
            },
            e.get_document("waits").cloned().unwrap_or_default(),
        ),
    };
    let shard_us: i64 = shard_waits.values().filter_map(Bson::as_i64).sum();
    let queue_us = router_queue.as_micros() as i64;
    let mut waits = doc! {
        "routerMicros": (total_us - shard_us - queue_us).max(0),
        "routerQueueMicros": queue_us,
    };
    waits.extend(shard_waits);
    d.insert("phase", phase);
    d.insert("waits", waits);
    let shards: Vec<Bson> = mine
        .iter()
        .map(|(member, e)| {
            Bson::Document(doc! {
                "shard": member.as_str(),
                "opid": format!("{member}:{}", e.get_i64("opid").unwrap_or_default()),
                "phase": e.get_str("phase").unwrap_or_default(),
            })
        })
        .collect();
    d.insert("shards", shards);
    Some(d)
}
