//! `authenticate` with `mechanism: "MONGODB-X509"` on `$external`: the connection
//! becomes the user its TLS client certificate names (`auth::x509`). MongoDB's other
//! `authenticate` mechanism (MONGODB-CR) is long gone; SCRAM goes through `saslStart`.

use bson::{doc, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::sasl::truncate;
use crate::context::Session;

pub const X509: &str = "MONGODB-X509";
const EXTERNAL: &str = "$external";

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let mechanism = cmd.get_str("mechanism").unwrap_or_default();
    if mechanism != X509 {
        return Err(MongoError::new(
            ErrorCode::MechanismUnavailable,
            format!(
                "Unsupported mechanism '{}' for authenticate",
                truncate(mechanism)
            ),
        ));
    }
    if db != EXTERNAL {
        return Err(MongoError::new(
            ErrorCode::ProtocolError,
            "X.509 authentication must always use the $external database.",
        ));
    }
    let Some(subject) = session.auth.x509_subject.clone() else {
        return Err(failed(
            session,
            "",
            "No verified subject name available from client",
        ));
    };
    let named = match cmd.get("user") {
        None => None,
        Some(bson::Bson::String(u)) => Some(u.as_str()),
        Some(_) => return Err(MongoError::type_mismatch("'user' must be a string")),
    };
    if let Some(named) = named {
        if named != subject {
            let why = "There is no x.509 client certificate matching the user.";
            return Err(failed(session, named, why));
        }
    }
    let auth = session.state.auth.clone();
    let Some(record) = auth.user(EXTERNAL, &subject).await? else {
        return Err(failed(session, &subject, "Authentication failed."));
    };
    crate::auth::sasl::sign_in(session, &record, X509).await?;
    Ok(doc! {"dbname": EXTERNAL, "user": subject})
}

/// Counts and audits a failure; the client hears only that it failed.
fn failed(session: &mut Session, user: &str, why: &str) -> MongoError {
    session.auth.failures += 1;
    if let Some(log) = &session.state.audit {
        log.authentication(&session.actor(), user, EXTERNAL, X509, false);
    }
    tracing::warn!(user = %truncate(user), peer = %session.peer_text, reason = why, "X.509 authentication failed");
    MongoError::new(ErrorCode::AuthenticationFailed, why)
}
