//! The accumulators of `$group`, `$bucket`, `$bucketAuto` and `$sortByCount`, with the
//! partial states a spilled `$group` writes to disk and merges back (`Accumulator::partial`,
//! `Accumulator::merge`).

use std::collections::{HashSet, VecDeque};

use bson::{Bson, Document};

use super::sortkey::SortKeys;
use crate::expr::{self, compare_values, Expr, Num, Variables};
use crate::memory::approx_value_size;
use crate::{ErrorCode, MongoError, MongoResult};

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
    Std(StdDev),
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
            return Err(MongoError::new(
                ErrorCode::AccumulatorNotObject,
                format!("The field '{field}' must be an accumulator object"),
            ));
        };
        if d.len() != 1 {
            return Err(MongoError::new(
                ErrorCode::AccumulatorNotSingle,
                format!("The field '{field}' must specify one accumulator"),
            ));
        }
        let (name, arg) = d.iter().next().unwrap();
        let kind = kind_of(name)?;
        match kind {
            Kind::Count => {
                if !matches!(arg, Bson::Document(a) if a.is_empty()) {
                    return Err(MongoError::new(
                        ErrorCode::CountAccumulatorTakesArguments,
                        "$count takes no arguments, i.e. $count:{}",
                    ));
                }
                Ok(Accumulator::count())
            }
            Kind::Top | Kind::Bottom | Kind::TopN | Kind::BottomN => top_bottom(kind, name, arg),
            Kind::FirstN | Kind::LastN | Kind::MaxN | Kind::MinN => n_valued(kind, name, arg),
            _ => {
                if matches!(arg, Bson::Array(_)) {
                    return Err(MongoError::new(
                        ErrorCode::AccumulatorNotUnary,
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
                        return Err(MongoError::new(
                            ErrorCode::NNotPositive,
                            format!("'n' must be greater than 0, found {v}"),
                        ))
                    }
                    None => {
                        return Err(MongoError::new(
                            ErrorCode::NNotIntegral,
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
            Kind::StdDevPop | Kind::StdDevSamp => AccState::Std(StdDev::default()),
            Kind::MergeObjects => AccState::Merge(Document::new()),
            Kind::Top | Kind::Bottom => AccState::Ranked(Vec::new(), 1, 0),
            Kind::TopN | Kind::BottomN => AccState::Ranked(Vec::new(), n, 0),
            Kind::FirstN => AccState::FirstN(Vec::new(), n),
            Kind::LastN => AccState::LastN(VecDeque::new(), n),
            Kind::MaxN | Kind::MinN => AccState::Extreme(Vec::new(), n),
        })
    }

    /// Folds document `d` into `st`; returns about how many bytes the state grew (or,
    /// negative, shrank) by.
    pub(crate) fn add(
        &self,
        st: &mut AccState,
        d: &Document,
        vars: &Variables,
    ) -> MongoResult<isize> {
        if let AccState::Count(c) = st {
            *c += 1;
            return Ok(0);
        }
        let v = self.arg.eval(d, vars)?;
        // What `$push` and `$addToSet` hold only grows, by what they keep: counted as it
        // comes, not by walking everything they hold at every document.
        if let AccState::Push(items) | AccState::Set(_, items) = st {
            let (before, size) = (items.len(), approx_value_size(&v));
            self.fold(st, v)?;
            let grew = matches!(st, AccState::Push(i) | AccState::Set(_, i) if i.len() > before);
            return Ok(if grew { size as isize } else { 0 });
        }
        let before = held(st) as isize;
        if let AccState::Ranked(items, n, seq) = st {
            let sort = self.sort.as_ref().expect("ranked accumulators have a sort");
            *seq += 1;
            self.rank(items, *n, (sort.key(d), *seq, missing_to_null(v)));
        } else {
            self.fold(st, v)?;
        }
        Ok(held(st) as isize - before)
    }

    /// Keeps `entry` among the n best of `items` (ascending; `$bottom` keeps the largest n,
    /// `$top` the smallest n; ties stay in arrival order).
    fn rank(
        &self,
        items: &mut Vec<(Vec<Bson>, u64, Bson)>,
        n: usize,
        entry: (Vec<Bson>, u64, Bson),
    ) {
        let sort = self.sort.as_ref().expect("ranked accumulators have a sort");
        let pos = items
            .partition_point(|e| sort.compare_keys(&e.0, &entry.0) != std::cmp::Ordering::Greater);
        items.insert(pos, entry);
        if items.len() > n {
            if matches!(self.kind, Kind::Bottom | Kind::BottomN) {
                items.remove(0);
            } else {
                items.pop();
            }
        }
    }

    /// Folds one value into `st` (every state but `Count` and `Ranked`).
    fn fold(&self, st: &mut AccState, v: Bson) -> MongoResult<()> {
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
            AccState::Std(std) => {
                if let Some(n) = expr::num_of(&v) {
                    std.add(expr::num_f64(n));
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
                    return Err(MongoError::new(
                        ErrorCode::MergeObjectsNotObject,
                        format!(
                            "$mergeObjects requires object inputs, but input {other} is of type {}",
                            expr::type_name(&other)
                        ),
                    ))
                }
            },
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
            AccState::Count(_) | AccState::Ranked(..) => unreachable!("folded by add"),
        }
        Ok(())
    }

    /// `st` as a value that `merge` folds back into a fresh state: what a `$group` writes
    /// to disk when it spills. Arrival order is kept within the value, and runs merge in
    /// the order they were written, so `$first`, `$push`, `$lastN`, ... keep their order.
    pub(crate) fn partial(&self, st: AccState) -> Bson {
        match st {
            AccState::Sum(acc) => expr::num_to_bson(acc),
            AccState::Avg(acc, cnt) => {
                Bson::Array(vec![expr::num_to_bson(acc), Bson::Int64(cnt as i64)])
            }
            AccState::Best(b) | AccState::First(b) => Bson::Array(b.into_iter().collect()),
            AccState::Last(l) => l,
            AccState::Push(items) | AccState::Set(_, items) | AccState::FirstN(items, _) => {
                Bson::Array(items)
            }
            AccState::Extreme(items, _) => Bson::Array(items),
            AccState::LastN(items, _) => Bson::Array(items.into_iter().collect()),
            AccState::Count(c) => Bson::Int64(c),
            AccState::Std(s) => s.partial(),
            AccState::Merge(d) => Bson::Document(d),
            AccState::Ranked(items, _, _) => Bson::Array(
                items
                    .into_iter()
                    .map(|(key, _, out)| Bson::Array(vec![Bson::Array(key), out]))
                    .collect(),
            ),
        }
    }

    /// Folds a `partial` of a later run into `st`.
    pub(crate) fn merge(&self, st: &mut AccState, partial: Bson) -> MongoResult<()> {
        let items = |v: Bson| match v {
            Bson::Array(a) => Ok(a),
            other => Err(bad_partial(&other)),
        };
        match st {
            AccState::Count(c) => match partial {
                Bson::Int64(n) => *c += n,
                other => return Err(bad_partial(&other)),
            },
            AccState::Avg(acc, cnt) => match items(partial)?.as_slice() {
                [sum, Bson::Int64(n)] => {
                    let sum = expr::num_of(sum).ok_or_else(|| bad_partial(sum))?;
                    *acc = expr::num_add(*acc, sum);
                    *cnt += *n as u64;
                }
                other => return Err(bad_partial(&Bson::Array(other.to_vec()))),
            },
            AccState::Std(s) => s.merge(&partial)?,
            AccState::Ranked(ranked, n, seq) => {
                for entry in items(partial)? {
                    let Bson::Array(mut pair) = entry else {
                        return Err(bad_partial(&entry));
                    };
                    let (Some(out), Some(Bson::Array(key))) = (pair.pop(), pair.pop()) else {
                        return Err(bad_partial(&Bson::Array(pair)));
                    };
                    *seq += 1;
                    self.rank(ranked, *n, (key, *seq, out));
                }
            }
            AccState::Sum(_) | AccState::Last(_) | AccState::Merge(_) => self.fold(st, partial)?,
            AccState::Best(_)
            | AccState::First(_)
            | AccState::Push(_)
            | AccState::Set(..)
            | AccState::FirstN(..)
            | AccState::LastN(..)
            | AccState::Extreme(..) => {
                for v in items(partial)? {
                    self.fold(st, v)?;
                }
            }
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
            AccState::Std(s) => s.result(self.kind == Kind::StdDevSamp),
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

/// About the bytes a state holds, for the states whose size is bounded (one value, or at
/// most n); 0 for `$push` and `$addToSet`, which `Accumulator::add` counts as they grow.
fn held(st: &AccState) -> usize {
    let values = |items: &mut dyn Iterator<Item = &Bson>| items.map(approx_value_size).sum();
    match st {
        AccState::Best(v) | AccState::First(v) => v.as_ref().map_or(0, approx_value_size),
        AccState::Last(v) => approx_value_size(v),
        AccState::Merge(d) => crate::memory::approx_size(d),
        AccState::Ranked(items, _, _) => {
            values(&mut items.iter().flat_map(|(k, _, v)| k.iter().chain([v])))
        }
        AccState::FirstN(items, _) | AccState::Extreme(items, _) => values(&mut items.iter()),
        AccState::LastN(items, _) => values(&mut items.iter()),
        AccState::Sum(_) | AccState::Avg(..) | AccState::Count(_) | AccState::Std(_) => 0,
        AccState::Push(_) | AccState::Set(..) => 0,
    }
}

fn bad_partial(v: &Bson) -> MongoError {
    MongoError::internal(format!("a spilled $group state read back malformed: {v}"))
}

/// A running standard deviation (Welford's method, as MongoDB's accumulator computes it):
/// constant memory however many values, and two of them combine (Chan et al.), so a
/// spilled `$group` merges its runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct StdDev {
    count: u64,
    mean: f64,
    m2: f64,
}

impl StdDev {
    fn add(&mut self, x: f64) {
        self.count += 1;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    fn combine(&mut self, count: u64, mean: f64, m2: f64) {
        if count == 0 {
            return;
        }
        let total = self.count + count;
        let delta = mean - self.mean;
        self.m2 += m2 + delta * delta * (self.count as f64 * count as f64) / total as f64;
        self.mean += delta * count as f64 / total as f64;
        self.count = total;
    }

    fn partial(&self) -> Bson {
        Bson::Array(vec![
            Bson::Int64(self.count as i64),
            Bson::Double(self.mean),
            Bson::Double(self.m2),
        ])
    }

    fn merge(&mut self, partial: &Bson) -> MongoResult<()> {
        match partial {
            Bson::Array(a) => match a.as_slice() {
                [Bson::Int64(n), Bson::Double(mean), Bson::Double(m2)] => {
                    self.combine(*n as u64, *mean, *m2);
                    Ok(())
                }
                _ => Err(bad_partial(partial)),
            },
            _ => Err(bad_partial(partial)),
        }
    }

    /// Population or sample standard deviation; null when undefined.
    fn result(&self, sample: bool) -> Bson {
        if self.count == 0 || (sample && self.count < 2) {
            return Bson::Null;
        }
        let denom = if sample { self.count - 1 } else { self.count } as f64;
        Bson::Double((self.m2 / denom).sqrt())
    }
}

/// The accumulator an operator name names.
fn kind_of(name: &str) -> MongoResult<Kind> {
    Ok(match name {
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
            return Err(MongoError::new(
                ErrorCode::UnknownGroupOperator,
                format!("unknown group operator '{name}'"),
            ))
        }
    })
}

/// `$top`, `$bottom`, `$topN`, `$bottomN`: `{sortBy, output}`, and `n` for the N forms.
fn top_bottom(kind: Kind, name: &str, arg: &Bson) -> MongoResult<Accumulator> {
    let Bson::Document(a) = arg else {
        return Err(MongoError::new(
            ErrorCode::TopBottomNotObject,
            format!("specification for {name} must be an object"),
        ));
    };
    let with_n = matches!(kind, Kind::TopN | Kind::BottomN);
    for k in a.keys() {
        let ok = matches!(k.as_str(), "sortBy" | "output") || (with_n && k == "n");
        if !ok {
            return Err(MongoError::new(
                ErrorCode::TopBottomUnknownArgument,
                format!("Unknown argument for {name}: {k}"),
            ));
        }
    }
    let output = a.get("output").ok_or_else(|| {
        MongoError::new(
            ErrorCode::TopBottomMissingOutput,
            format!("Missing value for 'output' in {name}"),
        )
    })?;
    let Some(Bson::Document(sort_by)) = a.get("sortBy") else {
        return Err(MongoError::new(
            ErrorCode::TopBottomMissingSortBy,
            format!("Missing or invalid value for 'sortBy' in {name}"),
        ));
    };
    let n = if with_n {
        Some(Expr::parse(a.get("n").ok_or_else(|| {
            MongoError::new(
                ErrorCode::TopBottomMissingN,
                format!("Missing value for 'n' in {name}"),
            )
        })?)?)
    } else {
        if a.contains_key("n") {
            return Err(MongoError::new(
                ErrorCode::TopBottomUnknownArgument,
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

/// `$firstN`, `$lastN`, `$maxN`, `$minN`: `{input, n}`.
fn n_valued(kind: Kind, name: &str, arg: &Bson) -> MongoResult<Accumulator> {
    let Bson::Document(a) = arg else {
        return Err(MongoError::new(
            ErrorCode::ArgumentsNotObject,
            format!("specification for {name} must be an object"),
        ));
    };
    for k in a.keys() {
        if k != "input" && k != "n" {
            return Err(MongoError::new(
                ErrorCode::NAccumulatorUnknownArgument,
                format!("Unknown argument for {name}: {k}"),
            ));
        }
    }
    let input = a.get("input").ok_or_else(|| {
        MongoError::new(
            ErrorCode::NAccumulatorMissingInput,
            format!("Missing value for 'input' in {name}"),
        )
    })?;
    let n = a.get("n").ok_or_else(|| {
        MongoError::new(
            ErrorCode::NAccumulatorMissingN,
            format!("Missing value for 'n' in {name}"),
        )
    })?;
    Ok(Accumulator {
        kind,
        arg: Expr::parse(input)?,
        n: Some(Expr::parse(n)?),
        sort: None,
    })
}
