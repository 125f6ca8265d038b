//! Shared steps of the user- and role-management commands (`commands/*_user.rs`,
//! `commands/*_role*.rs`): argument parsing, permission checks with the localhost
//! exception, and existence checks.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use super::authz::{self, acts};
use super::roles::{self, Action, Privilege, Resource, Target};
use super::store::Kind;
use super::user::{check_name, RoleName};
use super::AuthState;
use crate::context::Session;

/// The name in the command's first field (`createUser: "alice"`).
pub fn name_arg<'a>(cmd: &'a Document, kind: &str) -> MongoResult<&'a str> {
    let (field, v) = cmd
        .iter()
        .next()
        .ok_or_else(|| MongoError::failed_to_parse("empty command"))?;
    let name = v.as_str().ok_or_else(|| {
        MongoError::type_mismatch(format!(
            "BSON field '{field}' is the wrong type, expected type 'string'"
        ))
    })?;
    check_name(kind, name)?;
    Ok(name)
}

/// Requires `actions` on database `db` (and `grantRole` on each role's database), unless
/// the localhost exception applies. Returns whether it did.
pub async fn require_on_db(
    session: &mut Session,
    db: &str,
    cmd: &Document,
    actions: &[Action],
    granted: &[RoleName],
    localhost_ok: bool,
) -> MongoResult<bool> {
    if localhost_ok && authz::localhost_exception(session, db).await? {
        return Ok(true);
    }
    let name = cmd.keys().next().cloned().unwrap_or_default();
    authz::require(session, Target::Db(db), acts(actions), &name, db, cmd).await?;
    for r in granted {
        authz::require(
            session,
            Target::Db(&r.db),
            acts(&[Action::GrantRole]),
            &name,
            db,
            cmd,
        )
        .await?;
    }
    Ok(false)
}

/// Fails with RoleNotFound unless every role is built in or defined.
pub async fn check_roles_exist(auth: &AuthState, roles: &[RoleName]) -> MongoResult<()> {
    for r in roles {
        if roles::is_builtin(&r.role, &r.db) {
            continue;
        }
        if auth.store.get(Kind::Role, &r.db, &r.role).await?.is_none() {
            return Err(MongoError::new(
                wire::ErrorCode::RoleNotFound,
                format!("Could not find role: {r}"),
            ));
        }
    }
    Ok(())
}

pub fn user_not_found(user: &str, db: &str) -> MongoError {
    MongoError::new(
        wire::ErrorCode::UserNotFound,
        format!("Could not find user \"{user}\" for db \"{db}\""),
    )
}

/// The password field of createUser/updateUser: a non-empty string.
pub fn password_arg(cmd: &Document) -> MongoResult<Option<&str>> {
    match cmd.get("pwd") {
        None => Ok(None),
        Some(Bson::String(p)) if !p.is_empty() => Ok(Some(p)),
        Some(Bson::String(_)) => Err(MongoError::bad_value("Password cannot be empty")),
        Some(_) => Err(MongoError::type_mismatch(
            "BSON field 'pwd' is the wrong type, expected type 'string'",
        )),
    }
}

pub fn custom_data_arg(cmd: &Document) -> MongoResult<Option<&Document>> {
    match cmd.get("customData") {
        None => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(_) => Err(MongoError::type_mismatch(
            "BSON field 'customData' is the wrong type, expected type 'object'",
        )),
    }
}

/// Runs PBKDF2 for a new password on the blocking pool (it takes milliseconds).
pub async fn derive_credentials(
    user: &str,
    password: &str,
    mechanisms: Vec<super::scram::Mechanism>,
) -> MongoResult<Document> {
    let (u, p) = (user.to_string(), password.to_string());
    tokio::task::spawn_blocking(move || super::user::credentials_document(&u, &p, &mechanisms))
        .await
        .map_err(|e| MongoError::internal(e.to_string()))?
}

/// Which users or roles a `usersInfo`/`rolesInfo` argument names: `None` = all in `db`.
pub fn names_arg(v: &Bson, db: &str, field: &str) -> MongoResult<Option<Vec<(String, String)>>> {
    let one = |v: &Bson| -> MongoResult<(String, String)> {
        match v {
            Bson::String(n) => Ok((db.to_string(), n.clone())),
            Bson::Document(d) => match (d.get_str(field), d.get_str("db")) {
                (Ok(n), Ok(d)) => Ok((d.to_string(), n.to_string())),
                _ => Err(MongoError::bad_value(format!(
                    "{field} documents need string '{field}' and 'db' fields"
                ))),
            },
            _ => Err(MongoError::bad_value(format!(
                "invalid {field} specification"
            ))),
        }
    };
    match v {
        Bson::Int32(1) | Bson::Int64(1) | Bson::Double(1.0) | Bson::Boolean(true) => Ok(None),
        Bson::Array(a) => a.iter().map(one).collect::<MongoResult<Vec<_>>>().map(Some),
        other => Ok(Some(vec![one(other)?])),
    }
}

/// Inserts a new user or role document; an existing one is MongoDB's 51003 (user) or
/// 51002 (role) "already exists".
pub async fn insert_new(
    auth: &AuthState,
    kind: Kind,
    db: &str,
    name: &str,
    doc: Document,
) -> MongoResult<()> {
    match auth.store.insert(kind, doc).await {
        Err(e) if e.code == wire::ErrorCode::DuplicateKey as i32 => {
            let (code, what) = match kind {
                Kind::User => (wire::ErrorCode::UserAlreadyExists, "User"),
                Kind::Role => (wire::ErrorCode::RoleAlreadyExists, "Role"),
            };
            Err(MongoError::new(
                code,
                format!("{what} \"{name}@{db}\" already exists"),
            ))
        }
        r => {
            r?;
            auth.changed().await?;
            Ok(())
        }
    }
}

/// The `privileges` array of createRole/updateRole/grantPrivilegesToRole; `None` when the
/// field is absent.
pub fn privileges_arg(cmd: &Document) -> MongoResult<Option<Vec<Privilege>>> {
    match cmd.get("privileges") {
        None => Ok(None),
        Some(Bson::Array(a)) => a
            .iter()
            .map(|p| {
                p.as_document()
                    .ok_or_else(|| MongoError::type_mismatch("privileges must be documents"))
                    .and_then(Privilege::from_document)
            })
            .collect::<MongoResult<Vec<_>>>()
            .map(Some),
        Some(_) => Err(MongoError::type_mismatch(
            "BSON field 'privileges' is the wrong type, expected type 'array'",
        )),
    }
}

/// Requires `action` (grantRole or revokeRole) on the database each privilege targets,
/// or on `admin` for cluster-wide and multi-database resources, as MongoDB does.
pub async fn require_for_privileges(
    session: &mut Session,
    cmd: &Document,
    privileges: &[Privilege],
    action: Action,
) -> MongoResult<()> {
    for p in privileges {
        let db = match &p.resource {
            Resource::Db(d) | Resource::Collection(d, _) => d.as_str(),
            _ => "admin",
        };
        require_on_db(session, db, cmd, &[action], &[], false).await?;
    }
    Ok(())
}

/// A user-defined role's document, or RoleNotFound (built-in roles have none and cannot
/// be modified).
pub async fn role_document(auth: &AuthState, db: &str, name: &str) -> MongoResult<Document> {
    auth.store.get(Kind::Role, db, name).await?.ok_or_else(|| {
        MongoError::new(
            wire::ErrorCode::RoleNotFound,
            format!("Could not find role: {name}@{db}"),
        )
    })
}

/// Fails with GraphContainsCycle when `role` would inherit from itself through
/// `inherited`.
pub async fn check_no_cycle(
    auth: &AuthState,
    role: &RoleName,
    inherited: &[RoleName],
) -> MongoResult<()> {
    let mut pending: Vec<RoleName> = inherited.to_vec();
    let mut seen: Vec<RoleName> = Vec::new();
    while let Some(r) = pending.pop() {
        if r == *role {
            return Err(MongoError::new(
                wire::ErrorCode::GraphContainsCycle,
                format!("Granting these roles to {role} would introduce a cycle"),
            ));
        }
        if seen.contains(&r) || roles::is_builtin(&r.role, &r.db) {
            continue;
        }
        if let Some(d) = auth.store.get(Kind::Role, &r.db, &r.role).await? {
            pending
                .extend(RoleName::parse_list(d.get("roles"), &r.db, "roles").unwrap_or_default());
        }
        seen.push(r);
    }
    Ok(())
}

/// Stores a modified user-defined role and makes every connection re-resolve privileges.
pub async fn replace_role(auth: &AuthState, doc: Document) -> MongoResult<()> {
    auth.store.replace(Kind::Role, doc).await?;
    auth.changed().await?;
    Ok(())
}

pub fn privileges_to_bson(privileges: &[Privilege]) -> Bson {
    Bson::Array(
        privileges
            .iter()
            .map(|p| Bson::Document(p.to_document()))
            .collect(),
    )
}
