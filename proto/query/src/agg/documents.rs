//! `$documents`: a pipeline's input made by an expression, not read from a collection.

use bson::{Bson, Document};

use super::err;
use crate::expr::{Expr, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct Documents {
    expr: Expr,
}

impl Documents {
    pub(super) fn parse(arg: &Bson) -> MongoResult<Documents> {
        Ok(Documents {
            expr: Expr::parse(arg)?,
        })
    }

    pub(super) fn run(&self, vars: &Variables) -> MongoResult<Vec<Document>> {
        let v = self.expr.eval(&Document::new(), vars)?;
        let Bson::Array(items) = v else {
            return Err(err(ErrorCode::DocumentsNotArray, "an array is expected"));
        };
        items
            .into_iter()
            .map(|x| match x {
                Bson::Document(d) => Ok(d),
                _ => Err(MongoError::new(
                    ErrorCode::TypeMismatch,
                    "$documents elements must be objects",
                )),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn replaces_the_input() {
        check(
            bson!([{"$documents": [{"x": 1}, {"x": 2}]}, {"$match": {"x": 2}}]),
            vec![doc! {"ignored": true}],
            vec![doc! {"x": 2}],
        );
    }
}
