//! What the server checks before it hands a command or a stored document to the query
//! crate; inputs that would not pass are skipped.

use bson::Document;

pub const MAX_DEPTH: usize = wire::MAX_NESTING_DEPTH;

/// At most `MAX_NESTING_DEPTH` levels below the top, at most `max_size` bytes.
pub fn acceptable(doc: &Document, max_size: usize) -> bool {
    if query::check_document_depth(doc).is_err() {
        return false;
    }
    match bson::to_vec(doc) {
        Ok(bytes) => bytes.len() <= max_size,
        Err(_) => false,
    }
}

/// A command: at most 16 MiB plus the command slack.
pub fn cmd_ok(cmd: Document) -> bool {
    acceptable(&cmd, wire::MAX_BSON_SIZE + wire::BSON_SIZE_SLACK)
}
