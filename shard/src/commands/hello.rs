//! `hello` on a shard member: the replica-set view routers use to find the primary and
//! the members of their own site.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use crate::node::Ctx;

pub fn run(ctx: &Ctx, _cmd: &Document) -> MongoResult<Document> {
    let mut reply = doc! {
        "maxBsonObjectSize": wire::MAX_BSON_SIZE as i32,
        "maxMessageSizeBytes": wire::MAX_MESSAGE_SIZE as i32,
        "maxWriteBatchSize": wire::MAX_WRITE_BATCH as i32,
        "localTime": bson::DateTime::now(),
        "minWireVersion": 0,
        "maxWireVersion": 21,
    };
    let Some(replica) = &ctx.node.replica else {
        reply.insert("isWritablePrimary", true);
        return Ok(reply);
    };
    let status = replica.status();
    let config = &replica.config;
    let me = config.me().map_err(MongoError::internal)?;
    let host_of = |id: u64| {
        config
            .members
            .iter()
            .find(|m| m.id == id)
            .map(|m| Bson::String(m.host.clone()))
    };
    let hosts: Vec<Bson> = config
        .members
        .iter()
        .filter(|m| !m.arbiter)
        .map(|m| Bson::String(m.host.clone()))
        .collect();
    let arbiters: Vec<Bson> = config
        .members
        .iter()
        .filter(|m| m.arbiter)
        .map(|m| Bson::String(m.host.clone()))
        .collect();
    reply.insert("isWritablePrimary", status.writable);
    reply.insert(
        "secondary",
        !me.arbiter
            && status.role != raft::StateRole::Leader
            && !status.installing_snapshot
            && status.halted.is_none(),
    );
    reply.insert("arbiterOnly", me.arbiter);
    reply.insert("setName", config.set_name.clone());
    reply.insert("setVersion", 1);
    reply.insert("hosts", hosts);
    if !arbiters.is_empty() {
        reply.insert("arbiters", arbiters);
    }
    if let Some(p) = host_of(status.leader) {
        reply.insert("primary", p);
    }
    reply.insert("me", me.host.clone());
    reply.insert("tags", doc! {"site": me.site.clone()});
    reply.insert("term", status.term as i64);
    // How far this member has applied the log: routers derive staleness from it.
    reply.insert("bulwarkAppliedIndex", status.applied as i64);
    reply.insert("bulwarkMemberId", me.id as i64);
    let (time, term) = status.applied_time;
    if time != 0 {
        // The cluster time of the newest applied entry (`proto::cluster_clock`), as MongoDB's
        // members report their last write.
        let ts = proto::cluster_clock::to_bson(time);
        let date = bson::DateTime::from_millis(i64::from(ts.time) * 1000);
        reply.insert(
            "lastWrite",
            doc! {"opTime": {"ts": ts, "t": term as i64}, "lastWriteDate": date},
        );
    }
    Ok(reply)
}
