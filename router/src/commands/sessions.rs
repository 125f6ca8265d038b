//! Logical session commands and `$listLocalSessions`, over the router's session cache
//! (`session_cache.rs`). There are no multi-document transactions yet, so ending or
//! killing a session releases its cache entry and nothing else; retryable-write records
//! live with the shards' data and expire there.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::authz::{self, acts};
use crate::auth::roles::{Action, Target};
use crate::auth::ConnAuth;
use crate::context::Session;
use crate::session_cache::{lsid_id, uid, Owner, Owners, SessionKey};

/// The connection's user, `None` when no one is authenticated. Takes the field, not the
/// session, so that the session's cache state can be borrowed beside it.
fn owner(auth: &ConnAuth) -> Owner<'_> {
    auth.user.as_ref().map(|u| (u.user.as_str(), u.db.as_str()))
}

/// The `uid` of the connection's user, as sessions are keyed by it.
pub fn connection_uid(session: &mut Session) -> [u8; 32] {
    let (recent, auth) = (&mut session.recent_session, &session.auth);
    recent.uid(owner(auth))
}

/// A retryable write's `lsid` as the shard keys its records: with access control on,
/// `uid` is the authenticated user's (whatever the client sent), so a user who learns
/// another's session id still cannot reach that user's recorded replies.
pub fn bind_to_user(
    auth_enabled: bool,
    recent: &mut crate::session_cache::Recent,
    auth: &ConnAuth,
    lsid: Bson,
) -> Bson {
    let Bson::Document(mut lsid) = lsid else {
        return lsid;
    };
    if auth_enabled {
        let uid = recent.uid(owner(auth));
        lsid.insert(
            "uid",
            bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: uid.to_vec(),
            },
        );
    }
    Bson::Document(lsid)
}

/// Records the session a command names (`lsid`) in the router's cache. Under access
/// control an unauthenticated command is refused anyway, and records nothing.
pub fn touch(session: &mut Session, lsid: &Bson) -> MongoResult<()> {
    if session.state.auth.enabled && session.auth.user.is_none() {
        return Ok(());
    }
    let Some(id) = lsid_id(lsid) else {
        // Not a session id: the shard that gets the command refuses it.
        return Ok(());
    };
    session
        .recent_session
        .touch(&session.state.sessions, id, owner(&session.auth))
}

fn session_list<'a>(cmd: &'a Document, name: &str) -> MongoResult<&'a Vec<Bson>> {
    match cmd.get(name) {
        Some(Bson::Array(a)) => Ok(a),
        _ => Err(MongoError::type_mismatch(format!(
            "BSON field '{name}' is the wrong type, expected type 'array'"
        ))),
    }
}

/// The session ids of `{<name>: [{id: <UUID>}, ...]}`.
fn session_ids(cmd: &Document, name: &str) -> MongoResult<Vec<[u8; 16]>> {
    session_list(cmd, name)?
        .iter()
        .map(|e| {
            lsid_id(e).ok_or_else(|| {
                MongoError::type_mismatch(format!(
                    "each element of '{name}' must be a session id: {{id: <UUID>}}"
                ))
            })
        })
        .collect()
}

/// The connection user's sessions of these ids.
fn own_sessions(session: &mut Session, ids: Vec<[u8; 16]>) -> Vec<SessionKey> {
    let uid = session.recent_session.uid(owner(&session.auth));
    ids.into_iter().map(|id| SessionKey { id, uid }).collect()
}

pub async fn end_sessions(
    session: &mut Session,
    _db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    let ids = session_ids(cmd, "endSessions")?;
    let keys = own_sessions(session, ids);
    session.state.sessions.end(&keys);
    Ok(Document::new())
}

/// `killSessions: [{id, uid?}, ...]`: the caller's sessions of these ids, or the ones of
/// the `uid` given, which for another user's needs `killAnySession` (the caller's
/// privileges were refreshed when this command was authorized). An empty list ends all
/// the caller's sessions.
pub async fn kill_sessions(
    session: &mut Session,
    db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    let list = session_list(cmd, "killSessions")?;
    let own = session.recent_session.uid(owner(&session.auth));
    if list.is_empty() {
        session.state.sessions.end_all(&Owners::Only(vec![own]));
        return Ok(Document::new());
    }
    let may_kill_any = !session.state.auth.enabled
        || session.auth.user.as_ref().is_some_and(|u| {
            u.privileges
                .allows(Target::Cluster, acts(&[Action::KillAnySession]))
        });
    let mut keys = Vec::with_capacity(list.len());
    for e in list {
        let id = lsid_id(e).ok_or_else(|| {
            MongoError::type_mismatch("each element of 'killSessions' must be {id: <UUID>}")
        })?;
        let uid = match e.as_document().and_then(|d| d.get("uid")) {
            None => own,
            Some(u) => uid_field(u)?,
        };
        if uid != own && !may_kill_any {
            return Err(MongoError::new(
                ErrorCode::Unauthorized,
                format!("not authorized on {db} to kill another user's sessions"),
            ));
        }
        keys.push(SessionKey { id, uid });
    }
    session.state.sessions.end(&keys);
    Ok(Document::new())
}

/// `killAllSessions: [{user, db}, ...]` (every user's when empty) and
/// `killAllSessionsByPattern: [{uid} | {users: [...]} | {lsid}, ...]`. Both need
/// `killAnySession` on the cluster (checked before this runs).
pub async fn kill_all_sessions(
    session: &mut Session,
    _db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    let name = cmd.keys().next().map(String::as_str).unwrap_or_default();
    let list = session_list(cmd, name)?;
    let cache = &session.state.sessions;
    if list.is_empty() {
        cache.end_all(&Owners::All);
    }
    for e in list {
        let Bson::Document(e) = e else {
            return Err(MongoError::type_mismatch(format!(
                "each element of '{name}' must be an object"
            )));
        };
        if name == "killAllSessions" {
            cache.end_all(&Owners::Only(vec![user_uid(e)?]));
        } else if let Some(lsid) = e.get("lsid") {
            let id = lsid_id(lsid)
                .ok_or_else(|| MongoError::type_mismatch("'lsid' must be {id: <UUID>}"))?;
            match lsid.as_document().and_then(|d| d.get("uid")) {
                Some(u) => cache.end(&[SessionKey {
                    id,
                    uid: uid_field(u)?,
                }]),
                None => cache.end_all_with_id(&id),
            }
        } else if let Some(u) = e.get("uid") {
            cache.end_all(&Owners::Only(vec![uid_field(u)?]));
        } else if let Some(Bson::Array(users)) = e.get("users") {
            let uids = users.iter().map(user_of).collect::<MongoResult<_>>()?;
            cache.end_all(&Owners::Only(uids));
        } else {
            return Err(MongoError::bad_value(
                "a killAllSessionsByPattern pattern is {lsid}, {uid} or {users}; roles are not supported",
            ));
        }
    }
    Ok(Document::new())
}

/// A `uid` field: the 32 bytes of a SHA-256.
fn uid_field(b: &Bson) -> MongoResult<[u8; 32]> {
    match b {
        Bson::Binary(b) => b
            .bytes
            .as_slice()
            .try_into()
            .map_err(|_| MongoError::bad_value("'uid' must be 32 bytes (SHA-256)")),
        _ => Err(MongoError::type_mismatch("'uid' must be binary data")),
    }
}

/// The uid of `{user, db}`.
fn user_uid(e: &Document) -> MongoResult<[u8; 32]> {
    match (e.get_str("user"), e.get_str("db")) {
        (Ok(u), Ok(d)) => Ok(uid(Some((u, d)))),
        _ => Err(MongoError::type_mismatch(
            "a user is given as {user: <name>, db: <database>}",
        )),
    }
}

fn user_of(b: &Bson) -> MongoResult<[u8; 32]> {
    match b {
        Bson::Document(d) => user_uid(d),
        _ => Err(MongoError::type_mismatch(
            "a user is given as {user: <name>, db: <database>}",
        )),
    }
}

pub async fn refresh_sessions(
    session: &mut Session,
    _db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    let ids = session_ids(cmd, "refreshSessions")?;
    for id in ids {
        session
            .recent_session
            .touch(&session.state.sessions, id, owner(&session.auth))?;
    }
    Ok(Document::new())
}

/// A fresh session, in the cache from now on, as mongos hands out.
pub async fn start_session(
    session: &mut Session,
    _db: &str,
    _cmd: &Document,
) -> MongoResult<Document> {
    let id = bson::Uuid::new().bytes();
    session
        .recent_session
        .touch(&session.state.sessions, id, owner(&session.auth))?;
    let timeout_minutes = crate::session_cache::SESSION_TIMEOUT.as_secs() / 60;
    Ok(doc! {
        "id": {"id": bson::Binary {subtype: bson::spec::BinarySubtype::Uuid, bytes: id.to_vec()}},
        "timeoutMinutes": timeout_minutes as i32,
    })
}

/// `{aggregate: 1, pipeline: [{$listLocalSessions: {}|{allUsers: true}|{users: [...]}},
/// ...]}` on a database: the cached sessions, through the rest of the pipeline.
pub async fn list_local_sessions(
    session: &mut Session,
    db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    let on_database = match cmd.get("aggregate") {
        Some(Bson::Int32(1) | Bson::Int64(1)) => true,
        Some(Bson::Double(d)) => *d == 1.0,
        _ => false,
    };
    if !on_database {
        return Err(MongoError::new(
            ErrorCode::InvalidNamespace,
            "$listLocalSessions must be run against the database with {aggregate: 1}, not a collection",
        ));
    }
    let stages = query::agg::command_stages(cmd)?;
    let spec = match stages[0].get("$listLocalSessions") {
        Some(Bson::Document(d)) => d,
        _ => {
            return Err(MongoError::type_mismatch(
                "$listLocalSessions options must be specified in an object",
            ))
        }
    };
    if let Some(unknown) = spec
        .keys()
        .find(|k| !["allUsers", "users"].contains(&k.as_str()))
    {
        return Err(MongoError::new(
            ErrorCode::UnknownField,
            format!("BSON field '$listLocalSessions.{unknown}' is an unknown field."),
        ));
    }
    let all_users = match spec.get("allUsers") {
        None => false,
        Some(Bson::Boolean(b)) => *b,
        Some(_) => return Err(MongoError::type_mismatch("'allUsers' must be a boolean")),
    };
    // An empty list of users means the caller, as no list does.
    let users = match spec.get("users") {
        None => None,
        Some(Bson::Array(a)) if a.is_empty() => None,
        Some(Bson::Array(a)) => Some(a.iter().map(user_of).collect::<MongoResult<Vec<_>>>()?),
        Some(_) => return Err(MongoError::type_mismatch("'users' must be an array")),
    };
    let own = session.recent_session.uid(owner(&session.auth));
    let owners = match (all_users, users) {
        (true, Some(_)) => {
            return Err(MongoError::new(
                ErrorCode::UnsupportedFormat,
                "allUsers and users are mutually exclusive",
            ))
        }
        (true, None) => Owners::All,
        (false, Some(uids)) => Owners::Only(uids),
        (false, None) if session.state.auth.enabled => Owners::Only(vec![own]),
        (false, None) => Owners::All,
    };
    // Other users' sessions need listSessions on the cluster.
    if !matches!(&owners, Owners::Only(uids) if uids.iter().all(|u| *u == own)) {
        let need = acts(&[Action::ListSessions]);
        authz::require(session, Target::Cluster, need, "aggregate", db, cmd).await?;
    }
    let rest = query::agg::Pipeline::parse(&stages[1..])?;
    let batch = rest.run(
        session.state.sessions.list(&owners),
        &query::agg::NoCollections,
    )?;
    Ok(doc! {
        "cursor": {"firstBatch": batch, "id": 0_i64, "ns": format!("{db}.$cmd.aggregate")},
    })
}
