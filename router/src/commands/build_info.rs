//! `buildInfo`: the version Bulwark is compatible with, and what it is built with.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub async fn run(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    let parts: Vec<i32> = crate::VERSION
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    let mut version_array = parts.clone();
    version_array.push(0);
    Ok(doc! {
        "version": crate::VERSION,
        "gitVersion": env!("CARGO_PKG_VERSION"),
        "versionArray": version_array,
        "bits": 64,
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": wire::MAX_BSON_SIZE as i32,
        "storageEngines": ["wiredTiger"],
        "javascriptEngine": "none",
        "allocator": "system",
        "modules": [],
        "sysInfo": "deprecated",
        "openssl": {"running": "rustls", "compiled": "rustls"},
        "buildEnvironment": {"distmod": "bulwark", "target_arch": std::env::consts::ARCH, "target_os": std::env::consts::OS},
    })
}
