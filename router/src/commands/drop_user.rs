//! `dropUser` and `dropAllUsersFromDatabase`.

use bson::{doc, Document};
use wire::MongoResult;

use crate::auth::manage::{self, name_arg};
use crate::auth::roles::Action;
use crate::auth::store::Kind;
use crate::context::Session;

pub async fn run(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    let name = name_arg(cmd, "User")?;
    manage::require_on_db(session, db, cmd, &[Action::DropUser], &[], false).await?;
    let auth = session.state.auth.clone();
    if auth.store.delete(Kind::User, db, Some(name)).await? == 0 {
        return Err(manage::user_not_found(name, db));
    }
    auth.changed().await?;
    Ok(Document::new())
}

pub async fn drop_all(session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    manage::require_on_db(session, db, cmd, &[Action::DropUser], &[], false).await?;
    let auth = session.state.auth.clone();
    let n = auth.store.delete(Kind::User, db, None).await?;
    auth.changed().await?;
    Ok(doc! {"n": n as i64})
}
