//! Query filter matching (owner: query-core helper).
//!
//! A filter is parsed once into a tree of [`Node`]s; leaves are predicates on a dotted
//! path. Matching follows MongoDB's array semantics (see [`crate::path::traverse`]):
//! most predicates match when *any* value reached through the path (the value itself,
//! or an element of an array at the end of the path) satisfies them; `$size`,
//! `$elemMatch` and `$exists` look only at the values themselves; `$ne`, `$nin` and `$not`
//! negate the whole positive predicate. A missing field behaves like null for equality.
//!
//! Not supported: `$where` and `$text` (errors), geospatial operators (BadValue),
//! regex features the `regex` crate lacks (look-around, back-references: BadValue at parse).
// MongoError is the shared, deliberately rich error type; boxing it is a crate-wide decision.
use std::cmp::Ordering;

use bson::spec::ElementType;
use bson::{Bson, Document};

use crate::bson_types;
use crate::order::{self, compare, type_rank, values_equal};
use crate::path::{self, PathValue};
use crate::{ErrorCode, MongoError, MongoResult};

mod json_schema;
#[cfg(test)]
mod tests;

pub use self::json_schema::Schema;

/// A parsed query filter. Parse once, match many documents.
#[derive(Debug, Clone)]
pub struct Matcher {
    kind: Kind,
    /// Variables `$expr` sees: the command's `let` (and `$$NOW`).
    vars: crate::expr::Variables,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A filter over documents.
    Filter(Node),
    /// Operators applied to a bare value (`{$gte: 3}` in `$pull` / `$elemMatch`).
    Value(Vec<Pred>),
}

#[derive(Debug, Clone)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Nor(Vec<Node>),
    Path(String, Vec<Pred>),
    Expr(Box<crate::expr::Expr>),
    Schema(Box<Schema>),
    Const(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitsOp {
    AllSet,
    AnySet,
    AllClear,
    AnyClear,
}

#[derive(Debug, Clone)]
enum Pred {
    Eq(Bson),
    Cmp(CmpOp, Bson),
    In { values: Vec<Bson>, regexes: Vec<Re> },
    Exists(bool),
    Type(Vec<TypeSel>),
    Mod { divisor: i64, remainder: i64 },
    Regex(Re),
    Size(usize),
    ElemMatchObj(Box<Node>),
    ElemMatchVal(Vec<Pred>),
    Bits(BitsOp, Vec<u32>),
    Not(Vec<Pred>),
    Never,
}

/// A compiled regular expression plus its MongoDB source (for regex-to-regex equality).
#[derive(Debug, Clone)]
pub struct Re {
    pub pattern: String,
    pub options: String,
    compiled: regex::Regex,
}

impl Re {
    /// Compiles a MongoDB (PCRE-style) regex with options `i m s x` (`u`, `l` accepted
    /// and ignored).
    pub fn new(pattern: &str, options: &str) -> MongoResult<Re> {
        let mut flags = String::new();
        for c in options.chars() {
            match c {
                'i' | 'm' | 's' | 'x' => {
                    if !flags.contains(c) {
                        flags.push(c)
                    }
                }
                'u' | 'l' => {}
                other => {
                    return Err(MongoError::new(
                        ErrorCode::RegexInvalidFlag,
                        format!("invalid flag in regex options: {other}"),
                    ))
                }
            }
        }
        let full = if flags.is_empty() {
            pattern.to_string()
        } else {
            format!("(?{flags}){pattern}")
        };
        let compiled = regex::Regex::new(&full).map_err(|e| {
            MongoError::new(
                ErrorCode::RegexInvalid,
                format!("Regular expression is invalid: {e}"),
            )
        })?;
        Ok(Re {
            pattern: pattern.to_string(),
            options: options.to_string(),
            compiled,
        })
    }

    pub fn is_match(&self, s: &str) -> bool {
        self.compiled.is_match(s)
    }

    /// Regex match against a value: strings and symbols by the regex, regex values by
    /// equality of pattern and options; everything else does not match.
    pub fn matches_value(&self, v: &Bson) -> bool {
        match v {
            Bson::String(s) | Bson::Symbol(s) => self.is_match(s),
            Bson::RegularExpression(r) => r.pattern == self.pattern && r.options == self.options,
            _ => false,
        }
    }
}

/// A `$type` selector: a BSON type (by alias or number), or the "number" alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeSel {
    Type(ElementType),
    /// Double, int, long or decimal.
    Number,
}

/// Parses one `$type` argument (code or alias).
pub fn parse_type_selector(v: &Bson) -> MongoResult<TypeSel> {
    match v {
        Bson::String(s) => {
            if s == "number" {
                return Ok(TypeSel::Number);
            }
            bson_types::by_alias(s)
                .map(|t| TypeSel::Type(t.element))
                .ok_or_else(|| MongoError::bad_value(format!("Unknown type name alias: {s}")))
        }
        n if order::is_number(n) => {
            let code = order::as_i64_exact(n).ok_or_else(|| {
                MongoError::bad_value(format!("Invalid numerical type code: {n}"))
            })?;
            bson_types::by_number(code)
                .map(|t| TypeSel::Type(t.element))
                .ok_or_else(|| {
                    MongoError::bad_value(format!("Invalid numerical type code: {code}"))
                })
        }
        _ => Err(MongoError::type_mismatch(
            "type must be represented as a number or a string",
        )),
    }
}

impl TypeSel {
    pub fn matches(&self, v: &Bson) -> bool {
        match self {
            TypeSel::Number => order::is_number(v),
            TypeSel::Type(t) => v.element_type() == *t,
        }
    }
}

/// Truthiness as `$expr` / `$cond` see it: false, null, undefined, numeric zero are false.
pub fn is_truthy(v: &Bson) -> bool {
    crate::expr::truthy(v)
}

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Ctx {
    /// Inside `$elemMatch` (where `$expr` and `$where` are not allowed).
    in_elem_match: bool,
}

fn is_operator_doc(d: &Document) -> bool {
    match d.keys().next() {
        Some(k) => k.starts_with('$') && !matches!(k.as_str(), "$ref" | "$id" | "$db"),
        None => false,
    }
}

fn parse_filter(filter: &Document, ctx: Ctx) -> MongoResult<Node> {
    let mut children = Vec::new();
    for (k, v) in filter {
        if let Some(op) = k.strip_prefix('$') {
            match op {
                "and" | "or" | "nor" => {
                    let list = parse_logical_list(k, v, ctx)?;
                    children.push(match op {
                        "and" => Node::And(list),
                        "or" => Node::Or(list),
                        _ => Node::Nor(list),
                    });
                }
                "expr" => {
                    if ctx.in_elem_match {
                        return Err(MongoError::new(
                            ErrorCode::QueryFeatureNotAllowed,
                            "$expr can only be applied to the top-level document",
                        ));
                    }
                    children.push(Node::Expr(Box::new(crate::expr::Expr::parse(v)?)));
                }
                "jsonSchema" => {
                    let Bson::Document(d) = v else {
                        return Err(MongoError::type_mismatch("$jsonSchema must be an object"));
                    };
                    children.push(Node::Schema(Box::new(Schema::parse(d)?)));
                }
                "comment" => {}
                "alwaysTrue" | "alwaysFalse" => {
                    if order::as_i64_exact(v) != Some(1) {
                        return Err(MongoError::failed_to_parse(format!("{k} must be an integer value of 1")));
                    }
                    children.push(Node::Const(op == "alwaysTrue"));
                }
                "where" => return Err(MongoError::bad_value("$where is not allowed in this context")),
                "text" => {
                    return Err(MongoError::new(ErrorCode::IndexNotFound, "text index required for $text query"))
                }
                _ => {
                    return Err(MongoError::bad_value(format!(
                        "unknown top level operator: {k}. If you have a field name that starts with a '$' symbol, consider using $getField or $setField."
                    )))
                }
            }
        } else {
            crate::depth::check_path(k)?;
            children.push(Node::Path(k.clone(), parse_path_value(v)?));
        }
    }
    Ok(if children.len() == 1 {
        children.pop().expect("one child")
    } else {
        Node::And(children)
    })
}

fn parse_logical_list(op: &str, v: &Bson, ctx: Ctx) -> MongoResult<Vec<Node>> {
    let Bson::Array(items) = v else {
        return Err(MongoError::bad_value(format!("{op} must be an array")));
    };
    if items.is_empty() {
        return Err(MongoError::bad_value(
            "$and/$or/$nor must be a nonempty array",
        ));
    }
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => parse_filter(d, ctx),
            _ => Err(MongoError::bad_value(
                "$or/$and/$nor entries need to be full objects",
            )),
        })
        .collect()
}

/// The predicates for `{path: v}`.
fn parse_path_value(v: &Bson) -> MongoResult<Vec<Pred>> {
    match v {
        Bson::Document(d) if is_operator_doc(d) => parse_operators(d),
        Bson::RegularExpression(r) => Ok(vec![Pred::Regex(Re::new(&r.pattern, &r.options)?)]),
        other => Ok(vec![Pred::Eq(other.clone())]),
    }
}

fn number_arg(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.is_finite() => Some(d.trunc() as i64),
        Bson::Decimal128(_) => order::as_f64(v)
            .filter(|d| d.is_finite())
            .map(|d| d.trunc() as i64),
        _ => None,
    }
}

fn parse_in_list(op: &str, v: &Bson) -> MongoResult<Pred> {
    let Bson::Array(items) = v else {
        return Err(MongoError::bad_value(format!("{op} needs an array")));
    };
    let mut values = Vec::new();
    let mut regexes = Vec::new();
    for item in items {
        match item {
            Bson::RegularExpression(r) => regexes.push(Re::new(&r.pattern, &r.options)?),
            Bson::Document(d) if is_operator_doc(d) => {
                return Err(MongoError::bad_value(format!("cannot nest $ under {op}")))
            }
            other => values.push(other.clone()),
        }
    }
    Ok(Pred::In { values, regexes })
}

fn parse_bits_mask(op: &str, v: &Bson) -> MongoResult<Vec<u32>> {
    match v {
        Bson::Array(items) => items
            .iter()
            .map(|p| match order::as_i64_exact(p) {
                Some(n) if (0..=i32::MAX as i64).contains(&n) => Ok(n as u32),
                Some(_) => Err(MongoError::bad_value(format!(
                    "bit positions must be >= 0 but got: {p}"
                ))),
                None => Err(MongoError::bad_value(format!(
                    "bit positions must be an integer but got: {p}"
                ))),
            })
            .collect(),
        Bson::Binary(b) => {
            let mut positions = Vec::new();
            for (i, byte) in b.bytes.iter().enumerate() {
                for bit in 0..8 {
                    if byte & (1 << bit) != 0 {
                        positions.push((i * 8 + bit) as u32);
                    }
                }
            }
            Ok(positions)
        }
        n if order::is_number(n) => match order::as_i64_exact(n) {
            Some(m) if m >= 0 => Ok((0..63).filter(|b| m & (1 << b) != 0).collect()),
            Some(_) => Err(MongoError::bad_value(format!(
                "{op} takes a non-negative number"
            ))),
            None => Err(MongoError::bad_value(format!(
                "{op} takes an integer value representable as a 64-bit integer: {n}"
            ))),
        },
        _ => Err(MongoError::bad_value(format!(
            "{op} takes an Array, a number, or a BinData but received: {v}"
        ))),
    }
}

/// Parses `{$op: ...}` under a path. Filters nest (to the document depth limit) through
/// `$elemMatch`, `$not` and `$all`, which are handled here in a small frame; the other
/// operators are parsed by `parse_leaf_operator`, whose large frame is never on the
/// recursive path.
fn parse_operators(d: &Document) -> MongoResult<Vec<Pred>> {
    let mut preds = Vec::new();
    // $regex and $options pair up regardless of their order.
    let regex_arg = d.get("$regex");
    let options_arg = d.get("$options");
    if options_arg.is_some() && regex_arg.is_none() {
        return Err(MongoError::bad_value("$options needs a $regex"));
    }
    for (k, v) in d {
        match k.as_str() {
            "$all" => parse_all(v, &mut preds)?,
            "$elemMatch" => preds.push(parse_elem_match(v)?),
            "$not" => preds.push(parse_not(v)?),
            _ => parse_leaf_operator(k, v, options_arg, &mut preds)?,
        }
    }
    Ok(preds)
}

fn parse_all(v: &Bson, preds: &mut Vec<Pred>) -> MongoResult<()> {
    let Bson::Array(items) = v else {
        return Err(MongoError::bad_value("$all needs an array"));
    };
    if items.is_empty() {
        preds.push(Pred::Never);
        return Ok(());
    }
    let is_elem_match = |e: &Bson| matches!(e, Bson::Document(d) if d.keys().next().map(String::as_str) == Some("$elemMatch"));
    if is_elem_match(&items[0]) {
        for item in items {
            if !is_elem_match(item) {
                return Err(MongoError::bad_value(
                    "$all/$elemMatch has to be consistent",
                ));
            }
            let Bson::Document(d) = item else {
                unreachable!()
            };
            preds.extend(parse_operators(d)?);
        }
    } else {
        for item in items {
            match item {
                Bson::RegularExpression(r) => {
                    preds.push(Pred::Regex(Re::new(&r.pattern, &r.options)?))
                }
                Bson::Document(d) if is_operator_doc(d) => {
                    return Err(MongoError::bad_value("no $ expressions in $all"))
                }
                other => preds.push(Pred::Eq(other.clone())),
            }
        }
    }
    Ok(())
}

fn parse_elem_match(v: &Bson) -> MongoResult<Pred> {
    let Bson::Document(sub) = v else {
        return Err(MongoError::bad_value("$elemMatch needs an Object"));
    };
    let sub_ctx = Ctx {
        in_elem_match: true,
    };
    let value_mode = match sub.keys().next() {
        Some(first) => {
            first.starts_with('$')
                && !matches!(
                    first.as_str(),
                    "$and"
                        | "$or"
                        | "$nor"
                        | "$expr"
                        | "$where"
                        | "$jsonSchema"
                        | "$comment"
                        | "$alwaysTrue"
                        | "$alwaysFalse"
                        | "$text"
                )
        }
        None => false,
    };
    if value_mode {
        Ok(Pred::ElemMatchVal(parse_operators(sub)?))
    } else {
        Ok(Pred::ElemMatchObj(Box::new(parse_filter(sub, sub_ctx)?)))
    }
}

fn parse_not(v: &Bson) -> MongoResult<Pred> {
    match v {
        Bson::RegularExpression(r) => Ok(Pred::Not(vec![Pred::Regex(Re::new(
            &r.pattern, &r.options,
        )?)])),
        Bson::Document(sub) => {
            if sub.is_empty() {
                return Err(MongoError::bad_value("$not cannot be empty"));
            }
            if !is_operator_doc(sub) {
                return Err(MongoError::bad_value(format!(
                    "unknown operator: {}",
                    sub.keys().next().unwrap()
                )));
            }
            Ok(Pred::Not(parse_operators(sub)?))
        }
        _ => Err(MongoError::bad_value("$not needs a regex or a document")),
    }
}

/// The operators of `{path: {$op: ...}}` that do not nest filters.
#[inline(never)]
fn parse_leaf_operator(
    k: &str,
    v: &Bson,
    options_arg: Option<&Bson>,
    preds: &mut Vec<Pred>,
) -> MongoResult<()> {
    if !k.starts_with('$') {
        return Err(MongoError::bad_value(format!("unknown operator: {k}")));
    }
    match k {
        "$eq" => preds.push(Pred::Eq(v.clone())),
        "$ne" => {
            if matches!(v, Bson::RegularExpression(_)) {
                return Err(MongoError::bad_value("Can't have regex as arg to $ne."));
            }
            preds.push(Pred::Not(vec![Pred::Eq(v.clone())]))
        }
        "$gt" => preds.push(Pred::Cmp(CmpOp::Gt, v.clone())),
        "$gte" => preds.push(Pred::Cmp(CmpOp::Gte, v.clone())),
        "$lt" => preds.push(Pred::Cmp(CmpOp::Lt, v.clone())),
        "$lte" => preds.push(Pred::Cmp(CmpOp::Lte, v.clone())),
        "$in" => preds.push(parse_in_list("$in", v)?),
        "$nin" => preds.push(Pred::Not(vec![parse_in_list("$nin", v)?])),
        "$exists" => preds.push(Pred::Exists(is_truthy(v))),
        "$type" => {
            let sels = match v {
                Bson::Array(items) => items
                    .iter()
                    .map(parse_type_selector)
                    .collect::<MongoResult<Vec<_>>>()?,
                other => vec![parse_type_selector(other)?],
            };
            preds.push(Pred::Type(sels));
        }
        "$mod" => {
            let Bson::Array(items) = v else {
                return Err(MongoError::bad_value("malformed mod, needs to be an array"));
            };
            if items.len() < 2 {
                return Err(MongoError::bad_value("malformed mod, not enough elements"));
            }
            if items.len() > 2 {
                return Err(MongoError::bad_value("malformed mod, too many elements"));
            }
            let divisor = number_arg(&items[0])
                .ok_or_else(|| MongoError::bad_value("malformed mod, divisor not a number"))?;
            let remainder = number_arg(&items[1])
                .ok_or_else(|| MongoError::bad_value("malformed mod, remainder not a number"))?;
            if divisor == 0 {
                return Err(MongoError::bad_value("divisor cannot be 0"));
            }
            preds.push(Pred::Mod { divisor, remainder });
        }
        "$regex" => {
            let options = match options_arg {
                None => None,
                Some(Bson::String(s)) => Some(s.as_str()),
                Some(_) => return Err(MongoError::bad_value("$options has to be a string")),
            };
            let re = match v {
                Bson::String(p) => Re::new(p, options.unwrap_or(""))?,
                Bson::RegularExpression(r) => {
                    if options.is_some() && !r.options.is_empty() {
                        return Err(MongoError::new(
                            ErrorCode::RegexOptionsTwice,
                            "options set in both $regex and $options",
                        ));
                    }
                    Re::new(&r.pattern, options.unwrap_or(&r.options))?
                }
                _ => return Err(MongoError::bad_value("$regex has to be a string")),
            };
            preds.push(Pred::Regex(re));
        }
        "$options" => {}
        "$size" => {
            let n = match v {
                n if order::is_number(n) => order::as_i64_exact(n)
                    .ok_or_else(|| MongoError::bad_value("$size must be a whole number"))?,
                _ => return Err(MongoError::bad_value("$size needs a number")),
            };
            if n < 0 {
                return Err(MongoError::bad_value("$size may not be negative"));
            }
            preds.push(Pred::Size(n as usize));
        }
        "$bitsAllSet" => preds.push(Pred::Bits(BitsOp::AllSet, parse_bits_mask(k, v)?)),
        "$bitsAnySet" => preds.push(Pred::Bits(BitsOp::AnySet, parse_bits_mask(k, v)?)),
        "$bitsAllClear" => preds.push(Pred::Bits(BitsOp::AllClear, parse_bits_mask(k, v)?)),
        "$bitsAnyClear" => preds.push(Pred::Bits(BitsOp::AnyClear, parse_bits_mask(k, v)?)),
        "$near" | "$nearSphere" | "$geoWithin" | "$geoIntersects" | "$within" | "$box"
        | "$center" | "$centerSphere" | "$polygon" | "$geometry" | "$maxDistance"
        | "$minDistance" => {
            return Err(MongoError::bad_value(format!(
                "geospatial operator {k} is not supported"
            )))
        }
        "$comment" => {}
        _ => return Err(MongoError::bad_value(format!("unknown operator: {k}"))),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------------------

/// What a path is resolved against: a whole document, or a bare value (an array element
/// inside `$elemMatch`).
#[derive(Clone, Copy)]
enum Root<'a> {
    Doc(&'a Document),
    Val(&'a Bson),
}

impl<'a> Root<'a> {
    fn candidates(self, p: &str, expand: bool) -> Vec<PathValue<'a>> {
        match self {
            Root::Doc(d) => path::traverse(d, p, expand),
            Root::Val(v) => path::traverse_value(v, p, expand),
        }
    }
}

/// Evaluation state: the first runtime error (from `$expr`) is remembered.
struct Eval<'a> {
    error: Option<MongoError>,
    vars: &'a crate::expr::Variables,
}

type Outcome = (bool, Option<usize>);

impl<'a> Eval<'a> {
    fn new(vars: &'a crate::expr::Variables) -> Self {
        Eval { error: None, vars }
    }

    fn node(&mut self, node: &Node, root: Root) -> Outcome {
        match node {
            Node::And(children) => {
                let mut pos = None;
                for c in children {
                    let (m, p) = self.node(c, root);
                    if !m {
                        return (false, None);
                    }
                    pos = pos.or(p);
                }
                (true, pos)
            }
            Node::Or(children) => {
                for c in children {
                    let r = self.node(c, root);
                    if r.0 {
                        return r;
                    }
                }
                (false, None)
            }
            Node::Nor(children) => (!children.iter().any(|c| self.node(c, root).0), None),
            Node::Path(p, preds) => self.preds(preds, root, p),
            Node::Const(b) => (*b, None),
            Node::Schema(s) => match root {
                Root::Doc(d) => (s.matches_doc(d), None),
                Root::Val(v) => (s.matches(v), None),
            },
            Node::Expr(e) => {
                let Root::Doc(d) = root else {
                    return (false, None);
                };
                match e.eval(d, self.vars) {
                    Ok(v) => (is_truthy(&v), None),
                    Err(err) => {
                        self.error.get_or_insert(err);
                        (false, None)
                    }
                }
            }
        }
    }

    fn preds(&mut self, preds: &[Pred], root: Root, p: &str) -> Outcome {
        let mut pos = None;
        for pred in preds {
            let (m, ppos) = self.pred(pred, root, p);
            if !m {
                return (false, None);
            }
            pos = pos.or(ppos);
        }
        (true, pos)
    }

    fn pred(&mut self, pred: &Pred, root: Root, p: &str) -> Outcome {
        match pred {
            Pred::Never => (false, None),
            Pred::Not(inner) => (!self.preds(inner, root, p).0, None),
            Pred::Exists(want) => {
                let exists = root.candidates(p, false).iter().any(|c| c.value.is_some());
                (exists == *want, None)
            }
            Pred::Size(_) => {
                let found = root
                    .candidates(p, false)
                    .iter()
                    .any(|c| self.single(pred, c.value));
                (found, None)
            }
            Pred::ElemMatchObj(_) | Pred::ElemMatchVal(_) => {
                for c in root.candidates(p, false) {
                    if let Some(Bson::Array(arr)) = c.value {
                        for (i, e) in arr.iter().enumerate() {
                            if self.elem_match(pred, e) {
                                return (true, c.array_pos.or(Some(i)));
                            }
                        }
                    }
                }
                (false, None)
            }
            _ => {
                for c in root.candidates(p, true) {
                    if self.single(pred, c.value) {
                        return (true, c.array_pos);
                    }
                }
                (false, None)
            }
        }
    }

    fn elem_match(&mut self, pred: &Pred, e: &Bson) -> bool {
        match pred {
            Pred::ElemMatchObj(node) => match e {
                Bson::Document(d) => self.node(node, Root::Doc(d)).0,
                Bson::Array(_) => self.node(node, Root::Val(e)).0,
                _ => false,
            },
            Pred::ElemMatchVal(preds) => preds.iter().all(|p| self.single(p, Some(e))),
            _ => false,
        }
    }

    /// Does one value (or a missing value) satisfy the predicate, without array expansion?
    fn single(&mut self, pred: &Pred, v: Option<&Bson>) -> bool {
        match pred {
            Pred::Eq(q) => eq_single(q, v),
            Pred::Cmp(op, q) => cmp_single(*op, q, v),
            Pred::In { values, regexes } => {
                values.iter().any(|q| eq_single(q, v))
                    || v.is_some_and(|v| regexes.iter().any(|r| r.matches_value(v)))
            }
            Pred::Exists(want) => v.is_some() == *want,
            Pred::Type(sels) => v.is_some_and(|v| sels.iter().any(|s| s.matches(v))),
            Pred::Mod { divisor, remainder } => v
                .and_then(number_arg_for_mod)
                .is_some_and(|n| n.wrapping_rem(*divisor) == *remainder),
            Pred::Regex(re) => v.is_some_and(|v| re.matches_value(v)),
            Pred::Size(n) => matches!(v, Some(Bson::Array(a)) if a.len() == *n),
            Pred::ElemMatchObj(_) | Pred::ElemMatchVal(_) => match v {
                Some(Bson::Array(arr)) => arr.iter().any(|e| self.elem_match(pred, e)),
                _ => false,
            },
            Pred::Bits(op, positions) => v.is_some_and(|v| bits_single(*op, positions, v)),
            Pred::Not(inner) => !inner.iter().all(|p| self.single(p, v)),
            Pred::Never => false,
        }
    }
}

fn number_arg_for_mod(v: &Bson) -> Option<i64> {
    if order::is_number(v) {
        number_arg(v)
    } else {
        None
    }
}

fn eq_single(q: &Bson, v: Option<&Bson>) -> bool {
    match v {
        None => matches!(q, Bson::Null),
        Some(v) => type_rank(v) == type_rank(q) && values_equal(v, q),
    }
}

fn is_nan(v: &Bson) -> bool {
    matches!(order::num_key(v), Some(order::NumKey::NaN))
}

fn cmp_single(op: CmpOp, q: &Bson, v: Option<&Bson>) -> bool {
    let v = match v {
        Some(v) => v,
        None => {
            return matches!(q, Bson::Null) && matches!(op, CmpOp::Gte | CmpOp::Lte);
        }
    };
    if !matches!(q, Bson::MinKey | Bson::MaxKey) && type_rank(v) != type_rank(q) {
        return false;
    }
    if order::is_number(v) && order::is_number(q) && (is_nan(v) || is_nan(q)) {
        let both = is_nan(v) && is_nan(q);
        return both && matches!(op, CmpOp::Gte | CmpOp::Lte);
    }
    let o = compare(v, q);
    match op {
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Gte => o != Ordering::Less,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Lte => o != Ordering::Greater,
    }
}

fn bits_single(op: BitsOp, positions: &[u32], v: &Bson) -> bool {
    let bit: Box<dyn Fn(u32) -> bool> = match v {
        Bson::Binary(b) => {
            let bytes = b.bytes.clone();
            Box::new(move |p| {
                bytes
                    .get((p / 8) as usize)
                    .is_some_and(|byte| byte & (1 << (p % 8)) != 0)
            })
        }
        n if order::is_number(n) => match order::as_i64_exact(n) {
            Some(i) => Box::new(move |p| if p >= 64 { i < 0 } else { i & (1i64 << p) != 0 }),
            None => return false,
        },
        _ => return false,
    };
    match op {
        BitsOp::AllSet => positions.iter().all(|p| bit(*p)),
        BitsOp::AnySet => positions.iter().any(|p| bit(*p)),
        BitsOp::AllClear => positions.iter().all(|p| !bit(*p)),
        BitsOp::AnyClear => positions.iter().any(|p| !bit(*p)),
    }
}

impl Matcher {
    /// Parses a filter; unknown operators and wrong argument types are errors with MongoDB codes.
    pub fn new(filter: &Document) -> MongoResult<Matcher> {
        Ok(Matcher {
            kind: Kind::Filter(parse_filter(
                filter,
                Ctx {
                    in_elem_match: false,
                },
            )?),
            vars: crate::expr::Variables::default(),
        })
    }

    /// The same filter with variables for `$expr` (a command's `let`).
    pub fn with_variables(mut self, vars: crate::expr::Variables) -> Matcher {
        self.vars = vars;
        self
    }

    /// A matcher for bare values, as `$pull` and `$elemMatch` use them: an operator
    /// document (`{$gte: 3}`) applies its operators to the value; any other document is a
    /// query applied to document values (`{score: 8}` matches `{score: 8, item: "b"}`);
    /// a regex matches strings; anything else is equality.
    pub fn new_for_value(cond: &Bson) -> MongoResult<Matcher> {
        let ctx = Ctx {
            in_elem_match: true,
        };
        let kind = match cond {
            Bson::Document(d)
                if is_operator_doc(d)
                    && !matches!(
                        d.keys().next().map(String::as_str),
                        Some(
                            "$and"
                                | "$or"
                                | "$nor"
                                | "$expr"
                                | "$jsonSchema"
                                | "$alwaysTrue"
                                | "$alwaysFalse"
                        )
                    ) =>
            {
                Kind::Value(parse_operators(d)?)
            }
            Bson::Document(d) => Kind::Filter(parse_filter(d, ctx)?),
            Bson::RegularExpression(r) => {
                Kind::Value(vec![Pred::Regex(Re::new(&r.pattern, &r.options)?)])
            }
            other => Kind::Value(vec![Pred::Eq(other.clone())]),
        };
        Ok(Matcher {
            kind,
            vars: crate::expr::Variables::default(),
        })
    }

    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_with_position(doc).is_some()
    }

    /// Like [`Matcher::matches`] but reports `$expr` evaluation errors.
    pub fn matches_checked(&self, doc: &Document) -> MongoResult<bool> {
        let mut ev = Eval::new(&self.vars);
        let m = self.run(&mut ev, doc).0;
        match ev.error {
            Some(e) => Err(e),
            None => Ok(m),
        }
    }

    /// `None` if the document does not match; otherwise `Some(pos)` where `pos` is the
    /// index, in the first array traversed, of the element that satisfied the first
    /// array-traversing predicate (what the positional `$` operator refers to).
    pub fn matches_with_position(&self, doc: &Document) -> Option<Option<usize>> {
        let mut ev = Eval::new(&self.vars);
        let (m, pos) = self.run(&mut ev, doc);
        m.then_some(pos)
    }

    fn run(&self, ev: &mut Eval, doc: &Document) -> Outcome {
        match &self.kind {
            Kind::Filter(node) => ev.node(node, Root::Doc(doc)),
            Kind::Value(preds) => {
                let v = Bson::Document(doc.clone());
                (preds.iter().all(|p| ev.single(p, Some(&v))), None)
            }
        }
    }

    /// Matches a bare value: for a value matcher, the operators/equality apply to `v`
    /// itself (no array expansion); for a document filter, `v` must be a document that
    /// matches.
    pub fn matches_value(&self, v: &Bson) -> bool {
        let mut ev = Eval::new(&self.vars);
        match &self.kind {
            Kind::Value(preds) => preds.iter().all(|p| ev.single(p, Some(v))),
            Kind::Filter(node) => match v {
                Bson::Document(d) => ev.node(node, Root::Doc(d)).0,
                _ => false,
            },
        }
    }

    /// True when the filter has no predicates (`{}`): it matches every document.
    pub fn is_match_all(&self) -> bool {
        matches!(&self.kind, Kind::Filter(Node::And(c)) if c.is_empty())
    }
}
