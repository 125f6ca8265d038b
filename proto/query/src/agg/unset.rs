//! `$unset`: removes fields by path, through arrays of documents too.

use bson::{Bson, Document};

use super::{err, project, split_path};
use crate::{ErrorCode, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct Unset {
    paths: Vec<Vec<String>>,
}

impl Unset {
    /// A path or an array of paths.
    pub(super) fn parse(arg: &Bson) -> MongoResult<Unset> {
        let paths = match arg {
            Bson::String(s) => vec![s.clone()],
            Bson::Array(a) if a.is_empty() => {
                return Err(err(ErrorCode::UnsetSpecEmpty, "$unset specification must be a string or an array with at least one field"))
            }
            Bson::Array(a) => a
                .iter()
                .map(|x| match x {
                    Bson::String(s) => Ok(s.clone()),
                    _ => Err(err(ErrorCode::UnsetSpecNotStrings, "$unset specification must be a string or an array containing only string values")),
                })
                .collect::<MongoResult<Vec<_>>>()?,
            _ => return Err(err(ErrorCode::UnsetSpecInvalid, "$unset specification must be a string or an array")),
        };
        for p in &paths {
            crate::depth::check_path(p)?;
            if p.is_empty() || p.starts_with('$') || p.split('.').any(str::is_empty) {
                return Err(err(
                    ErrorCode::UnsetSpecInvalid,
                    format!("Invalid $unset :: caused by :: FieldPath '{p}' is not valid"),
                ));
            }
        }
        Ok(Unset {
            paths: paths.iter().map(|p| split_path(p)).collect(),
        })
    }

    pub(super) fn run(&self, docs: Vec<Document>) -> Vec<Document> {
        docs.into_iter()
            .map(|mut d| {
                for p in &self.paths {
                    project::remove_nested(&mut d, p);
                }
                d
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (bson!([{"$unset": []}]), 31119),
            (bson!([{"$unset": 1}]), 31002),
        ]);
    }

    #[test]
    fn removes_paths() {
        let d = vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{"b": 1}, 2], "x": 10}];
        check(
            bson!([{"$unset": ["a.b", "x"]}]),
            d.clone(),
            vec![doc! {"_id": 1, "a": {}, "arr": [{"b": 1}, 2]}],
        );
        check(
            bson!([{"$unset": "arr.b"}]),
            d,
            vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{}, 2], "x": 10}],
        );
    }
}
