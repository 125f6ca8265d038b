//! `createUser`: stores salted SCRAM keys for the password, never the password.

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::Action;
use crate::auth::store::Kind;
use crate::auth::user::{self, RoleName};
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = name_arg(cmd, "User")?;
    let roles = RoleName::parse_list(cmd.get("roles"), db, "roles")?;
    manage::require_on_db(session, db, cmd, &[Action::CreateUser], &roles, true).await?;
    if db == "$external" {
        return create_external(session, name, &roles, cmd).await;
    }
    let password = manage::password_arg(cmd)?.ok_or_else(|| {
        MongoError::bad_value("Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db")
    })?;
    let mechanisms = user::parse_mechanisms(cmd.get("mechanisms"))?;
    let custom = manage::custom_data_arg(cmd)?;
    let auth = session.state.auth.clone();
    manage::check_roles_exist(&auth, &roles).await?;
    let creds = manage::derive_credentials(name, password, mechanisms).await?;
    let doc = user::new_user_document(db, name, creds, &roles, custom);
    manage::insert_new(&auth, Kind::User, db, name, doc).await?;
    tracing::info!(user = %name, %db, "user created");
    Ok(doc! {})
}

/// A user of `$external`: authenticated elsewhere (its X.509 certificate, for
/// MONGODB-X509), so it has no password and no SCRAM keys.
async fn create_external(
    session: &mut Session,
    name: &str,
    roles: &[RoleName],
    cmd: &Document,
) -> MongoResult<Document> {
    // Neither has a meaning without a password: refused, not ignored.
    for field in ["pwd", "mechanisms"] {
        if cmd.contains_key(field) {
            return Err(MongoError::bad_value(format!(
                "Cannot set '{field}' for users defined on the '$external' database"
            )));
        }
    }
    let custom = manage::custom_data_arg(cmd)?;
    let auth = session.state.auth.clone();
    manage::check_roles_exist(&auth, roles).await?;
    let doc = user::new_user_document("$external", name, Document::new(), roles, custom);
    manage::insert_new(&auth, Kind::User, "$external", name, doc).await?;
    tracing::info!(user = %name, db = "$external", "user created");
    Ok(doc! {})
}
