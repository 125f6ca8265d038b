//! `updateUser`: a new password (new salt and keys), roles, custom data or mechanisms.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::Action;
use crate::auth::scram::Mechanism;
use crate::auth::store::Kind;
use crate::auth::user::{self, RoleName};
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = name_arg(cmd, "User")?;
    let password = manage::password_arg(cmd)?;
    let custom = manage::custom_data_arg(cmd)?;
    let roles = match cmd.get("roles") {
        Some(v) => Some(RoleName::parse_list(Some(v), db, "roles")?),
        None => None,
    };
    let mut actions = Vec::new();
    if password.is_some() || cmd.contains_key("mechanisms") {
        actions.push(Action::ChangePassword);
    }
    if custom.is_some() {
        actions.push(Action::ChangeCustomData);
    }
    if roles.is_some() {
        actions.extend([Action::GrantRole, Action::RevokeRole]);
    }
    if actions.is_empty() {
        return Err(MongoError::bad_value(
            "Must specify at least one field to update in updateUser",
        ));
    }
    manage::require_on_db(
        session,
        db,
        cmd,
        &actions,
        roles.as_deref().unwrap_or_default(),
        false,
    )
    .await?;
    let auth = session.state.auth.clone();
    let mut doc = auth
        .store
        .get(Kind::User, db, name)
        .await?
        .ok_or_else(|| manage::user_not_found(name, db))?;
    if let Some(roles) = &roles {
        manage::check_roles_exist(&auth, roles).await?;
        doc.insert("roles", RoleName::list_to_bson(roles));
    }
    if let Some(c) = custom {
        doc.insert("customData", c.clone());
    }
    let mechanisms = match cmd.get("mechanisms") {
        Some(m) => user::parse_mechanisms(Some(m))?,
        None => existing_mechanisms(&doc),
    };
    match password {
        Some(p) => {
            let creds = manage::derive_credentials(name, p, mechanisms).await?;
            doc.insert("credentials", creds);
        }
        // Without a new password, mechanisms can only be narrowed (the keys of a new
        // mechanism cannot be derived without the password).
        None if cmd.contains_key("mechanisms") => {
            let creds: Document = doc
                .get_document("credentials")
                .map(|c| {
                    c.iter()
                        .filter(|(k, _)| mechanisms.iter().any(|m| m.name() == *k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            if creds.is_empty() {
                return Err(MongoError::bad_value("mechanisms must keep at least one existing credential unless a new pwd is given"));
            }
            doc.insert("credentials", Bson::Document(creds));
        }
        None => {}
    }
    auth.store.replace(Kind::User, doc).await?;
    auth.changed().await?;
    Ok(Document::new())
}

fn existing_mechanisms(doc: &Document) -> Vec<Mechanism> {
    let found: Vec<Mechanism> = doc
        .get_document("credentials")
        .map(|c| c.keys().filter_map(|k| Mechanism::from_name(k)).collect())
        .unwrap_or_default();
    if found.is_empty() {
        Mechanism::ALL.to_vec()
    } else {
        found
    }
}
