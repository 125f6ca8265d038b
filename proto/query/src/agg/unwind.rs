//! `$unwind`: one document per element of an array field.

use bson::{Bson, Document};

use super::{err, project, split_path};
use crate::{ErrorCode, MongoResult};

#[derive(Debug, Clone)]
pub(super) struct Unwind {
    path: Vec<String>,
    index_field: Option<Vec<String>>,
    preserve: bool,
}

impl Unwind {
    pub(super) fn parse(arg: &Bson) -> MongoResult<Unwind> {
        let (path, index, preserve) = match arg {
            Bson::String(s) => (s.clone(), None, false),
            Bson::Document(d) => {
                let mut path = None;
                let mut index = None;
                let mut preserve = false;
                for (k, v) in d {
                    match k.as_str() {
                        "path" => match v {
                            Bson::String(s) => path = Some(s.clone()),
                            _ => return Err(err(ErrorCode::UnwindPathNotString, format!("expected a string as the path for $unwind stage, got {}", crate::expr::type_name(v)))),
                        },
                        "includeArrayIndex" => match v {
                            Bson::String(s) => {
                                if s.is_empty() || s.starts_with('$') {
                                    return Err(err(ErrorCode::UnwindIndexFieldDollarPrefixed, format!("includeArrayIndex option to $unwind stage should not be prefixed with a '$': {s}")));
                                }
                                index = Some(s.clone());
                            }
                            _ => {
                                return Err(err(
                                    ErrorCode::UnwindIndexFieldInvalid,
                                    format!("expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}", crate::expr::type_name(v)),
                                ))
                            }
                        },
                        "preserveNullAndEmptyArrays" => match v {
                            Bson::Boolean(b) => preserve = *b,
                            _ => {
                                return Err(err(
                                    ErrorCode::UnwindPreserveNotBool,
                                    format!("expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}", crate::expr::type_name(v)),
                                ))
                            }
                        },
                        _ => return Err(err(ErrorCode::UnwindUnknownOption, format!("unrecognized option to $unwind stage: {k}"))),
                    }
                }
                (path.ok_or_else(|| err(ErrorCode::UnwindMissingPath, "no path specified to $unwind stage"))?, index, preserve)
            }
            other => {
                return Err(err(
                    ErrorCode::UnwindSpecInvalid,
                    format!("expected either a string or an object as specification for $unwind stage, got {}", crate::expr::type_name(other)),
                ))
            }
        };
        crate::depth::check_path(&path)?;
        if let Some(index) = &index {
            crate::depth::check_path(index)?;
        }
        let Some(p) = path.strip_prefix('$') else {
            return Err(err(
                ErrorCode::UnwindPathNotDollarPrefixed,
                format!("path option to $unwind stage should be prefixed with a '$': {path}"),
            ));
        };
        if p.is_empty() || p.split('.').any(str::is_empty) || p.starts_with('$') {
            return Err(err(
                ErrorCode::UnwindPathNotDollarPrefixed,
                format!("invalid path for $unwind stage: {path}"),
            ));
        }
        Ok(Unwind {
            path: split_path(p),
            index_field: index.map(|s| split_path(&s)),
            preserve,
        })
    }

    pub(super) fn run(&self, docs: Vec<Document>) -> Vec<Document> {
        let mut out = Vec::with_capacity(docs.len());
        for d in docs {
            self.apply(d, &mut out);
        }
        out
    }

    fn apply(&self, d: Document, out: &mut Vec<Document>) {
        let value = project::get_nested(&d, &self.path).cloned();
        match value {
            Some(Bson::Array(items)) if !items.is_empty() => {
                for (i, item) in items.into_iter().enumerate() {
                    let mut nd = d.clone();
                    project::set_nested(&mut nd, &self.path, item);
                    if let Some(f) = &self.index_field {
                        project::set_nested(&mut nd, f, Bson::Int64(i as i64));
                    }
                    out.push(nd);
                }
            }
            Some(Bson::Array(_)) | Some(Bson::Null) | Some(Bson::Undefined) | None => {
                if self.preserve {
                    let mut nd = d;
                    if matches!(project::get_nested(&nd, &self.path), Some(Bson::Array(_))) {
                        project::remove_nested(&mut nd, &self.path);
                    }
                    if let Some(f) = &self.index_field {
                        project::set_nested(&mut nd, f, Bson::Null);
                    }
                    out.push(nd);
                }
            }
            Some(_) => {
                let mut nd = d;
                if let Some(f) = &self.index_field {
                    project::set_nested(&mut nd, f, Bson::Null);
                }
                out.push(nd);
            }
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
            (bson!([{"$unwind": "tags"}]), 28818),
            (bson!([{"$unwind": {"path": "$tags", "bogus": 1}}]), 28811),
            (bson!([{"$unwind": {"includeArrayIndex": "i"}}]), 28812),
            (bson!([{"$unwind": 5}]), 15981),
        ]);
    }

    #[test]
    fn unwind() {
        let d = orders();
        check(
            bson!([{"$unwind": "$tags"}, {"$project": {"tags": 1}}]),
            d.clone(),
            vec![
                doc! {"_id": 1, "tags": "a"},
                doc! {"_id": 1, "tags": "b"},
                doc! {"_id": 4, "tags": "solo"},
            ],
        );
        check(
            bson!([{"$unwind": {"path": "$tags", "includeArrayIndex": "idx", "preserveNullAndEmptyArrays": true}}, {"$project": {"tags": 1, "idx": 1}}]),
            d,
            vec![
                doc! {"_id": 1, "tags": "a", "idx": 0i64},
                doc! {"_id": 1, "tags": "b", "idx": 1i64},
                doc! {"_id": 2, "idx": null},
                doc! {"_id": 3, "idx": null},
                doc! {"_id": 4, "tags": "solo", "idx": null},
                doc! {"_id": 5, "tags": null, "idx": null},
            ],
        );
        check(
            bson!([{"$unwind": "$a.b"}]),
            vec![doc! {"_id": 1, "a": {"b": [1, 2], "c": 3}}],
            vec![
                doc! {"_id": 1, "a": {"b": 1, "c": 3}},
                doc! {"_id": 1, "a": {"b": 2, "c": 3}},
            ],
        );
    }
}
