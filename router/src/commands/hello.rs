//! `hello` / `isMaster`: the handshake. Bulwark presents itself as a mongos
//! (`msg: "isdbgrid"`), so drivers treat it as a sharded cluster.

use bson::{Bson, Document};
use wire::{Compressor, MongoResult};

use crate::context::Session;

pub fn run(session: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    let legacy = !cmd.contains_key("hello");
    let mut reply = Document::new();
    reply.insert(
        if legacy {
            "ismaster"
        } else {
            "isWritablePrimary"
        },
        true,
    );
    reply.insert("msg", "isdbgrid");
    reply.insert("maxBsonObjectSize", wire::MAX_BSON_SIZE as i32);
    reply.insert("maxMessageSizeBytes", wire::MAX_MESSAGE_SIZE as i32);
    reply.insert("maxWriteBatchSize", wire::MAX_WRITE_BATCH as i32);
    reply.insert("localTime", bson::DateTime::now());
    reply.insert("logicalSessionTimeoutMinutes", 30);
    reply.insert("connectionId", session.id as i64);
    reply.insert("minWireVersion", 0);
    reply.insert("maxWireVersion", crate::MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    // Compression: the first compressor the client offers that we support.
    if let Some(Bson::Array(offered)) = cmd.get("compression") {
        session.compressors = offered
            .iter()
            .filter_map(|c| c.as_str().and_then(Compressor::from_name))
            .collect();
        let agreed: Vec<&str> = session.compressors.iter().map(|c| c.name()).collect();
        reply.insert("compression", agreed);
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}
