//! `hostInfo`: the machine the router runs on.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub async fn run(session: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(1);
    Ok(doc! {
        "system": {"currentTime": bson::DateTime::now(), "hostname": &session.state.host, "numCores": cores, "cpuArch": std::env::consts::ARCH},
        "os": {"type": std::env::consts::OS},
        "extra": {},
    })
}
