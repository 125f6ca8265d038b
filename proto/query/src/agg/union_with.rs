//! `$unionWith`: the input followed by another collection's documents, through a
//! pipeline of their own if one is given.

use bson::{Bson, Document};

use super::{collection_name, stage_docs, AggContext, Nesting, Pipeline};
use crate::expr::Variables;
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct UnionWith {
    pub(super) coll: String,
    pub(super) pipeline: Option<Box<Pipeline>>,
}

impl UnionWith {
    /// A collection name, or `{coll, pipeline}`.
    pub(super) fn parse(arg: &Bson) -> MongoResult<UnionWith> {
        Ok(match arg {
            Bson::String(c) => UnionWith {
                coll: collection_name(c)?,
                pipeline: None,
            },
            Bson::Document(d) => {
                let mut coll = None;
                let mut pipeline = None;
                for (k, v) in d {
                    match (k.as_str(), v) {
                        ("coll", Bson::String(c)) => coll = Some(collection_name(c)?),
                        ("pipeline", Bson::Array(a)) => {
                            let stages = stage_docs(
                                a,
                                ErrorCode::UnionWithStageNotObject,
                                "$unionWith pipeline elements must be objects",
                            )?;
                            pipeline =
                                Some(Box::new(Pipeline::parse_inner(&stages, Nesting::Lookup)?));
                        }
                        ("coll" | "pipeline", _) => {
                            return Err(MongoError::new(
                                ErrorCode::TypeMismatch,
                                format!("BSON field '$unionWith.{k}' is the wrong type"),
                            ))
                        }
                        _ => {
                            return Err(MongoError::new(
                                ErrorCode::UnknownField,
                                format!("BSON field '$unionWith.{k}' is an unknown field."),
                            ))
                        }
                    }
                }
                let coll = coll.ok_or_else(|| {
                    MongoError::new(
                        ErrorCode::RequiredFieldMissing,
                        "BSON field '$unionWith.coll' is missing but a required field",
                    )
                })?;
                UnionWith { coll, pipeline }
            }
            _ => {
                return Err(MongoError::failed_to_parse(
                    "the $unionWith stage specification must be an object or string",
                ))
            }
        })
    }

    pub(super) fn run(
        &self,
        mut docs: Vec<Document>,
        ctx: &dyn AggContext,
        vars: &Variables,
    ) -> MongoResult<Vec<Document>> {
        let other = ctx.collection_docs(&self.coll)?;
        let other = match &self.pipeline {
            Some(p) => p.run_with(other, ctx, vars)?,
            None => other,
        };
        docs.extend(other);
        Ok(docs)
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn other_collection_with_and_without_pipeline() {
        check(
            bson!([{"$unionWith": {"coll": "inventory", "pipeline": [{"$match": {"instock": {"$gt": 70}}}, {"$project": {"_id": 1}}]}}]),
            vec![doc! {"_id": "own"}],
            vec![doc! {"_id": "own"}, doc! {"_id": 1}, doc! {"_id": 2}],
        );
        check(
            bson!([{"$unionWith": "inventory"}, {"$count": "n"}]),
            vec![doc! {"_id": "own"}],
            vec![doc! {"n": 6}],
        );
    }
}
