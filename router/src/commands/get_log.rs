//! `getLog`: the router process's recent log lines (`log_buffer`), as MongoDB answers it:
//! `"*"` names the logs, `"global"` gives the last 1,024 lines (each a JSON document as
//! text) and how many were written, `"startupWarnings"` the warnings logged at start.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::log_buffer;
use crate::sharding::admin_only;

pub async fn run(_session: &mut Session, db: &str, cmd: &Document) -> MongoResult<Document> {
    admin_only(db, "getLog")?;
    let name = match cmd.get("getLog") {
        Some(Bson::String(s)) => s.as_str(),
        other => {
            return Err(MongoError::type_mismatch(format!(
                "Argument to getLog must be of type String; found {} of type {}",
                other.map_or("nothing".into(), |v| v.to_string()),
                other.map_or("missing", |v| query::bson_types::type_name(v)),
            )))
        }
    };
    match name {
        "*" => Ok(doc! {"names": ["global", "startupWarnings"]}),
        "global" => {
            let (written, lines) = log_buffer::global();
            Ok(doc! {"totalLinesWritten": written as i64, "log": lines})
        }
        "startupWarnings" => {
            let lines = log_buffer::startup_warnings();
            Ok(doc! {"totalLinesWritten": lines.len() as i64, "log": lines})
        }
        other => Err(MongoError::new(
            ErrorCode::OperationFailed,
            format!("No log named '{other}'"),
        )),
    }
}
