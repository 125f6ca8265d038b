//! `$match`: a filter whose top-level `$expr` clauses the stage evaluates itself, so that
//! they see the pipeline's variables.

use bson::{Bson, Document};

use super::err;
use crate::expr::{Expr, Variables};
use crate::matcher::Matcher;
use crate::{ErrorCode, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct MatchStage {
    /// The filter without top-level `$expr` (None when nothing is left).
    matcher: Option<Matcher>,
    /// Top-level `$expr` clauses, evaluated here so they see `let` variables.
    exprs: Vec<Expr>,
}

impl MatchStage {
    pub(super) fn parse(arg: &Bson) -> MongoResult<MatchStage> {
        let Bson::Document(filter) = arg else {
            return Err(err(
                ErrorCode::MatchSpecNotObject,
                "the match filter must be an expression in an object",
            ));
        };
        let mut rest = Document::new();
        let mut exprs = Vec::new();
        for (k, v) in filter {
            match (k.as_str(), v) {
                ("$expr", v) => exprs.push(Expr::parse(v)?),
                ("$and", Bson::Array(items)) => {
                    let mut kept = Vec::new();
                    for it in items {
                        match it {
                            Bson::Document(d) if d.len() == 1 && d.contains_key("$expr") => {
                                exprs.push(Expr::parse(&d["$expr"])?)
                            }
                            other => kept.push(other.clone()),
                        }
                    }
                    if !kept.is_empty() {
                        rest.insert("$and", kept);
                    }
                }
                _ => {
                    rest.insert(k.clone(), v.clone());
                }
            }
        }
        // Validate the whole filter even when all of it was `$expr` (e.g. `$and: []`).
        let matcher = if rest.is_empty() && !filter.contains_key("$and") {
            None
        } else {
            Some(Matcher::new(&rest)?)
        };
        Ok(MatchStage { matcher, exprs })
    }

    pub(super) fn run(&self, docs: Vec<Document>, vars: &Variables) -> MongoResult<Vec<Document>> {
        let mut out = Vec::with_capacity(docs.len());
        for d in docs {
            if self.matches(&d, vars)? {
                out.push(d);
            }
        }
        Ok(out)
    }

    fn matches(&self, d: &Document, vars: &Variables) -> MongoResult<bool> {
        for e in &self.exprs {
            if !e.eval_bool(d, vars)? {
                return Ok(false);
            }
        }
        match &self.matcher {
            Some(m) => m.matches_checked(d),
            None => Ok(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$match": 1}]), 15959),
            (bson!([{"$match": {"$foo": 1}}]), 2),
        ]);
    }

    #[test]
    fn filters_and_expr_clauses() {
        check(
            bson!([{"$match": {"price": {"$gte": 10}}}, {"$project": {"item": 1, "_id": 0}}]),
            orders(),
            vec![
                doc! {"item": "almonds"},
                doc! {"item": "pecans"},
                doc! {"item": "bread"},
            ],
        );
        check(
            bson!([{"$match": {"$expr": {"$gt": [{"$multiply": ["$price", "$quantity"]}, 50]}}}, {"$project": {"_id": 1}}]),
            orders(),
            vec![doc! {"_id": 4}],
        );
        check(
            bson!([{"$match": {"$and": [{"$expr": {"$eq": ["$cust", "y"]}}, {"price": {"$lt": 5}}]}}, {"$project": {"_id": 1}}]),
            orders(),
            vec![doc! {"_id": 5}],
        );
    }
}
