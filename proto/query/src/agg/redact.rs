//! `$redact`: an expression decides, level by level, what of each document to keep.

use bson::{Bson, Document};

use super::err;
use crate::expr::{Expr, Variables};
use crate::{ErrorCode, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct Redact {
    expr: Expr,
}

impl Redact {
    pub(super) fn parse(arg: &Bson) -> MongoResult<Redact> {
        Ok(Redact {
            expr: Expr::parse(arg)?,
        })
    }

    pub(super) fn run(&self, docs: Vec<Document>, vars: &Variables) -> MongoResult<Vec<Document>> {
        let mut out = Vec::with_capacity(docs.len());
        for d in &docs {
            if let Some(r) = redact_level(&self.expr, d, d, vars)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// What `$$KEEP`, `$$PRUNE` or `$$DESCEND` leaves of `current`, a level of `root`.
fn redact_level(
    e: &Expr,
    root: &Document,
    current: &Document,
    vars: &Variables,
) -> MongoResult<Option<Document>> {
    let v = e.eval_with_current(root, current, vars)?;
    match v.as_str() {
        Some("PRUNE") => Ok(None),
        Some("KEEP") => Ok(Some(current.clone())),
        Some("DESCEND") => {
            let mut out = Document::new();
            for (k, val) in current {
                match val {
                    Bson::Document(sub) => {
                        if let Some(r) = redact_level(e, root, sub, vars)? {
                            out.insert(k.clone(), r);
                        }
                    }
                    Bson::Array(items) => {
                        let mut kept = Vec::new();
                        for it in items {
                            match it {
                                Bson::Document(sub) => {
                                    if let Some(r) = redact_level(e, root, sub, vars)? {
                                        kept.push(Bson::Document(r));
                                    }
                                }
                                other => kept.push(other.clone()),
                            }
                        }
                        out.insert(k.clone(), kept);
                    }
                    other => {
                        out.insert(k.clone(), other.clone());
                    }
                }
            }
            Ok(Some(out))
        }
        _ => Err(err(
            ErrorCode::RedactInvalidResult,
            format!("$redact's expression should not return anything aside from the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned {v}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn prune_and_descend() {
        check(
            bson!([{"$redact": {"$cond": {"if": {"$eq": ["$level", 5]}, "then": "$$PRUNE", "else": "$$DESCEND"}}}]),
            vec![
                doc! {"_id": 1, "level": 1, "sub": {"level": 5, "x": 1}, "list": [{"level": 5}, {"level": 2}, 3]},
            ],
            vec![doc! {"_id": 1, "level": 1, "list": [{"level": 2}, 3]}],
        );
    }
}
