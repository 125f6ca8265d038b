//! `$replaceRoot` and `$replaceWith`: each document becomes what an expression makes of it.

use bson::{Bson, Document};

use super::err;
use crate::expr::{Expr, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct ReplaceRoot {
    new_root: Expr,
}

impl ReplaceRoot {
    /// `$replaceRoot: {newRoot: <expr>}`.
    pub(super) fn parse(arg: &Bson) -> MongoResult<ReplaceRoot> {
        let Bson::Document(d) = arg else {
            return Err(err(
                ErrorCode::ReplaceRootNotObject,
                "expected an object as specification for $replaceRoot stage",
            ));
        };
        for k in d.keys() {
            if k != "newRoot" {
                return Err(MongoError::new(
                    ErrorCode::UnknownField,
                    format!("BSON field '$replaceRoot.{k}' is an unknown field."),
                ));
            }
        }
        let root = d.get("newRoot").ok_or_else(|| {
            MongoError::new(
                ErrorCode::RequiredFieldMissing,
                "BSON field '$replaceRoot.newRoot' is missing but a required field",
            )
        })?;
        Ok(ReplaceRoot {
            new_root: Expr::parse(root)?,
        })
    }

    /// `$replaceWith: <expr>`.
    pub(super) fn parse_with(arg: &Bson) -> MongoResult<ReplaceRoot> {
        Ok(ReplaceRoot {
            new_root: Expr::parse(arg)?,
        })
    }

    pub(super) fn run(&self, docs: Vec<Document>, vars: &Variables) -> MongoResult<Vec<Document>> {
        let mut out = Vec::with_capacity(docs.len());
        for d in &docs {
            match self.new_root.eval(d, vars)? {
                Bson::Document(nd) => out.push(nd),
                v => {
                    let shown = if matches!(v, Bson::Undefined) {
                        "MISSING".to_string()
                    } else {
                        v.to_string()
                    };
                    return Err(err(
                        ErrorCode::ReplaceRootNotObject,
                        format!(
                            "'replacement document' must evaluate to an object, but resulting value was: {shown}. Type of resulting value: '{}'. Input document: {d}",
                            crate::expr::type_name_or_missing(&v)
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$replaceRoot": {}}]), 40414),
            (bson!([{"$replaceRoot": {"newRoot": "$a", "x": 1}}]), 40415),
        ]);
    }

    #[test]
    fn replace_root_and_replace_with() {
        let d = vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{"b": 1}, 2], "x": 10}];
        check(
            bson!([{"$replaceRoot": {"newRoot": "$a"}}]),
            d.clone(),
            vec![doc! {"b": 1}],
        );
        check(
            bson!([{"$replaceWith": {"$mergeObjects": [{"dflt": 1}, "$a"]}}]),
            d.clone(),
            vec![doc! {"dflt": 1, "b": 1}],
        );
        let e = run(bson!([{"$replaceRoot": {"newRoot": "$missing"}}]), d).unwrap_err();
        assert_eq!(e.code, 40228);
    }
}
