//! `listCommands`: every command this router answers or forwards.

use bson::{doc, Document};
use wire::MongoResult;

use crate::conn::Session;

pub fn run(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    let mut commands = Document::new();
    for (name, _) in super::LOCAL {
        commands.insert(*name, doc! {"help": "", "adminOnly": false});
    }
    for (name, _) in super::FORWARDED {
        commands.insert(*name, doc! {"help": "", "adminOnly": false});
    }
    Ok(doc! {"commands": commands})
}
