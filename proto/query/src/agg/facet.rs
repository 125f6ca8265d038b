//! `$facet`: sub-pipelines over the same input, each result an array field of one
//! document.

use bson::{Bson, Document};

use super::{err, stage_docs, AggContext, Nesting, Pipeline};
use crate::expr::Variables;
use crate::{ErrorCode, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct Facet {
    facets: Vec<(String, Pipeline)>,
}

impl Facet {
    /// `$facet: {name: [stages...], ...}`.
    pub(super) fn parse(arg: &Bson) -> MongoResult<Facet> {
        let Bson::Document(d) = arg else {
            return Err(err(
                ErrorCode::GroupSpecNotObject,
                "the $facet specification must be a non-empty object",
            ));
        };
        if d.is_empty() {
            return Err(err(
                ErrorCode::FacetSpecInvalid,
                "the $facet specification must be a non-empty object",
            ));
        }
        let mut facets = Vec::new();
        for (k, v) in d {
            let Bson::Array(stages) = v else {
                return Err(err(
                    ErrorCode::FacetArgumentNotArray,
                    format!(
                        "arguments to $facet must be arrays, {k} is type {}",
                        crate::expr::type_name(v)
                    ),
                ));
            };
            let stages = stage_docs(
                stages,
                ErrorCode::FacetStageNotObject,
                "subpipeline elements must be objects",
            )?;
            facets.push((k.clone(), Pipeline::parse_inner(&stages, Nesting::Facet)?));
        }
        Ok(Facet { facets })
    }

    pub(super) fn pipelines(&self) -> impl Iterator<Item = &Pipeline> {
        self.facets.iter().map(|(_, p)| p)
    }

    pub(super) fn run(
        &self,
        docs: Vec<Document>,
        ctx: &dyn AggContext,
        vars: &Variables,
    ) -> MongoResult<Vec<Document>> {
        let mut out = Document::new();
        for (name, p) in &self.facets {
            let res = p.run_with(docs.clone(), ctx, vars)?;
            out.insert(
                name.clone(),
                Bson::Array(res.into_iter().map(Bson::Document).collect()),
            );
        }
        // Each $facet nests its input two levels deeper: a chain of them must stop.
        crate::depth::check_computed_document(&out)?;
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$facet": {"a": [{"$out": "x"}]}}]), 40600),
            (bson!([{"$facet": {"a": 1}}]), 40170),
        ]);
    }

    #[test]
    fn sub_pipelines() {
        check(
            bson!([{"$facet": {
                "cheap": [{"$match": {"price": {"$lt": 10}}}, {"$project": {"_id": 1}}],
                "n": [{"$count": "n"}],
            }}]),
            orders(),
            vec![doc! {"cheap": [{"_id": 4}, {"_id": 5}], "n": [{"n": 5}]}],
        );
    }
}
