//! `$group` and its accumulators (also used by `$bucket`, `$bucketAuto`, `$sortByCount`).

use std::collections::{HashMap, HashSet, VecDeque};

use bson::{Bson, Document};

use super::sortkey::SortKeys;
use crate::expr::{self, compare_values, Expr, Num, Variables};
use crate::{ErrorCode, MongoError, MongoResult};

#[derive(Debug, Clone)]
pub(crate) struct Group {
    id: Expr,
    accs: Vec<(String, Accumulator)>,
}

impl Group {
    pub(crate) fn simple(id: Expr, accs: Vec<(String, Accumulator)>) -> Group {
        Group { id, accs }
    }

    pub(crate) fn parse(arg: &Bson) -> MongoResult<Group> {
        let Bson::Document(d) = arg else {
            return Err(MongoError::location(
                15947,
                "a group's fields must be specified in an object",
            ));
        };
        let mut id = None;
        let mut accs = Vec::new();
        for (k, v) in d {
            if k == "_id" {
                id = Some(match v {
                    // `_id: {a: ..., b: ...}` is an object expression.
                    Bson::Document(sub)
                        if !sub.keys().next().is_some_and(|f| f.starts_with('$')) =>
                    {
                        Expr::parse_object(sub)?
                    }
                    v => Expr::parse(v)?,
                });
                continue;
            }
            if k.contains('.') {
                return Err(MongoError::location(
                    40235,
                    format!("The field name '{k}' cannot contain '.'"),
                ));
            }
            if k.starts_with('$') {
                return Err(MongoError::location(
                    40236,
                    format!("The field name '{k}' cannot be an operator name"),
                ));
            }
            accs.push((k.clone(), Accumulator::parse(k, v)?));
        }
        let id = id.ok_or_else(|| {
            MongoError::location(15955, "a group specification must include an _id")
        })?;
        Ok(Group { id, accs })
    }

    pub(crate) fn run(&self, docs: Vec<Document>, vars: &Variables) -> MongoResult<Vec<Document>> {
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut groups: Vec<(Bson, Vec<AccState>)> = Vec::new();
        let mut kbuf = Vec::new();
        for d in &docs {
            let key = match self.id.eval(d, vars)? {
                Bson::Undefined => Bson::Null,
                k => k,
            };
            kbuf.clear();
            expr::canonical_key(&key, &mut kbuf);
            let gi = match index.get(&kbuf) {
                Some(i) => *i,
                None => {
                    let mut states = Vec::with_capacity(self.accs.len());
                    for (_, a) in &self.accs {
                        states.push(a.start(&key, vars)?);
                    }
                    groups.push((key, states));
                    index.insert(kbuf.clone(), groups.len() - 1);
                    groups.len() - 1
                }
            };
            let states = &mut groups[gi].1;
            for (st, (_, acc)) in states.iter_mut().zip(&self.accs) {
                acc.add(st, d, vars)?;
            }
        }
        let mut out = Vec::with_capacity(groups.len());
        for (key, states) in groups {
            let mut doc = Document::new();
            doc.insert("_id", key);
            for (st, (name, acc)) in states.into_iter().zip(&self.accs) {
                doc.insert(name.clone(), acc.finish(st)?);
            }
            out.push(doc);
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    Count,
    StdDevPop,
    StdDevSamp,
    MergeObjects,
    Top,
    Bottom,
    TopN,
    BottomN,
    FirstN,
    LastN,
    MaxN,
    MinN,
}

/// One accumulator of a `$group`/`$bucket` output field.
#[derive(Debug, Clone)]
pub(crate) struct Accumulator {
    kind: Kind,
    arg: Expr,
    n: Option<Expr>,
    sort: Option<SortKeys>,
}

#[derive(Debug, Clone)]
pub(crate) enum AccState {
    Sum(Num),
    Avg(Num, u64),
    Best(Option<Bson>),
    First(Option<Bson>),
    Last(Bson),
    Push(Vec<Bson>),
    Set(HashSet<Vec<u8>>, Vec<Bson>),
    Count(i64),
    Std(Vec<f64>),
    Merge(Document),
    /// (sort key, arrival order, output) kept in sort order, at most n.
    Ranked(Vec<(Vec<Bson>, u64, Bson)>, usize, u64),
    FirstN(Vec<Bson>, usize),
    LastN(VecDeque<Bson>, usize),
    Extreme(Vec<Bson>, usize),
}

impl Accumulator {
    pub(crate) fn count() -> Accumulator {
        Accumulator {
            kind: Kind::Count,
            arg: Expr::constant(Bson::Int32(1)),
            n: None,
            sort: None,
        }
    }

    pub(crate) fn parse(field: &str, spec: &Bson) -> MongoResult<Accumulator> {
        let Bson::Document(d) = spec else {
            return Err(MongoError::location(
                40234,
                format!("The field '{field}' must be an accumulator object"),
            ));
        };
        if d.len() != 1 {
            return Err(MongoError::location(
                40238,
                format!("The field '{field}' must specify one accumulator"),
            ));
        }
        let (name, arg) = d.iter().next().unwrap();
        let kind = match name.as_str() {
            "$sum" => Kind::Sum,
            "$avg" => Kind::Avg,
            "$min" => Kind::Min,
            "$max" => Kind::Max,
            "$first" => Kind::First,
            "$last" => Kind::Last,
            "$push" => Kind::Push,
            "$addToSet" => Kind::AddToSet,
            "$count" => Kind::Count,
            "$stdDevPop" => Kind::StdDevPop,
            "$stdDevSamp" => Kind::StdDevSamp,
            "$mergeObjects" => Kind::MergeObjects,
            "$top" => Kind::Top,
            "$bottom" => Kind::Bottom,
            "$topN" => Kind::TopN,
            "$bottomN" => Kind::BottomN,
            "$firstN" => Kind::FirstN,
            "$lastN" => Kind::LastN,
            "$maxN" => Kind::MaxN,
            "$minN" => Kind::MinN,
            "$accumulator" | "$median" | "$percentile" => {
                return Err(MongoError::new(
                    ErrorCode::NotImplemented,
                    format!("{name} is not supported"),
                ))
            }
            _ => {
                return Err(MongoError::location(
                    15952,
                    format!("unknown group operator '{name}'"),
                ))
            }
        };
        match kind {
            Kind::Count => {
                if !matches!(arg, Bson::Document(a) if a.is_empty()) {
                    return Err(MongoError::location(
                        40273,
                        "$count takes no arguments, i.e. $count:{}",
                    ));
                }
                Ok(Accumulator::count())
            }
            Kind::Top | Kind::Bottom | Kind::TopN | Kind::BottomN => {
                let Bson::Document(a) = arg else {
                    return Err(MongoError::location(
                        5788001,
                        format!("specification for {name} must be an object"),
                    ));
                };
                let with_n = matches!(kind, Kind::TopN | Kind::BottomN);
                for k in a.keys() {
                    let ok = matches!(k.as_str(), "sortBy" | "output") || (with_n && k == "n");
                    if !ok {
                        return Err(MongoError::location(
                            5788002,
                            format!("Unknown argument for {name}: {k}"),
                        ));
                    }
                }
                let output = a.get("output").ok_or_else(|| {
                    MongoError::location(5788004, format!("Missing value for 'output' in {name}"))
                })?;
                let Some(Bson::Document(sort_by)) = a.get("sortBy") else {
                    return Err(MongoError::location(
                        5788005,
                        format!("Missing or invalid value for 'sortBy' in {name}"),
                    ));
                };
                let n = if with_n {
                    Some(Expr::parse(a.get("n").ok_or_else(|| {
                        MongoError::location(5788003, format!("Missing value for 'n' in {name}"))
                    })?)?)
                } else {
                    if a.contains_key("n") {
                        return Err(MongoError::location(
                            5788002,
                            format!("Unknown argument for {name}: n"),
                        ));
                    }
                    None
                };
                Ok(Accumulator {
                    kind,
                    arg: Expr::parse(output)?,
                    n,
                    sort: Some(SortKeys::parse(sort_by)?),
                })
            }
            Kind::FirstN | Kind::LastN | Kind::MaxN | Kind::MinN => {
                let Bson::Document(a) = arg else {
                    return Err(MongoError::location(
                        5787801,
                        format!("specification for {name} must be an object"),
                    ));
                };
                for k in a.keys() {
                    if k != "input" && k != "n" {
                        return Err(MongoError::location(
                            5787901,
                            format!("Unknown argument for {name}: {k}"),
                        ));
                    }
                }
                let input = a.get("input").ok_or_else(|| {
                    MongoError::location(5787907, format!("Missing value for 'input' in {name}"))
                })?;
                let n = a.get("n").ok_or_else(|| {
                    MongoError::location(5787906, format!("Missing value for 'n' in {name}"))
                })?;
                Ok(Accumulator {
                    kind,
                    arg: Expr::parse(input)?,
                    n: Some(Expr::parse(n)?),
                    sort: None,
                })
            }
            _ => {
                if matches!(arg, Bson::Array(_)) {
                    return Err(MongoError::location(
                        40237,
                        format!("The {name} accumulator is a unary operator"),
                    ));
                }
                Ok(Accumulator {
                    kind,
                    arg: Expr::parse(arg)?,
                    n: None,
                    sort: None,
                })
            }
        }
    }

    /// A fresh state for a group whose key is `key` (`n` may refer to `$_id`).
    pub(crate) fn start(&self, key: &Bson, vars: &Variables) -> MongoResult<AccState> {
        let n = match &self.n {
            None => 0,
            Some(e) => {
                let v = e.eval(&bson::doc! {"_id": key.clone()}, vars)?;
                match expr::as_int_exact(&v) {
                    Some(k) if k > 0 => k as usize,
                    Some(_) => {
                        return Err(MongoError::location(
                            5787908,
                            format!("'n' must be greater than 0, found {v}"),
                        ))
                    }
                    None => {
                        return Err(MongoError::location(
                            5787902,
                            format!("Value for 'n' must be of integral type, but found {v}"),
                        ))
                    }
                }
            }
        };
        Ok(match self.kind {
            Kind::Sum => AccState::Sum(Num::I(0)),
            Kind::Avg => AccState::Avg(Num::I(0), 0),
            Kind::Min | Kind::Max => AccState::Best(None),
            Kind::First => AccState::First(None),
            Kind::Last => AccState::Last(Bson::Null),
            Kind::Push => AccState::Push(Vec::new()),
            Kind::AddToSet => AccState::Set(HashSet::new(), Vec::new()),
            Kind::Count => AccState::Count(0),
            Kind::StdDevPop | Kind::StdDevSamp => AccState::Std(Vec::new()),
            Kind::MergeObjects => AccState::Merge(Document::new()),
            Kind::Top | Kind::Bottom => AccState::Ranked(Vec::new(), 1, 0),
            Kind::TopN | Kind::BottomN => AccState::Ranked(Vec::new(), n, 0),
            Kind::FirstN => AccState::FirstN(Vec::new(), n),
            Kind::LastN => AccState::LastN(VecDeque::new(), n),
            Kind::MaxN | Kind::MinN => AccState::Extreme(Vec::new(), n),
        })
    }

    pub(crate) fn add(&self, st: &mut AccState, d: &Document, vars: &Variables) -> MongoResult<()> {
        if let AccState::Count(c) = st {
            *c += 1;
            return Ok(());
        }
        let v = self.arg.eval(d, vars)?;
        match st {
            AccState::Sum(acc) => {
                if let Some(n) = expr::num_of(&v) {
                    *acc = expr::num_add(*acc, n);
                }
            }
            AccState::Avg(acc, cnt) => {
                if let Some(n) = expr::num_of(&v) {
                    *acc = expr::num_add(*acc, n);
                    *cnt += 1;
                }
            }
            AccState::Best(best) => {
                if !matches!(v, Bson::Null | Bson::Undefined) {
                    let replace = match best {
                        None => true,
                        Some(b) => {
                            let o = compare_values(&v, b);
                            if self.kind == Kind::Min {
                                o == std::cmp::Ordering::Less
                            } else {
                                o == std::cmp::Ordering::Greater
                            }
                        }
                    };
                    if replace {
                        *best = Some(v);
                    }
                }
            }
            AccState::First(first) => {
                if first.is_none() {
                    *first = Some(missing_to_null(v));
                }
            }
            AccState::Last(last) => *last = missing_to_null(v),
            AccState::Push(items) => {
                if !matches!(v, Bson::Undefined) {
                    items.push(v);
                }
            }
            AccState::Set(seen, items) => {
                if !matches!(v, Bson::Undefined) {
                    let mut k = Vec::new();
                    expr::canonical_key(&v, &mut k);
                    if seen.insert(k) {
                        items.push(v);
                    }
                }
            }
            AccState::Std(xs) => {
                if let Some(n) = expr::num_of(&v) {
                    xs.push(expr::num_f64(n));
                }
            }
            AccState::Merge(out) => match v {
                Bson::Document(sub) => {
                    for (k, x) in sub {
                        out.insert(k, x);
                    }
                }
                Bson::Null | Bson::Undefined => {}
                other => {
                    return Err(MongoError::location(
                        40400,
                        format!(
                            "$mergeObjects requires object inputs, but input {other} is of type {}",
                            expr::type_name(&other)
                        ),
                    ))
                }
            },
            AccState::Ranked(items, n, seq) => {
                let sort = self.sort.as_ref().expect("ranked accumulators have a sort");
                let key = sort.key(d);
                let bottom = matches!(self.kind, Kind::Bottom | Kind::BottomN);
                *seq += 1;
                let entry = (key, *seq, missing_to_null(v));
                // Keep ascending order; $bottom keeps the largest n, $top the smallest n.
                let pos = items.partition_point(|e| {
                    sort.compare_keys(&e.0, &entry.0) != std::cmp::Ordering::Greater
                });
                items.insert(pos, entry);
                if items.len() > *n {
                    if bottom {
                        items.remove(0);
                    } else {
                        items.pop();
                    }
                }
            }
            AccState::FirstN(items, n) => {
                if items.len() < *n {
                    items.push(missing_to_null(v));
                }
            }
            AccState::LastN(items, n) => {
                items.push_back(missing_to_null(v));
                if items.len() > *n {
                    items.pop_front();
                }
            }
            AccState::Extreme(items, n) => {
                if !matches!(v, Bson::Null | Bson::Undefined) {
                    items.push(v);
                    let desc = self.kind == Kind::MaxN;
                    items.sort_by(|a, b| {
                        if desc {
                            compare_values(b, a)
                        } else {
                            compare_values(a, b)
                        }
                    });
                    items.truncate(*n);
                }
            }
            AccState::Count(_) => unreachable!(),
        }
        Ok(())
    }

    pub(crate) fn finish(&self, st: AccState) -> MongoResult<Bson> {
        Ok(match st {
            AccState::Sum(acc) => expr::num_to_bson(acc),
            AccState::Avg(acc, cnt) => {
                if cnt == 0 {
                    Bson::Null
                } else {
                    match acc {
                        Num::M(_) => {
                            expr::eval_divide(&expr::num_to_bson(acc), &Bson::Int64(cnt as i64))?
                        }
                        n => Bson::Double(expr::num_f64(n) / cnt as f64),
                    }
                }
            }
            AccState::Best(b) => b.unwrap_or(Bson::Null),
            AccState::First(f) => f.unwrap_or(Bson::Null),
            AccState::Last(l) => l,
            AccState::Push(items) => Bson::Array(items),
            AccState::Set(_, items) => Bson::Array(items),
            AccState::Count(c) => {
                if c <= i32::MAX as i64 {
                    Bson::Int32(c as i32)
                } else {
                    Bson::Int64(c)
                }
            }
            AccState::Std(xs) => expr::std_dev(&xs, self.kind == Kind::StdDevSamp),
            AccState::Merge(d) => Bson::Document(d),
            AccState::Ranked(items, _, _) => {
                let mut vals: Vec<Bson> = items.into_iter().map(|e| e.2).collect();
                match self.kind {
                    Kind::Top => vals.into_iter().next().unwrap_or(Bson::Null),
                    Kind::Bottom => vals.pop().unwrap_or(Bson::Null),
                    _ => Bson::Array(vals),
                }
            }
            AccState::FirstN(items, _) => Bson::Array(items),
            AccState::LastN(items, _) => Bson::Array(items.into_iter().collect()),
            AccState::Extreme(items, _) => Bson::Array(items),
        })
    }
}

fn missing_to_null(v: Bson) -> Bson {
    match v {
        Bson::Undefined => Bson::Null,
        v => v,
    }
}
