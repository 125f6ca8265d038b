//! `listCommands`: every command this router answers or forwards.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub async fn run(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    let mut commands = Document::new();
    for name in super::table::names() {
        commands.insert(name, doc! {"help": "", "adminOnly": false});
    }
    Ok(doc! {"commands": commands})
}
