//! `updateRole`: replaces a user-defined role's privileges and/or inherited roles.

use bson::Document;
use wire::{MongoError, MongoResult};

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::Action;
use crate::auth::user::RoleName;
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = name_arg(cmd, "Role")?;
    let privileges = manage::privileges_arg(cmd)?;
    let inherited = match cmd.get("roles") {
        None => None,
        Some(v) => Some(RoleName::parse_list(Some(v), db, "roles")?),
    };
    if privileges.is_none() && inherited.is_none() {
        return Err(MongoError::bad_value(
            "Must specify at least one field to update in updateRole",
        ));
    }
    // Replacing a role's grants both revokes the old ones and grants the new ones.
    let granted = inherited.clone().unwrap_or_default();
    manage::require_on_db(session, db, cmd, &[Action::RevokeRole], &granted, false).await?;
    if let Some(p) = &privileges {
        manage::require_for_privileges(session, cmd, p, Action::GrantRole).await?;
    }
    let auth = session.state.auth.clone();
    let mut doc = manage::role_document(&auth, db, name).await?;
    if let Some(roles) = inherited {
        manage::check_roles_exist(&auth, &roles).await?;
        let me = RoleName {
            role: name.to_string(),
            db: db.to_string(),
        };
        manage::check_no_cycle(&auth, &me, &roles).await?;
        doc.insert("roles", RoleName::list_to_bson(&roles));
    }
    if let Some(p) = privileges {
        doc.insert("privileges", manage::privileges_to_bson(&p));
    }
    manage::replace_role(&auth, doc).await?;
    Ok(Document::new())
}
