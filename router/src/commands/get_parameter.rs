//! `getParameter`: `"*"` lists every parameter; `{name: 1}` asks for one.

use bson::{doc, Bson, Document};
use wire::{MongoError, MongoResult};

use crate::context::Session;

fn parameters(session: &Session) -> Document {
    doc! {
        "featureCompatibilityVersion": {"version": "7.0"},
        // Drivers' test suites use configureFailPoint only when this is on.
        "enableTestCommands": session.state.config.enable_test_commands as i32,
        "authenticationMechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-1"],
        "maxIncomingConnections": session.state.config.max_connections as i64,
        "cursorTimeoutMillis": 600_000i64,
        "logicalSessionTimeoutMinutes": 30,
        "requireApiVersion": false,
        "transactionLifetimeLimitSeconds": 60,
        "internalQueryMaxBlockingSortMemoryUsageBytes": 104_857_600i64,
    }
}

pub async fn run(session: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    let all = parameters(session);
    let star = matches!(cmd.get("getParameter"), Some(Bson::String(s)) if s == "*")
        || matches!(cmd.get("getParameter"), Some(Bson::Document(d)) if d.get("allParameters") == Some(&Bson::Boolean(true)));
    if star {
        return Ok(all);
    }
    let mut out = Document::new();
    for (k, _) in cmd.iter().skip(1) {
        if k.starts_with('$') || k == "comment" || k == "lsid" {
            continue;
        }
        if let Some(v) = all.get(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    if out.is_empty() {
        return Err(MongoError::bad_value("no option found to get"));
    }
    Ok(out)
}
