//! `grantPrivilegesToRole` and `revokePrivilegesFromRole`: actions are added to or taken
//! from the privilege on the same resource.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::{Action, Privilege};
use crate::context::Session;

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
    let name = name_arg(cmd, "Role")?;
    let changes = manage::privileges_arg(cmd)?.ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'privileges' is missing but a required field")
    })?;
    let action = if grant {
        Action::GrantRole
    } else {
        Action::RevokeRole
    };
    manage::require_for_privileges(session, cmd, &changes, action).await?;
    let auth = session.state.auth.clone();
    let mut doc = manage::role_document(&auth, db, name).await?;
    let mut current = match doc.get("privileges") {
        Some(Bson::Array(a)) => a
            .iter()
            .filter_map(Bson::as_document)
            .map(Privilege::from_document)
            .collect::<MongoResult<Vec<_>>>()?,
        _ => Vec::new(),
    };
    for change in changes {
        match current.iter_mut().find(|p| p.resource == change.resource) {
            Some(p) if grant => p.actions = p.actions.union(change.actions),
            Some(p) => p.actions = p.actions.without(change.actions),
            None if grant => current.push(change),
            None => {}
        }
    }
    current.retain(|p| !p.actions.is_empty());
    doc.insert("privileges", manage::privileges_to_bson(&current));
    manage::replace_role(&auth, doc).await?;
    Ok(Document::new())
}
