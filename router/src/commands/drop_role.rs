//! `dropRole`. Users keep the role name in their list; it simply grants nothing now.

use bson::Document;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::{self, Action};
use crate::auth::store::Kind;
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = name_arg(cmd, "Role")?;
    manage::require_on_db(session, db, cmd, &[Action::DropRole], &[], false).await?;
    if roles::is_builtin(name, db) {
        // MongoDB answers BadValue ("<role> is a built-in role and cannot be modified");
        // Bulwark's code 166 is MongoDB's CommandNotSupportedOnView.
        return Err(MongoError::new(
            ErrorCode::CommandNotSupportedOnView,
            format!("Cannot drop built-in role: {name}@{db}"),
        ));
    }
    let auth = session.state.auth.clone();
    if auth.store.delete(Kind::Role, db, Some(name)).await? == 0 {
        return Err(MongoError::new(
            ErrorCode::RoleNotFound,
            format!("Role {name}@{db} not found"),
        ));
    }
    auth.changed().await?;
    Ok(Document::new())
}
