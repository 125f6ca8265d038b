//! `serverStatus`: process, connection and operation counters.

use bson::{doc, Bson, Document};
use wire::MongoResult;

use crate::context::Session;
use crate::counters::Op;

pub async fn run(session: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    // Each shard member's admission pools and operations, as they are now.
    let asked = doc! {"serverStatus": 1};
    let members: Vec<Bson> = session
        .state
        .shard
        .on_every_member("admin", &asked)
        .await
        .into_iter()
        .map(|(member, reply)| {
            let mut d = reply.unwrap_or_else(|e| doc! {"error": e.to_string()});
            d.remove("ok");
            d.insert("member", member);
            Bson::Document(d)
        })
        .collect();
    let s = &session.state;
    let c = &s.counters;
    let uptime = s.started.elapsed();
    let current = s.current_connections();
    let ingress = s.handshakes.stats();
    let rate = s
        .connection_rate
        .as_ref()
        .map(|r| r.stats())
        .unwrap_or_default();
    Ok(doc! {
        "host": &s.host,
        "version": crate::VERSION,
        "process": "mongos",
        "pid": std::process::id() as i64,
        "uptime": uptime.as_secs_f64().floor(),
        "uptimeMillis": uptime.as_millis() as i64,
        "localTime": bson::DateTime::now(),
        "connections": {
            "current": current,
            "available": s.config.max_connections as i64 - current,
            "totalCreated": s.connections_total.load(std::sync::atomic::Ordering::Relaxed) as i64,
        },
        "opcounters": {
            "insert": c.total(Op::Insert), "query": c.total(Op::Query), "update": c.total(Op::Update),
            "delete": c.total(Op::Delete), "getmore": c.total(Op::GetMore), "command": c.total(Op::Command),
        },
        "bulwark": {
            // Work the router abandoned because nobody was waiting for it any more.
            "cancelledByClientDisconnect": c.total(Op::CancelledByDisconnect),
            // How late the runtime runs tasks now, how long forwarded commands spend in
            // transit (router, network, the member's scheduling), and the commands shed
            // because of them (see `runtime_lag`).
            "runtimeLagMicros": s.lag.current().as_micros() as i64,
            "transitMicros": s.lag.transit().as_micros() as i64,
            // Forwarded commands' mean wait for an answer (all but the member's
            // execution), and the time by which one is due: a shorter maxTimeMS is
            // refused at once under load (`answer_time`).
            "answerMeanMicros": s.lag.answer.mean().as_micros() as i64,
            "answerDueMicros": s.lag.answer.due().as_micros() as i64,
            // The probability a command with a deadline is refused now (0 unless loaded).
            "shedProbability": s.lag.shed_probability(),
            "shedByRouter": c.total(Op::ShedByRouter),
            // Refused because the whole maxTimeMS was shorter than answers take now.
            "shedByAnswerTime": c.total(Op::ShedByAnswerTime),
            // The line for the shard's slots (see `forward_gate`; in a sharded cluster,
            // the config servers', and each shard's under `shardForwardGates`), and what
            // the lines refused.
            "forwardGate": s.shard.gate().to_document(),
            "shardForwardGates": s.cluster.as_ref().map(|c| c.gates()).unwrap_or_default(),
            "shedByForwardGate": c.total(Op::ShedByForwardGate),
            // Forwarded commands by where their time went (see `wait_histograms`).
            "waits": s.waits.to_document(),
            // Where commands wait on each shard member right now.
            "shardMembers": members,
            // New connections through the handshake gate (see `ingress`).
            "ingress": {
                "maxConcurrentHandshakes": s.config.handshake_concurrency() as i64,
                "handshakingNow": ingress.handshaking_now as i64,
                "queuedNow": ingress.queued_now as i64,
                "admittedAtOnce": ingress.admitted_at_once as i64,
                "admittedAfterQueueing": ingress.admitted_after_queueing as i64,
                "evictedOldest": ingress.evicted_oldest as i64,
                "rejectedWaitedTooLong": ingress.rejected_waited_too_long as i64,
                "rateLimiter": {
                    "perSec": s.config.connection_rate_per_sec,
                    "delayed": rate.delayed as i64,
                    "rejected": rate.rejected as i64,
                },
            },
        },
    })
}
