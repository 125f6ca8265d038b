//! `rolesInfo`: built-in and user-defined roles, with privileges on request.

use bson::{doc, Bson, Document};
use wire::MongoResult;

use crate::auth::roles::{self, Action};
use crate::auth::store::Kind;
use crate::auth::user::RoleName;
use crate::auth::{manage, parse_role_document};
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let arg = cmd.get("rolesInfo").cloned().unwrap_or(Bson::Int32(1));
    let names = manage::names_arg(&arg, db, "role")?;
    let own = |r: &(String, String)| {
        session
            .auth
            .user
            .as_ref()
            .is_some_and(|u| u.roles.iter().any(|o| o.db == r.0 && o.role == r.1))
    };
    let mut dbs: Vec<String> = match &names {
        Some(list) => list
            .iter()
            .filter(|r| !own(r))
            .map(|(d, _)| d.clone())
            .collect(),
        None => vec![db.to_string()],
    };
    dbs.dedup();
    for d in &dbs {
        manage::require_on_db(session, d, cmd, &[Action::ViewRole], &[], false).await?;
    }
    let show_privileges = matches!(cmd.get("showPrivileges"), Some(Bson::Boolean(true)));
    let auth = session.state.auth.clone();
    let wanted: Vec<(String, String)> = match names {
        Some(list) => list,
        None => {
            let mut all: Vec<(String, String)> = Vec::new();
            if cmd.get_bool("showBuiltinRoles").unwrap_or(false) {
                all.extend(roles::builtin_names(db).map(|r| (db.to_string(), r.to_string())));
            }
            for d in auth.store.list(Kind::Role, Some(db)).await? {
                if let Ok(r) = d.get_str("role") {
                    all.push((db.to_string(), r.to_string()));
                }
            }
            all
        }
    };
    let mut out = Vec::new();
    for (rdb, role) in wanted {
        let name = RoleName {
            role: role.clone(),
            db: rdb.clone(),
        };
        let direct = if roles::is_builtin(&role, &rdb) {
            Vec::new()
        } else {
            match auth.store.get(Kind::Role, &rdb, &role).await? {
                Some(d) => parse_role_document(&d)?.1,
                None => continue,
            }
        };
        let (privileges, mut inherited) = auth.resolve(std::slice::from_ref(&name)).await?;
        inherited.retain(|r| *r != name);
        let mut entry = doc! {
            "role": &role,
            "db": &rdb,
            "isBuiltin": roles::is_builtin(&role, &rdb),
            "roles": RoleName::list_to_bson(&direct),
            "inheritedRoles": RoleName::list_to_bson(&inherited),
        };
        if show_privileges {
            let p: Vec<Bson> = privileges
                .0
                .iter()
                .map(|p| Bson::Document(p.to_document()))
                .collect();
            entry.insert("privileges", p.clone());
            entry.insert("inheritedPrivileges", p);
        }
        out.push(Bson::Document(entry));
    }
    Ok(doc! {"roles": out})
}
