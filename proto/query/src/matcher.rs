//! Query filter matching (owner: query-core helper).
use bson::Document;
use crate::MongoResult;

/// A parsed query filter. Parse once, match many documents.
#[derive(Debug, Clone)]
pub struct Matcher {}

impl Matcher {
    /// Parses a filter; unknown operators and wrong argument types are errors with MongoDB codes.
    pub fn new(filter: &Document) -> MongoResult<Matcher> {
        let _ = filter;
        unimplemented!("query-core helper")
    }

    pub fn matches(&self, doc: &Document) -> bool {
        let _ = doc;
        unimplemented!("query-core helper")
    }
}
