//! `connectionStatus` and `logout`: who is authenticated on this connection.

use bson::{doc, Bson, Document};
use wire::MongoResult;

use crate::auth::user::RoleName;
use crate::context::Session;

pub async fn run(session: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    let (users, roles, privileges) = match &session.auth.user {
        Some(u) => (
            vec![Bson::Document(doc! {"user": &u.user, "db": &u.db})],
            RoleName::list_to_bson(&u.roles),
            u.privileges
                .0
                .iter()
                .map(|p| Bson::Document(p.to_document()))
                .collect(),
        ),
        None => (Vec::new(), Bson::Array(Vec::new()), Vec::new()),
    };
    let mut auth_info = doc! {"authenticatedUsers": users, "authenticatedUserRoles": roles};
    if cmd.get_bool("showPrivileges").unwrap_or(false) {
        auth_info.insert("authenticatedUserPrivileges", Bson::Array(privileges));
    }
    Ok(doc! {"authInfo": auth_info})
}

pub async fn logout(session: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    session.auth.user = None;
    session.auth.conversation = None;
    Ok(Document::new())
}
