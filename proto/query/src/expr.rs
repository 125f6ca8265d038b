//! Aggregation expressions (owner: aggregation helper).
use bson::{Bson, Document};
use crate::MongoResult;

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr {}

/// Variables visible to an expression: `$$ROOT`, `$$CURRENT`, `let` variables, `$$NOW`...
#[derive(Debug, Clone, Default)]
pub struct Variables {}

impl Expr {
    pub fn parse(spec: &Bson) -> MongoResult<Expr> {
        let _ = spec;
        unimplemented!("aggregation helper")
    }

    pub fn eval(&self, root: &Document, vars: &Variables) -> MongoResult<Bson> {
        let _ = (root, vars);
        unimplemented!("aggregation helper")
    }
}
