//! Sort keys for `$sort`, `$top`/`$bottom` and friends: keys are computed once per
//! document, then compared (arrays sort by their smallest element ascending and their
//! largest descending; missing sorts as null, as in MongoDB).

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::expr::compare_values;
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(crate) struct SortKeys {
    fields: Vec<(Vec<String>, bool)>,
}

impl SortKeys {
    pub(crate) fn parse(spec: &Document) -> MongoResult<SortKeys> {
        if spec.is_empty() {
            return Err(MongoError::location(
                15976,
                "$sort stage must have at least one sort key",
            ));
        }
        let mut fields = Vec::with_capacity(spec.len());
        for (k, v) in spec {
            if k.is_empty() || k.split('.').any(str::is_empty) {
                return Err(MongoError::location(
                    15998,
                    format!("FieldPath field names may not be empty strings: '{k}'"),
                ));
            }
            if k.starts_with('$') {
                return Err(MongoError::location(
                    16410,
                    format!("FieldPath field names may not start with '$': '{k}'"),
                ));
            }
            let desc =
                match v {
                    Bson::Document(d) if d.contains_key("$meta") => {
                        return Err(MongoError::new(
                            ErrorCode::NotImplemented,
                            "$meta sort is not supported",
                        ))
                    }
                    v => match crate::expr::as_int_exact(v) {
                        Some(1) => false,
                        Some(-1) => true,
                        _ => return Err(MongoError::location(
                            15975,
                            "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                        )),
                    },
                };
            fields.push((k.split('.').map(str::to_string).collect(), desc));
        }
        Ok(SortKeys { fields })
    }

    pub(crate) fn key(&self, d: &Document) -> Vec<Bson> {
        self.fields
            .iter()
            .map(|(path, desc)| {
                let mut vals = Vec::new();
                gather_doc(d, path, &mut vals);
                let pick = if *desc {
                    vals.into_iter().max_by(compare_values)
                } else {
                    vals.into_iter().min_by(compare_values)
                };
                pick.unwrap_or(Bson::Null)
            })
            .collect()
    }

    pub(crate) fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for (i, (_, desc)) in self.fields.iter().enumerate() {
            let o = compare_values(&a[i], &b[i]);
            if o != Ordering::Equal {
                return if *desc { o.reverse() } else { o };
            }
        }
        Ordering::Equal
    }

    /// Sorts stably; with `limit`, only the first `limit` documents need to be in order.
    pub(crate) fn sort_top(&self, docs: Vec<Document>, limit: Option<usize>) -> Vec<Document> {
        let mut keyed: Vec<(Vec<Bson>, Document)> =
            docs.into_iter().map(|d| (self.key(&d), d)).collect();
        match limit {
            Some(k) if k > 0 && k * 4 < keyed.len() => {
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

fn gather_doc(d: &Document, path: &[String], out: &mut Vec<Bson>) {
    match d.get(&path[0]) {
        Some(v) => gather(v, &path[1..], out),
        None => out.push(Bson::Null),
    }
}

fn gather(v: &Bson, path: &[String], out: &mut Vec<Bson>) {
    if path.is_empty() {
        match v {
            Bson::Array(a) if a.is_empty() => out.push(Bson::Undefined),
            Bson::Array(a) => out.extend(a.iter().cloned()),
            Bson::Undefined => out.push(Bson::Null),
            other => out.push(other.clone()),
        }
        return;
    }
    match v {
        Bson::Document(d) => gather_doc(d, path, out),
        Bson::Array(a) => {
            if let Ok(i) = path[0].parse::<usize>() {
                if let Some(e) = a.get(i) {
                    gather(e, &path[1..], out);
                    return;
                }
            }
            let before = out.len();
            for e in a {
                if matches!(e, Bson::Document(_) | Bson::Array(_)) {
                    gather(e, path, out);
                }
            }
            if out.len() == before {
                out.push(Bson::Null);
            }
        }
        _ => out.push(Bson::Null),
    }
}
