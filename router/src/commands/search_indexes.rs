//! Atlas Search index commands. Bulwark has no search engine behind it, so these answer
//! as a MongoDB server without search does: SearchNotEnabled (31082), naming Atlas.

use bson::Document;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;

pub const NOT_ENABLED: &str = "Using Atlas Search Database Commands and the $listSearchIndexes aggregation stage requires additional configuration. Please connect to Atlas or an AtlasCLI local deployment to enable.";

pub async fn run(_: &mut Session, _db: &str, _cmd: &Document) -> MongoResult<Document> {
    Err(MongoError::new(ErrorCode::SearchNotEnabled, NOT_ENABLED))
}
