//! `listCommands`: every command this router answers or forwards.

use bson::{doc, Document};
use wire::MongoResult;

use crate::context::Session;

pub fn run(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    let mut commands = Document::new();
    let local = super::LOCAL.iter().map(|e| e.0);
    let asynchronous = super::ASYNC.iter().map(|e| e.0);
    for name in local
        .chain(asynchronous)
        .chain(super::FORWARDED.iter().map(|e| e.0))
    {
        commands.insert(name, doc! {"help": "", "adminOnly": false});
    }
    Ok(doc! {"commands": commands})
}
