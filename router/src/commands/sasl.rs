//! `saslStart` and `saslContinue`, and `hello`/`isMaster` with the two handshake fields
//! that need the user store: `saslSupportedMechs` and `speculativeAuthenticate`.

use bson::{Bson, Document};
use wire::MongoResult;

use crate::auth::sasl;
use crate::context::Session;

pub async fn start(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    sasl::start(session, db, cmd).await
}

pub async fn cont(session: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    sasl::cont(session, cmd).await
}

pub async fn hello(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let mut reply = super::hello::run(session, db, cmd)?;
    if let Some(Bson::String(spec)) = cmd.get("saslSupportedMechs") {
        // If the user store cannot answer, offer both mechanisms rather than fail the
        // handshake: authentication itself will report the problem.
        let mechs = match sasl::supported_mechs(session, spec).await {
            Ok(m) => m,
            Err(e) if e.code == wire::ErrorCode::BadValue as i32 => return Err(e),
            Err(_) => crate::auth::scram::Mechanism::ALL
                .map(|m| m.name())
                .to_vec(),
        };
        reply.insert("saslSupportedMechs", mechs);
    }
    if let Some(Bson::Document(spec)) = cmd.get("speculativeAuthenticate") {
        // A failed speculative attempt is not an error: the reply just omits the field
        // and the driver authenticates with saslStart as usual (MongoDB does the same).
        let auth_db = spec.get_str("db").unwrap_or(db);
        let step = if spec.contains_key("saslStart") {
            sasl::start(session, auth_db, spec).await.ok()
        } else if spec.contains_key("authenticate") {
            super::authenticate::run(session, auth_db, spec).await.ok()
        } else {
            None
        };
        if let Some(step) = step {
            reply.insert("speculativeAuthenticate", step);
        }
    }
    Ok(reply)
}
