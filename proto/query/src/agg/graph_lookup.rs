//! `$graphLookup`: a recursive search of another collection, from a start value along
//! a pair of fields.

use std::collections::HashSet;

use bson::{Bson, Document};

use super::lookup::{build_index, key, local_values};
use super::{collection_name, project, split_path, AggContext};
use crate::expr::{self, Expr, Variables};
use crate::matcher::Matcher;
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(crate) struct GraphLookup {
    pub(crate) from: String,
    start_with: Expr,
    connect_from: Vec<String>,
    connect_to: Vec<String>,
    as_path: Vec<String>,
    max_depth: Option<i64>,
    depth_field: Option<Vec<String>>,
    restrict: Option<Matcher>,
}

impl GraphLookup {
    pub(crate) fn parse(arg: &Bson) -> MongoResult<GraphLookup> {
        let Bson::Document(d) = arg else {
            return Err(MongoError::new(
                ErrorCode::GraphLookupNotObject,
                "the $graphLookup stage specification must be an object",
            ));
        };
        let mut from = None;
        let mut start_with = None;
        let (mut cf, mut ct, mut as_path, mut depth_field) = (None, None, None, None);
        let mut max_depth = None;
        let mut restrict = None;
        let path_arg = |k: &str, v: &Bson| -> MongoResult<Vec<String>> {
            if let Bson::String(s) = v {
                crate::depth::check_path(s)?;
            }
            match v {
                Bson::String(s)
                    if !s.is_empty() && !s.starts_with('$') && !s.split('.').any(str::is_empty) =>
                {
                    Ok(split_path(s))
                }
                Bson::String(s) => Err(MongoError::new(
                    ErrorCode::FieldPathDollarPrefix,
                    format!("FieldPath '{s}' is not valid for $graphLookup '{k}'"),
                )),
                _ => Err(MongoError::new(
                    ErrorCode::GraphLookupArgumentNotString,
                    format!(
                        "expected string as argument for {k}, found: {}",
                        expr::type_name(v)
                    ),
                )),
            }
        };
        for (k, v) in d {
            match k.as_str() {
                "from" => match v {
                    Bson::String(s) => from = Some(collection_name(s)?),
                    _ => {
                        return Err(MongoError::new(
                            ErrorCode::GraphLookupArgumentNotString,
                            "expected string as argument for from",
                        ))
                    }
                },
                "startWith" => start_with = Some(Expr::parse(v)?),
                "connectFromField" => cf = Some(path_arg(k, v)?),
                "connectToField" => ct = Some(path_arg(k, v)?),
                "as" => as_path = Some(path_arg(k, v)?),
                "depthField" => depth_field = Some(path_arg(k, v)?),
                "maxDepth" => {
                    let n = expr::as_int_exact(v).ok_or_else(|| {
                        MongoError::new(
                            ErrorCode::GraphLookupMaxDepthNotNumeric,
                            format!(
                                "maxDepth must be numeric, found type: {}",
                                expr::type_name(v)
                            ),
                        )
                    })?;
                    if n < 0 {
                        return Err(MongoError::new(
                            ErrorCode::GraphLookupMaxDepthNegative,
                            format!("maxDepth requires a nonnegative argument, found: {n}"),
                        ));
                    }
                    max_depth = Some(n);
                }
                "restrictSearchWithMatch" => {
                    let Bson::Document(m) = v else {
                        return Err(MongoError::new(
                            ErrorCode::GraphLookupRestrictNotObject,
                            "restrictSearchWithMatch must be an object",
                        ));
                    };
                    restrict = Some(Matcher::new(m)?);
                }
                _ => {
                    return Err(MongoError::new(
                        ErrorCode::GraphLookupUnknownArgument,
                        format!("Unknown argument to $graphLookup: {k}"),
                    ))
                }
            }
        }
        let missing = || {
            MongoError::new(
                ErrorCode::GraphLookupMissingArgument,
                "from, as, startWith, connectFromField and connectToField must all be specified",
            )
        };
        Ok(GraphLookup {
            from: from.ok_or_else(missing)?,
            start_with: start_with.ok_or_else(missing)?,
            connect_from: cf.ok_or_else(missing)?,
            connect_to: ct.ok_or_else(missing)?,
            as_path: as_path.ok_or_else(missing)?,
            max_depth,
            depth_field,
            restrict,
        })
    }

    pub(crate) fn run(
        &self,
        docs: Vec<Document>,
        ctx: &dyn AggContext,
        vars: &Variables,
    ) -> MongoResult<Vec<Document>> {
        let mut foreign = ctx.collection_docs(&self.from)?;
        if let Some(m) = &self.restrict {
            let mut kept = Vec::with_capacity(foreign.len());
            for d in foreign {
                if m.matches_checked(&d)? {
                    kept.push(d);
                }
            }
            foreign = kept;
        }
        let index = build_index(&foreign, &self.connect_to);
        let mut out = Vec::with_capacity(docs.len());
        for mut d in docs {
            let start = self.start_with.eval(&d, vars)?;
            let mut frontier: Vec<Bson> = match start {
                Bson::Array(a) => a,
                Bson::Undefined => vec![Bson::Null],
                v => vec![v],
            };
            let mut queried: HashSet<Vec<u8>> = HashSet::new();
            let mut visited: HashSet<usize> = HashSet::new();
            let mut found: Vec<(usize, i64)> = Vec::new();
            let mut depth = 0i64;
            while !frontier.is_empty() && self.max_depth.is_none_or(|m| depth <= m) {
                let mut next = Vec::new();
                for v in frontier {
                    let k = key(&v);
                    if !queried.insert(k.clone()) {
                        continue;
                    }
                    let Some(ids) = index.get(&k) else { continue };
                    for &i in ids {
                        if visited.insert(i) {
                            found.push((i, depth));
                            for x in local_values(&foreign[i], &self.connect_from) {
                                if !matches!(x, Bson::Null) {
                                    next.push(x);
                                }
                            }
                        }
                    }
                }
                frontier = next;
                depth += 1;
            }
            let results: Vec<Bson> = found
                .into_iter()
                .map(|(i, depth)| {
                    let mut fd = foreign[i].clone();
                    if let Some(df) = &self.depth_field {
                        project::set_nested(&mut fd, df, Bson::Int64(depth));
                    }
                    Bson::Document(fd)
                })
                .collect();
            project::set_nested(&mut d, &self.as_path, Bson::Array(results));
            out.push(d);
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
        check_errs(vec![(bson!([{"$graphLookup": {"from": "x"}}]), 40105)]);
    }

    #[test]
    fn graph_lookup() {
        check(
            bson!([{"$graphLookup": {
                "from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
                "connectToField": "name", "as": "chain", "depthField": "depth"
            }}, {"$project": {"names": "$chain.name", "depths": "$chain.depth"}}]),
            vec![doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"}],
            vec![doc! {"_id": 5, "names": ["Ron", "Eliot", "Dev"], "depths": [0i64, 1i64, 2i64]}],
        );
        check(
            bson!([{"$graphLookup": {
                "from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
                "connectToField": "name", "as": "chain", "maxDepth": 0
            }}, {"$project": {"names": "$chain.name"}}]),
            vec![doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"}],
            vec![doc! {"_id": 5, "names": ["Ron"]}],
        );
    }
}
