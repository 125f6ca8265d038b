//! The SASL conversation on one connection, as MongoDB runs it:
//!
//! ```text
//! saslStart    {mechanism, payload: client-first}  -> {conversationId, done: false, payload: server-first}
//! saslContinue {conversationId, payload: client-final} -> {conversationId, done: false, payload: v=...}
//! saslContinue {conversationId, payload: ""}           -> {conversationId, done: true,  payload: ""}
//! ```
//!
//! With `options: {skipEmptyExchange: true}` the second reply is already `done: true`.
//! `hello {speculativeAuthenticate: {saslStart...}}` runs the first step inside the
//! handshake. A wrong password and an unknown user fail identically, after the same work.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use tracing::{info, warn};
use wire::{ErrorCode, MongoError, MongoResult};

use super::scram::{self, Mechanism, ScramError, ServerConversation};
use super::AuthedUser;
use crate::context::Session;
use crate::counters::Op;

pub(crate) struct Conversation {
    id: i32,
    db: String,
    skip_empty: bool,
    step: Step,
}

enum Step {
    /// Waiting for the client's proof.
    Proof(Box<ServerConversation>),
    /// Authenticated; waiting for the client's final empty message.
    Empty,
}

/// `saslStart` (also the body of `speculativeAuthenticate`).
pub async fn start(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    session.auth.conversation = None;
    let mechanism = match cmd.get("mechanism") {
        Some(Bson::String(m)) => m.as_str(),
        _ => {
            return Err(MongoError::failed_to_parse(
                "BSON field 'saslStart.mechanism' is missing but a required field",
            ))
        }
    };
    let Some(mech) = Mechanism::from_name(mechanism) else {
        return Err(MongoError::new(
            ErrorCode::MechanismUnavailable,
            format!(
                "Received authentication for mechanism {} which is unknown or not enabled",
                truncate(mechanism)
            ),
        ));
    };
    let payload = payload(cmd)?;
    let first = scram::parse_client_first(&payload).map_err(|e| fail(session, db, "", mech, e))?;
    let user = first.user.clone();
    if db.len() > scram::MAX_USER_LEN {
        return Err(MongoError::bad_value(
            "authentication database name is too long",
        ));
    }
    let auth = session.state.auth.clone();
    let record = auth.user(db, &user).await?;
    let (credential, fake) = match record.as_ref().and_then(|r| r.credential(mech)) {
        Some(c) => (c.clone(), false),
        None => (auth.fake_credential(mech, db, &user), true),
    };
    let nonce = auth.nonce_source.nonce();
    let (conv, server_first) = ServerConversation::start(mech, first, credential, fake, &nonce);
    session.auth.next_conversation_id = session.auth.next_conversation_id.wrapping_add(1).max(1);
    let id = session.auth.next_conversation_id;
    let skip_empty = cmd
        .get_document("options")
        .ok()
        .and_then(|o| o.get_bool("skipEmptyExchange").ok())
        .unwrap_or(false);
    session.auth.conversation = Some(Conversation {
        id,
        db: db.to_string(),
        skip_empty,
        step: Step::Proof(Box::new(conv)),
    });
    Ok(reply(id, false, server_first.into_bytes()))
}

/// `saslContinue`.
pub async fn cont(session: &mut Session, cmd: &Document) -> MongoResult<Document> {
    let id = match cmd.get("conversationId") {
        Some(Bson::Int32(n)) => *n,
        Some(Bson::Int64(n)) => i32::try_from(*n).unwrap_or(-1),
        Some(Bson::Double(d)) if d.fract() == 0.0 => *d as i32,
        _ => {
            return Err(MongoError::failed_to_parse(
                "BSON field 'saslContinue.conversationId' is missing but a required field",
            ))
        }
    };
    let payload = payload(cmd)?;
    let Some(conv) = session.auth.conversation.take() else {
        return Err(MongoError::new(
            ErrorCode::ProtocolError,
            "No SASL session state found",
        ));
    };
    if conv.id != id {
        // A reordered or replayed message ends the conversation: the client starts over.
        return Err(MongoError::new(
            ErrorCode::ProtocolError,
            "sasl: Mismatched conversation id",
        ));
    }
    match conv.step {
        Step::Proof(server) => {
            let mech = server.mechanism;
            let server_final = match server.finish(&payload) {
                Ok(v) => v,
                Err(e) => return Err(fail(session, &conv.db, &server.user, mech, e)),
            };
            let auth = session.state.auth.clone();
            let record = auth.user(&conv.db, &server.user).await?.ok_or_else(|| {
                fail(
                    session,
                    &conv.db,
                    &server.user,
                    mech,
                    ScramError::Authentication,
                )
            })?;
            sign_in(session, &record, mech.name()).await?;
            if !conv.skip_empty {
                session.auth.conversation = Some(Conversation {
                    step: Step::Empty,
                    ..conv
                });
                return Ok(reply(id, false, server_final.into_bytes()));
            }
            Ok(reply(id, true, server_final.into_bytes()))
        }
        Step::Empty => {
            if !payload.is_empty() {
                return Err(MongoError::bad_value(
                    "SCRAM conversation is complete; expected an empty payload",
                ));
            }
            Ok(reply(id, true, Vec::new()))
        }
    }
}

/// `hello {saslSupportedMechs: "db.user"}`. An unknown user gets the same answer as a
/// user with both mechanisms, so the reply does not reveal whether the user exists.
pub async fn supported_mechs(session: &Session, spec: &str) -> MongoResult<Vec<&'static str>> {
    let Some((db, user)) = spec.split_once('.') else {
        return Err(MongoError::bad_value(format!(
            "saslSupportedMechs must be <db>.<user>, got {}",
            truncate(spec)
        )));
    };
    let record = session.state.auth.user(db, user).await?;
    Ok(match record {
        Some(r) if !r.credentials.is_empty() => Mechanism::ALL
            .into_iter()
            .filter(|m| r.credential(*m).is_some())
            .map(Mechanism::name)
            .collect(),
        _ => Mechanism::ALL.into_iter().map(Mechanism::name).collect(),
    })
}

fn reply(id: i32, done: bool, payload: Vec<u8>) -> Document {
    doc! {
        "conversationId": id,
        "done": done,
        "payload": Binary { subtype: BinarySubtype::Generic, bytes: payload },
    }
}

fn payload(cmd: &Document) -> MongoResult<Vec<u8>> {
    match cmd.get("payload") {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        Some(Bson::String(s)) => Ok(s.clone().into_bytes()),
        Some(_) => Err(MongoError::type_mismatch(
            "SASL payload must be BinData or a string",
        )),
        None => Err(MongoError::failed_to_parse(
            "BSON field 'payload' is missing but a required field",
        )),
    }
}

/// Makes the connection `record`'s user, authenticated by `mechanism`: resolves its
/// privileges, logs, counts and audits the success.
pub(crate) async fn sign_in(
    session: &mut Session,
    record: &super::user::UserRecord,
    mechanism: &str,
) -> MongoResult<()> {
    let auth = session.state.auth.clone();
    let (privileges, roles) = auth.resolve(&record.roles).await?;
    info!(user = %truncate(&record.user), db = %record.db, mechanism, "authentication succeeded");
    session.state.counters.add(session.id, Op::AuthSucceeded, 1);
    if let Some(log) = &session.state.audit {
        log.authentication(&session.actor(), &record.user, &record.db, mechanism, true);
    }
    session.auth.user = Some(AuthedUser {
        user: record.user.clone(),
        db: record.db.clone(),
        roles,
        direct_roles: record.roles.clone(),
        privileges,
        generation: auth.generation(),
    });
    Ok(())
}

/// Logs and counts a failure and turns it into the client's error. The password is
/// never part of any message; the user name is truncated so a huge one cannot flood logs.
fn fail(session: &mut Session, db: &str, user: &str, mech: Mechanism, e: ScramError) -> MongoError {
    session.auth.failures += 1;
    session.state.counters.add(session.id, Op::AuthFailed, 1);
    if let Some(log) = &session.state.audit {
        log.authentication(&session.actor(), user, db, mech.name(), false);
    }
    match e {
        ScramError::Authentication => {
            warn!(user = %truncate(user), %db, mechanism = mech.name(), peer = %session.peer_text, "authentication failed");
            MongoError::new(ErrorCode::AuthenticationFailed, "Authentication failed.")
        }
        ScramError::Malformed(msg) => {
            warn!(%db, mechanism = mech.name(), peer = %session.peer_text, reason = %msg, "malformed SASL message");
            MongoError::bad_value(msg)
        }
    }
}

/// `s` cut to at most 64 bytes, at a character boundary: user names in logs and audit
/// events, where a huge one must not flood them.
pub(crate) fn truncate(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
