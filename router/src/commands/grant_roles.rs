//! `grantRolesToUser` and `revokeRolesFromUser`.

use bson::Document;
use wire::MongoResult;

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::Action;
use crate::auth::store::Kind;
use crate::auth::user::RoleName;
use crate::conn::Session;

pub async fn grant(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    change(session, db, cmd, true).await
}

pub async fn revoke(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    change(session, db, cmd, false).await
}

async fn change(
    session: &mut Session,
    db: &str,
    cmd: &Document,
    grant: bool,
) -> MongoResult<Document> {
    let name = name_arg(cmd, "User")?;
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
    let mut doc = auth
        .store
        .get(Kind::User, db, name)
        .await?
        .ok_or_else(|| manage::user_not_found(name, db))?;
    let mut current = RoleName::parse_list(doc.get("roles"), db, "roles").unwrap_or_default();
    if grant {
        for r in roles {
            if !current.contains(&r) {
                current.push(r);
            }
        }
    } else {
        current.retain(|r| !roles.contains(r));
    }
    doc.insert("roles", RoleName::list_to_bson(&current));
    auth.store.replace(Kind::User, doc).await?;
    auth.invalidate();
    Ok(Document::new())
}
