//! `usersInfo`: users of this database (or named ones, or all with `forAllDBs`), without
//! credentials unless `showCredentials`; a user may always see itself.

use bson::{doc, Bson, Document};
use wire::MongoResult;

use crate::auth::manage;
use crate::auth::roles::Action;
use crate::auth::store::Kind;
use crate::auth::user::{public_view, RoleName};
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let arg = cmd.get("usersInfo").cloned().unwrap_or(Bson::Int32(1));
    let for_all = matches!(&arg, Bson::Document(d) if d.get_bool("forAllDBs").unwrap_or(false));
    let names = if for_all {
        None
    } else {
        manage::names_arg(&arg, db, "user")?
    };
    let auth = session.state.auth.clone();
    let docs = match &names {
        None => {
            auth.store
                .list(Kind::User, (!for_all).then_some(db))
                .await?
        }
        Some(list) => {
            let mut out = Vec::new();
            for (udb, user) in list {
                if let Some(d) = auth.store.get(Kind::User, udb, user).await? {
                    out.push(d);
                }
            }
            out
        }
    };
    // Permission: viewUser on every database asked about, except for one's own user.
    let is_self = |udb: &str, user: &str| {
        session
            .auth
            .user
            .as_ref()
            .is_some_and(|u| u.db == udb && u.user == user)
    };
    let mut dbs: Vec<String> = match &names {
        Some(list) => list
            .iter()
            .filter(|(d, u)| !is_self(d, u))
            .map(|(d, _)| d.clone())
            .collect(),
        None if for_all => vec!["admin".to_string()],
        None => vec![db.to_string()],
    };
    dbs.dedup();
    for d in &dbs {
        manage::require_on_db(session, d, cmd, &[Action::ViewUser], &[], false).await?;
    }
    let show_credentials = cmd.get_bool("showCredentials").unwrap_or(false);
    let show_privileges = cmd.get_bool("showPrivileges").unwrap_or(false);
    let mut users = Vec::with_capacity(docs.len());
    for d in &docs {
        let mut view = public_view(d, show_credentials);
        if show_privileges {
            let roles = RoleName::parse_list(d.get("roles"), db, "roles").unwrap_or_default();
            let (privileges, inherited) = auth.resolve(&roles).await?;
            view.insert("inheritedRoles", RoleName::list_to_bson(&inherited));
            let p: Vec<Bson> = privileges
                .0
                .iter()
                .map(|p| Bson::Document(p.to_document()))
                .collect();
            view.insert("inheritedPrivileges", p);
        }
        users.push(Bson::Document(view));
    }
    Ok(doc! {"users": users})
}
