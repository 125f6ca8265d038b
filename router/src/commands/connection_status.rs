//! `connectionStatus` and `logout`. Authentication is not enabled yet, so no user is
//! authenticated on any connection.

use bson::{doc, Document};
use wire::MongoResult;

use crate::conn::Session;

pub fn run(_: &mut Session, _db: &str, cmd: &Document) -> MongoResult<Document> {
    let mut auth_info = doc! {"authenticatedUsers": [], "authenticatedUserRoles": []};
    if cmd.get_bool("showPrivileges").unwrap_or(false) {
        auth_info.insert("authenticatedUserPrivileges", bson::Bson::Array(vec![]));
    }
    Ok(doc! {"authInfo": auth_info})
}

pub fn logout(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    Ok(Document::new())
}
