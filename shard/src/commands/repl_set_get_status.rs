//! `replSetGetStatus`: members, states, optimes, health and site tags in MongoDB's shape.
//! Optimes carry the Raft index as the timestamp increment and the Raft term as `t`.

use bson::{doc, Bson, Document, Timestamp};
use wire::{MongoError, MongoResult};

use crate::node::Ctx;

const PRIMARY: i32 = 1;
const SECONDARY: i32 = 2;
/// MongoDB's state for a member that holds data but serves no reads: here, one whose
/// replication stopped (a storage failure it cannot get past by itself).
const RECOVERING: i32 = 3;
/// MongoDB's state for a member copying its data from another (initial sync).
const STARTUP2: i32 = 5;
const ARBITER: i32 = 7;
/// MongoDB's state for a member this one cannot reach.
const DOWN: i32 = 8;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let replica = super::args::replica(ctx)?;
    let status = replica.status();
    let config = &replica.config;
    let optime = |index: u64| doc! {"ts": Timestamp { time: 0, increment: index as u32 }, "t": status.term as i64};
    let mut members = Vec::new();
    for m in &config.members {
        let is_self = m.id == config.me;
        let state = if m.arbiter {
            ARBITER
        } else if is_self && status.installing_snapshot {
            STARTUP2
        } else if is_self && status.halted.is_some() {
            RECOVERING
        } else if m.id == status.leader {
            PRIMARY
        } else {
            SECONDARY
        };
        // The primary knows every member's progress; another member knows its own.
        let progress = status.matched.iter().find(|(id, _, _)| *id == m.id);
        let (applied, healthy) = match (is_self, progress) {
            (true, _) => (Some(status.applied), true),
            (false, Some((_, matched, active))) => (Some(*matched), *active),
            (false, None) => (None, status.leader != 0),
        };
        let state = if healthy { state } else { DOWN };
        let mut d = doc! {
            "_id": m.id as i32,
            "name": m.host.clone(),
            "health": if healthy { 1.0 } else { 0.0 },
            "state": state,
            "stateStr": match state {
                PRIMARY => "PRIMARY",
                ARBITER => "ARBITER",
                STARTUP2 => "STARTUP2",
                RECOVERING => "RECOVERING",
                DOWN => "(not reachable/healthy)",
                _ => "SECONDARY",
            },
            "tags": {"site": m.site.clone()},
            "priority": m.priority,
            "votes": m.votes as i32,
        };
        if let Some(i) = applied {
            d.insert("optime", optime(i));
        }
        if is_self {
            d.insert("self", true);
            d.insert("uptime", ctx.node.started.elapsed().as_secs() as i64);
        }
        if is_self {
            if let Some(why) = &status.halted {
                d.insert("infoMessage", format!("replication stopped: {why}"));
            }
        }
        members.push(Bson::Document(d));
    }
    let my_state = if config.me().map_err(MongoError::internal)?.arbiter {
        ARBITER
    } else if status.installing_snapshot {
        STARTUP2
    } else if status.halted.is_some() {
        RECOVERING
    } else if status.role == raft::StateRole::Leader {
        PRIMARY
    } else {
        SECONDARY
    };
    Ok(doc! {
        "set": config.set_name.clone(),
        "date": bson::DateTime::now(),
        "myState": my_state,
        "term": status.term as i64,
        "optimes": {
            "lastCommittedOpTime": optime(status.commit),
            "appliedOpTime": optime(status.applied),
        },
        "members": members,
    })
}
