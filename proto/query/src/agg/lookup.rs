//! `$lookup` (equality and pipeline forms), and the equality matching of a path's values
//! that `$graphLookup` shares.

use std::collections::{HashMap, HashSet};

use bson::{Bson, Document};

use super::{collection_name, project, split_path, AggContext, Nesting, Pipeline};
use crate::expr::{self, Expr, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(crate) struct Lookup {
    pub(crate) from: Option<String>,
    local: Option<Vec<String>>,
    foreign: Option<Vec<String>>,
    as_path: Vec<String>,
    let_vars: Vec<(String, Expr)>,
    pub(crate) pipeline: Option<Pipeline>,
}

fn parse_err(msg: impl Into<String>) -> MongoError {
    MongoError::failed_to_parse(msg)
}

impl Lookup {
    pub(crate) fn parse(arg: &Bson) -> MongoResult<Lookup> {
        let Bson::Document(d) = arg else {
            return Err(parse_err(
                "the $lookup stage specification must be an object",
            ));
        };
        let mut from = None;
        let (mut local, mut foreign, mut as_path) = (None, None, None);
        let mut let_vars = Vec::new();
        let mut pipeline = None;
        for (k, v) in d {
            match k.as_str() {
                "from" => match v {
                    Bson::String(s) => from = Some(collection_name(s)?),
                    // MongoDB takes `{db, coll}` only for a few internal namespaces; any
                    // other database would be read without the caller being authorized
                    // on it, so none is taken.
                    Bson::Document(ns) => {
                        return Err(parse_err(format!(
                            "$lookup with syntax {{from: {{db:<>, coll:<>}},..}} is not supported for db: {} and coll: {}",
                            ns.get_str("db").unwrap_or_default().chars().take(64).collect::<String>(),
                            ns.get_str("coll").unwrap_or_default().chars().take(128).collect::<String>(),
                        )))
                    }
                    _ => {
                        return Err(MongoError::new(
                            ErrorCode::LookupArgumentNotString,
                            format!(
                                "$lookup argument 'from' must be a string, is type {}",
                                expr::type_name(v)
                            ),
                        ))
                    }
                },
                "localField" | "foreignField" | "as" => {
                    let Bson::String(s) = v else {
                        return Err(MongoError::new(
                            ErrorCode::LookupArgumentNotString,
                            format!(
                                "$lookup argument '{k}' must be a string, is type {}",
                                expr::type_name(v)
                            ),
                        ));
                    };
                    crate::depth::check_path(s)?;
                    if s.is_empty() || s.starts_with('$') || s.split('.').any(str::is_empty) {
                        return Err(MongoError::new(
                            ErrorCode::FieldPathDollarPrefix,
                            format!("FieldPath '{s}' is not valid for $lookup '{k}'"),
                        ));
                    }
                    let p = Some(split_path(s));
                    match k.as_str() {
                        "localField" => local = p,
                        "foreignField" => foreign = p,
                        _ => as_path = p,
                    }
                }
                "let" => {
                    let Bson::Document(l) = v else {
                        return Err(parse_err("$lookup argument 'let' must be an object"));
                    };
                    for (name, e) in l {
                        let_vars.push((name.clone(), Expr::parse(e)?));
                    }
                }
                "pipeline" => {
                    let Bson::Array(stages) = v else {
                        return Err(parse_err("$lookup argument 'pipeline' must be an array"));
                    };
                    let stages = super::stage_docs(
                        stages,
                        ErrorCode::FailedToParse,
                        "$lookup pipeline elements must be objects",
                    )?;
                    pipeline = Some(Pipeline::parse_inner(&stages, Nesting::Lookup)?);
                }
                _ => return Err(parse_err(format!("unknown argument to $lookup: {k}"))),
            }
        }
        let as_path = as_path.ok_or_else(|| parse_err("must specify 'as' field for a $lookup"))?;
        if local.is_some() != foreign.is_some() {
            return Err(parse_err("$lookup requires both or neither of 'localField' and 'foreignField' to be specified"));
        }
        if local.is_none() && pipeline.is_none() {
            return Err(parse_err("$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified"));
        }
        let starts_with_documents = pipeline
            .as_ref()
            .is_some_and(Pipeline::starts_with_documents);
        if from.is_none() && !starts_with_documents {
            return Err(parse_err("must specify 'from' field for a $lookup"));
        }
        for (name, _) in &let_vars {
            Variables::new().bind_let(&bson::doc! {name.clone(): 0}, &Document::new())?;
        }
        Ok(Lookup {
            from,
            local,
            foreign,
            as_path,
            let_vars,
            pipeline,
        })
    }

    pub(crate) fn run(
        &self,
        docs: Vec<Document>,
        ctx: &dyn AggContext,
        vars: &Variables,
    ) -> MongoResult<Vec<Document>> {
        let foreign_docs = match &self.from {
            Some(c) => ctx.collection_docs(c)?,
            None => Vec::new(),
        };
        let index = self.foreign.as_ref().map(|f| build_index(&foreign_docs, f));
        let mut out = Vec::with_capacity(docs.len());
        for mut d in docs {
            let matched: Vec<Document> = match (&self.local, &index) {
                (Some(local), Some(index)) => {
                    let mut hits: Vec<usize> = Vec::new();
                    for v in local_values(&d, local) {
                        if let Some(ids) = index.get(&key(&v)) {
                            hits.extend(ids);
                        }
                    }
                    hits.sort_unstable();
                    hits.dedup();
                    hits.into_iter().map(|i| foreign_docs[i].clone()).collect()
                }
                _ => foreign_docs.clone(),
            };
            let matched = match &self.pipeline {
                Some(p) => {
                    let mut inner = vars.clone();
                    for (name, e) in &self.let_vars {
                        let v = e.eval(&d, vars)?;
                        inner.set(
                            name.clone(),
                            if matches!(v, Bson::Undefined) {
                                Bson::Null
                            } else {
                                v
                            },
                        );
                    }
                    p.run_with(matched, ctx, &inner)?
                }
                None => matched,
            };
            project::set_nested(
                &mut d,
                &self.as_path,
                Bson::Array(matched.into_iter().map(Bson::Document).collect()),
            );
            out.push(d);
        }
        Ok(out)
    }
}

pub(super) fn key(v: &Bson) -> Vec<u8> {
    let mut k = Vec::new();
    expr::canonical_key(v, &mut k);
    k
}

/// Values a dotted path reaches for equality matching: through arrays, and at the
/// leaf both an array and its elements. A missing branch contributes null.
pub(crate) fn match_values(d: &Document, path: &[String]) -> Vec<Bson> {
    let mut out = Vec::new();
    Collect::new(path, true).doc(d, path, &mut out);
    out
}

/// A walk of a path through a document. A numeric component both indexes an array and
/// is looked up in its documents, so a value can be reached twice with the same path
/// left; it is walked once (otherwise the walk grows exponentially with depth).
struct Collect {
    whole_arrays: bool,
    seen: Option<HashSet<(usize, usize)>>,
}

impl Collect {
    fn new(path: &[String], whole_arrays: bool) -> Collect {
        let numeric = path.iter().any(|c| c.parse::<usize>().is_ok());
        Collect {
            whole_arrays,
            seen: numeric.then(HashSet::new),
        }
    }

    fn doc(&mut self, d: &Document, path: &[String], out: &mut Vec<Bson>) {
        match d.get(&path[0]) {
            Some(x) => self.value(x, &path[1..], out),
            None => out.push(Bson::Null),
        }
    }

    fn value(&mut self, v: &Bson, path: &[String], out: &mut Vec<Bson>) {
        if let Some(seen) = &mut self.seen {
            if !seen.insert((v as *const Bson as usize, path.len())) {
                return;
            }
        }
        let whole_arrays = self.whole_arrays;
        if path.is_empty() {
            if let Bson::Array(a) = v {
                if whole_arrays {
                    out.push(v.clone());
                }
                out.extend(a.iter().cloned());
                if a.is_empty() && !whole_arrays {
                    out.push(Bson::Null);
                }
            } else {
                out.push(v.clone());
            }
            return;
        }
        match v {
            Bson::Document(d) => self.doc(d, path, out),
            Bson::Array(a) => {
                if let Ok(i) = path[0].parse::<usize>() {
                    if let Some(e) = a.get(i) {
                        self.value(e, &path[1..], out);
                    }
                }
                for e in a {
                    if matches!(e, Bson::Document(_)) {
                        self.value(e, path, out);
                    }
                }
            }
            _ => out.push(Bson::Null),
        }
    }
}

/// The values of `localField` to look up: array elements, or null when missing.
pub(super) fn local_values(d: &Document, path: &[String]) -> Vec<Bson> {
    let mut out = Vec::new();
    Collect::new(path, false).doc(d, path, &mut out);
    if out.is_empty() {
        out.push(Bson::Null);
    }
    out
}

pub(super) fn build_index(docs: &[Document], path: &[String]) -> HashMap<Vec<u8>, Vec<usize>> {
    let mut index: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    for (i, d) in docs.iter().enumerate() {
        let mut seen = HashSet::new();
        for v in match_values(d, path) {
            let k = key(&v);
            if seen.insert(k.clone()) {
                index.entry(k).or_default().push(i);
            }
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use crate::agg::test_support::*;

    #[test]
    fn parse_errors() {
        check_errs(vec![
            (
                bson!([{"$lookup": {"from": "x", "localField": "a", "foreignField": "b"}}]),
                9,
            ),
            (bson!([{"$lookup": {"from": "x", "as": "y"}}]), 9),
            (
                bson!([{"$lookup": {"from": "x", "localField": 1, "foreignField": "b", "as": "y"}}]),
                4570,
            ),
            (bson!([{"$graphLookup": {"from": "x"}}]), 40105),
        ]);
    }

    #[test]
    fn lookup_forms() {
        let input = vec![
            doc! {"_id": 1, "item": "almonds"},
            doc! {"_id": 2, "item": ["bread", "cashews"]},
            doc! {"_id": 3},
        ];
        check(
            bson!([{"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku", "as": "inv"}}, {"$project": {"ids": "$inv._id"}}]),
            input.clone(),
            vec![
                doc! {"_id": 1, "ids": [1]},
                doc! {"_id": 2, "ids": [2, 3]},
                doc! {"_id": 3, "ids": [4, 5]},
            ],
        );
        check(
            bson!([{"$lookup": {
                "from": "inventory",
                "let": {"want": "$item"},
                "pipeline": [
                    {"$match": {"$expr": {"$eq": ["$sku", "$$want"]}}},
                    {"$project": {"_id": 0, "instock": 1}}
                ],
                "as": "stock"
            }}, {"$limit": 1}]),
            input.clone(),
            vec![doc! {"_id": 1, "item": "almonds", "stock": [{"instock": 120}]}],
        );
        check(
            bson!([{"$lookup": {"from": "nope", "localField": "item", "foreignField": "sku", "as": "x.y"}}, {"$limit": 1}]),
            input.clone(),
            vec![doc! {"_id": 1, "item": "almonds", "x": {"y": []}}],
        );
        check(
            bson!([{"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku",
                "pipeline": [{"$project": {"instock": 1}}], "as": "inv"}}, {"$limit": 1}]),
            input,
            vec![doc! {"_id": 1, "item": "almonds", "inv": [{"_id": 1, "instock": 120}]}],
        );
    }
}
