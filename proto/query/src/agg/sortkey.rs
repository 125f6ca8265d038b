//! Sort keys for `$sort`, `$top`/`$bottom` and friends, on top of [`SortSpec`]: keys are
//! computed once per document, then compared.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::sort::SortSpec;
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(crate) struct SortKeys {
    spec: SortSpec,
}

impl SortKeys {
    /// The `$sort` stage's specification.
    pub(crate) fn parse_stage(arg: &Bson) -> MongoResult<SortKeys> {
        let Bson::Document(spec) = arg else {
            return Err(MongoError::new(
                ErrorCode::SortStageSpecNotObject,
                "the $sort key specification must be an object",
            ));
        };
        Self::parse(spec)
    }

    pub(crate) fn parse(spec: &Document) -> MongoResult<SortKeys> {
        if spec.is_empty() {
            return Err(MongoError::new(
                ErrorCode::SortSpecEmpty,
                "$sort stage must have at least one sort key",
            ));
        }
        if spec.contains_key("$natural") {
            return Err(MongoError::new(
                ErrorCode::NotImplemented,
                "$natural sort is not supported in $sort",
            ));
        }
        Ok(SortKeys {
            spec: SortSpec::new(spec)?,
        })
    }

    pub(crate) fn spec(&self) -> &SortSpec {
        &self.spec
    }

    pub(crate) fn key(&self, d: &Document) -> Vec<Bson> {
        self.spec.sort_key(d)
    }

    pub(crate) fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        self.spec.compare_keys(a, b)
    }

    /// Sorts stably; with `limit`, only the first `limit` documents need to be in order.
    pub(crate) fn sort_top(&self, docs: Vec<Document>, limit: Option<usize>) -> Vec<Document> {
        let mut keyed: Vec<(Vec<Bson>, Document)> =
            docs.into_iter().map(|d| (self.key(&d), d)).collect();
        match limit {
            Some(k) if k > 0 && k < keyed.len() / 4 => {
                // Stable top-k: order by (key, original position).
                let mut idx: Vec<usize> = (0..keyed.len()).collect();
                let cmp = |a: &usize, b: &usize| {
                    self.compare_keys(&keyed[*a].0, &keyed[*b].0).then(a.cmp(b))
                };
                idx.select_nth_unstable_by(k - 1, cmp);
                idx.truncate(k);
                idx.sort_by(cmp);
                let mut slots: Vec<Option<Document>> =
                    keyed.into_iter().map(|(_, d)| Some(d)).collect();
                return idx.into_iter().map(|i| slots[i].take().unwrap()).collect();
            }
            _ => keyed.sort_by(|a, b| self.compare_keys(&a.0, &b.0)),
        }
        keyed.into_iter().map(|(_, d)| d).collect()
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc, Document};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$sort": {}}]), 15976),
            (bson!([{"$sort": {"a": 2}}]), 15975),
        ]);
    }

    #[test]
    fn sort() {
        check(
            bson!([{"$sort": {"price": -1}}, {"$project": {"_id": 1}}]),
            orders(),
            vec![
                doc! {"_id": 2},
                doc! {"_id": 1},
                doc! {"_id": 3},
                doc! {"_id": 4},
                doc! {"_id": 5},
            ],
        );
        check(
            bson!([{"$sort": {"cust": 1, "price": -1}}, {"$project": {"_id": 1}}]),
            orders(),
            vec![
                doc! {"_id": 1},
                doc! {"_id": 3},
                doc! {"_id": 2},
                doc! {"_id": 5},
                doc! {"_id": 4},
            ],
        );
        // missing sorts with null, before numbers; arrays by min ascending / max descending
        let d = vec![
            doc! {"_id": 1, "v": [5, 1]},
            doc! {"_id": 2, "v": 3},
            doc! {"_id": 3},
            doc! {"_id": 4, "v": null},
        ];
        check(
            bson!([{"$sort": {"v": 1, "_id": 1}}, {"$project": {"_id": 1}}]),
            d.clone(),
            vec![
                doc! {"_id": 3},
                doc! {"_id": 4},
                doc! {"_id": 1},
                doc! {"_id": 2},
            ],
        );
        check(
            bson!([{"$sort": {"v": -1, "_id": 1}}, {"$project": {"_id": 1}}]),
            d.clone(),
            vec![
                doc! {"_id": 1},
                doc! {"_id": 2},
                doc! {"_id": 3},
                doc! {"_id": 4},
            ],
        );
        // sort + limit (top-k path) stays stable
        let many: Vec<Document> = (0..100).map(|i| doc! {"_id": i, "k": i % 3}).collect();
        check(
            bson!([{"$sort": {"k": 1}}, {"$limit": 3}, {"$project": {"_id": 1}}]),
            many,
            vec![doc! {"_id": 0}, doc! {"_id": 3}, doc! {"_id": 6}],
        );
    }
}
