//! `grantRolesToUser`, `revokeRolesFromUser`, `grantRolesToRole` and
//! `revokeRolesFromRole`: one edit of a `roles` list, on a user or on a role.

use bson::Document;
use wire::MongoResult;

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::Action;
use crate::auth::store::Kind;
use crate::auth::user::RoleName;
use crate::context::Session;

pub async fn grant(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    change(session, db, cmd, Kind::User, true).await
}

pub async fn revoke(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    change(session, db, cmd, Kind::User, false).await
}

pub async fn grant_to_role(
    session: &mut Session,
    db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    change(session, db, cmd, Kind::Role, true).await
}

pub async fn revoke_from_role(
    session: &mut Session,
    db: &str,
    cmd: &Document,
) -> MongoResult<Document> {
    change(session, db, cmd, Kind::Role, false).await
}

async fn change(
    session: &mut Session,
    db: &str,
    cmd: &Document,
    kind: Kind,
    grant: bool,
) -> MongoResult<Document> {
    let name = name_arg(
        cmd,
        match kind {
            Kind::User => "User",
            Kind::Role => "Role",
        },
    )?;
    let roles = RoleName::parse_list(cmd.get("roles"), db, "roles")?;
    let action = if grant {
        Action::GrantRole
    } else {
        Action::RevokeRole
    };
    manage::require_on_db(session, db, cmd, &[], &[], false).await?;
    for r in &roles {
        manage::require_on_db(session, &r.db, cmd, &[action], &[], false).await?;
    }
    let auth = session.state.auth.clone();
    if grant {
        manage::check_roles_exist(&auth, &roles).await?;
    }
    let mut doc = match kind {
        Kind::User => auth
            .store
            .get(Kind::User, db, name)
            .await?
            .ok_or_else(|| manage::user_not_found(name, db))?,
        Kind::Role => manage::role_document(&auth, db, name).await?,
    };
    let mut current = RoleName::parse_list(doc.get("roles"), db, "roles").unwrap_or_default();
    if grant {
        if kind == Kind::Role {
            let me = RoleName {
                role: name.to_string(),
                db: db.to_string(),
            };
            manage::check_no_cycle(&auth, &me, &roles).await?;
        }
        for r in roles {
            if !current.contains(&r) {
                current.push(r);
            }
        }
    } else {
        current.retain(|r| !roles.contains(r));
    }
    doc.insert("roles", RoleName::list_to_bson(&current));
    auth.store.replace(kind, doc).await?;
    auth.changed().await?;
    Ok(Document::new())
}
