//! `createRole`: a user-defined role of privileges and inherited roles.

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::{self, Action};
use crate::auth::store::{doc_id, Kind};
use crate::auth::user::RoleName;
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = name_arg(cmd, "Role")?;
    let inherited = RoleName::parse_list(cmd.get("roles"), db, "roles")?;
    manage::require_on_db(session, db, cmd, &[Action::CreateRole], &inherited, true).await?;
    if roles::is_builtin(name, db) || roles::is_builtin(name, "admin") {
        return Err(MongoError::bad_value(format!(
            "Cannot create roles with the same name as a built-in role: {name}"
        )));
    }
    let privileges = manage::privileges_arg(cmd)?.ok_or_else(|| {
        MongoError::failed_to_parse("BSON field 'privileges' is missing but a required field")
    })?;
    manage::require_for_privileges(session, cmd, &privileges, Action::GrantRole).await?;
    let auth = session.state.auth.clone();
    manage::check_roles_exist(&auth, &inherited).await?;
    let doc = doc! {
        "_id": doc_id(db, name),
        "role": name,
        "db": db,
        "privileges": manage::privileges_to_bson(&privileges),
        "roles": RoleName::list_to_bson(&inherited),
    };
    manage::insert_new(&auth, Kind::Role, db, name, doc).await?;
    Ok(Document::new())
}
