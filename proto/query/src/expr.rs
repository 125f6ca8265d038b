//! Aggregation expressions (owner: aggregation helper).
//!
//! An expression is parsed once into an [`Expr`] tree and evaluated many times against
//! documents. Evaluation follows MongoDB's aggregation semantics: field paths traverse
//! arrays, arithmetic widens int → long → double (decimal wins over everything), and a
//! missing value is distinct from null.
//!
//! "Missing" has no BSON representation, so [`Expr::eval`] reports it as
//! `Bson::Undefined` (the deprecated undefined type, which MongoDB itself treats like a
//! missing value in aggregation). [`Expr::eval_opt`] returns `None` instead.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt::Write as _;

use bson::{oid::ObjectId, spec::ElementType, Bson, DateTime, Decimal128, Document};
use regex::Regex;

use crate::{ErrorCode, MongoError, MongoResult};

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr(Node);

/// Variables visible to an expression: `$$NOW`, `let` variables and any user variable.
/// `$$ROOT` and `$$CURRENT` are the document being evaluated; `$$REMOVE` is missing.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    vars: Vec<(String, Bson)>,
    now: Option<DateTime>,
}

impl Variables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns these variables plus `name` bound to `value` (rebinding replaces).
    pub fn with(mut self, name: impl Into<String>, value: Bson) -> Self {
        self.set(name, value);
        self
    }

    pub fn set(&mut self, name: impl Into<String>, value: Bson) {
        let name = name.into();
        match self.vars.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name, value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Bson> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Fixes `$$NOW` for the whole operation (MongoDB evaluates it once per command).
    pub fn with_now(mut self, now: DateTime) -> Self {
        self.now = Some(now);
        self
    }

    /// `$$NOW`: the fixed time if one was set, otherwise the current time.
    pub fn now(&self) -> DateTime {
        self.now.unwrap_or_else(DateTime::now)
    }

    /// Pins `$$NOW` if it is not pinned yet.
    pub fn pin_now(&mut self) {
        if self.now.is_none() {
            self.now = Some(DateTime::now());
        }
    }

    /// Evaluates a `let` document (`{name: expr, ...}`) against `root` and binds each
    /// result. Names must start with a lowercase letter or a non-ASCII character.
    pub fn bind_let(&mut self, spec: &Document, root: &Document) -> MongoResult<()> {
        let mut bound = Vec::with_capacity(spec.len());
        for (name, value) in spec {
            validate_var_name(name)?;
            let v = Expr::parse(value)?.eval(root, self)?;
            bound.push((name.clone(), v));
        }
        for (n, v) in bound {
            self.set(n, v);
        }
        Ok(())
    }
}

/// MongoDB's truthiness: false, null, missing/undefined and numeric zero are false.
pub fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !Dec::from_d128(d).is_zero(),
        _ => true,
    }
}

/// Compares two values in MongoDB's order with "missing" (`Bson::Undefined`) sorting
/// below null, as aggregation comparison expressions do.
pub fn compare_values(a: &Bson, b: &Bson) -> Ordering {
    match (a, b) {
        (Bson::Undefined, Bson::Undefined) => Ordering::Equal,
        (Bson::Undefined, Bson::MinKey) => Ordering::Greater,
        (Bson::MinKey, Bson::Undefined) => Ordering::Less,
        (Bson::Undefined, _) => Ordering::Less,
        (_, Bson::Undefined) => Ordering::Greater,
        _ => crate::order::compare(a, b),
    }
}

fn values_eq(a: &Bson, b: &Bson) -> bool {
    compare_values(a, b) == Ordering::Equal
}

impl Expr {
    /// Parses an expression: a field path (`"$a.b"`), a variable (`"$$x.y"`), an operator
    /// document (`{$add: [...]}`), an object or array expression, or a literal.
    pub fn parse(spec: &Bson) -> MongoResult<Expr> {
        Ok(Expr(parse_node(spec)?))
    }

    /// A literal expression that evaluates to `value`.
    pub fn constant(value: Bson) -> Expr {
        Expr(Node::Const(value))
    }

    /// Parses a document as an object expression, even if it is a single `$op` key.
    pub fn parse_object(spec: &Document) -> MongoResult<Expr> {
        Ok(Expr(parse_doc(spec)?))
    }

    /// The constant this expression evaluates to, if it does not depend on its input.
    pub fn as_constant(&self) -> Option<&Bson> {
        match &self.0 {
            Node::Const(v) => Some(v),
            _ => None,
        }
    }

    /// The dotted path if this expression is a plain field path (`"$a.b"` → `"a.b"`).
    pub fn as_field_path(&self) -> Option<String> {
        match &self.0 {
            Node::Field(p) => Some(p.join(".")),
            _ => None,
        }
    }

    /// Evaluates against `root` (which is `$$ROOT` and `$$CURRENT`). A missing result is
    /// `Bson::Undefined`.
    ///
    /// A result nested deeper than [`crate::depth::MAX_VALUE_DEPTH`] is Overflow (15): a
    /// pipeline could otherwise deepen a document a little more at every stage.
    pub fn eval(&self, root: &Document, vars: &Variables) -> MongoResult<Bson> {
        let mut cx = Cx {
            root,
            vars,
            locals: Vec::new(),
        };
        let v = self.ev(&mut cx)?;
        crate::depth::check_value_depth(&v)?;
        Ok(v)
    }

    /// Evaluates with `$$CURRENT` (and so plain field paths) bound to `current` while
    /// `$$ROOT` stays `root` (`$redact` descending into sub-documents).
    pub fn eval_with_current(
        &self,
        root: &Document,
        current: &Document,
        vars: &Variables,
    ) -> MongoResult<Bson> {
        let mut cx = Cx {
            root,
            vars,
            locals: vec![("CURRENT", Bson::Document(current.clone()))],
        };
        let v = self.ev(&mut cx)?;
        crate::depth::check_value_depth(&v)?;
        Ok(v)
    }

    /// Like [`Expr::eval`], with a missing result as `None`.
    pub fn eval_opt(&self, root: &Document, vars: &Variables) -> MongoResult<Option<Bson>> {
        Ok(match self.eval(root, vars)? {
            Bson::Undefined => None,
            v => Some(v),
        })
    }

    /// Evaluates and applies MongoDB truthiness (for `$expr`, `$cond`, `$filter`...).
    pub fn eval_bool(&self, root: &Document, vars: &Variables) -> MongoResult<bool> {
        Ok(truthy(&self.eval(root, vars)?))
    }
}

// ---------------------------------------------------------------------------------------
// Tree

#[derive(Debug, Clone)]
enum Node {
    Const(Bson),
    /// Path relative to `$$CURRENT`.
    Field(Vec<String>),
    /// `$$name.path...`
    Var(String, Vec<String>),
    Object(Vec<(String, Expr)>),
    Array(Vec<Expr>),
    Op(Op, Vec<Expr>),
    /// Operators with named arguments; the slots follow `named_params(op)`.
    Named(Op, Vec<Option<Expr>>),
    Cond(Box<(Expr, Expr, Expr)>),
    Switch(Vec<(Expr, Expr)>, Option<Box<Expr>>),
    Let(Vec<(String, Expr)>, Box<Expr>),
    Filter {
        input: Box<Expr>,
        name: String,
        cond: Box<Expr>,
        limit: Option<Box<Expr>>,
    },
    Map {
        input: Box<Expr>,
        name: String,
        body: Box<Expr>,
    },
    Reduce {
        input: Box<Expr>,
        initial: Box<Expr>,
        body: Box<Expr>,
    },
    Regex {
        op: Op,
        input: Box<Expr>,
        regex: RegexArg,
    },
}

#[derive(Debug, Clone)]
enum RegexArg {
    Compiled(Box<Regex>),
    Dynamic(Box<Expr>, Option<Box<Expr>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    // arithmetic
    Add,
    Subtract,
    Multiply,
    Divide,
    Mod,
    Abs,
    Ceil,
    Floor,
    Round,
    Trunc,
    Sqrt,
    Pow,
    Exp,
    Ln,
    Log,
    Log10,
    // comparison
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    Cmp,
    // boolean
    And,
    Or,
    Not,
    IfNull,
    // string
    Concat,
    SubstrBytes,
    SubstrCP,
    ToLower,
    ToUpper,
    StrLenBytes,
    StrLenCP,
    Split,
    Trim,
    LTrim,
    RTrim,
    IndexOfBytes,
    IndexOfCP,
    RegexMatch,
    RegexFind,
    RegexFindAll,
    ReplaceOne,
    ReplaceAll,
    Strcasecmp,
    // array
    ArrayElemAt,
    First,
    Last,
    Size,
    Slice,
    ConcatArrays,
    In,
    IndexOfArray,
    IsArray,
    Range,
    ReverseArray,
    Zip,
    ArrayToObject,
    ObjectToArray,
    SortArray,
    FirstN,
    LastN,
    MaxN,
    MinN,
    // set
    SetUnion,
    SetIntersection,
    SetDifference,
    SetEquals,
    SetIsSubset,
    AllElementsTrue,
    AnyElementTrue,
    // type
    Type,
    ToString,
    ToInt,
    ToLong,
    ToDouble,
    ToDecimal,
    ToBool,
    ToObjectId,
    ToDate,
    Convert,
    IsNumber,
    // date
    Year,
    Month,
    DayOfMonth,
    Hour,
    Minute,
    Second,
    Millisecond,
    DayOfWeek,
    DayOfYear,
    Week,
    IsoWeek,
    IsoWeekYear,
    IsoDayOfWeek,
    DateToString,
    DateFromString,
    DateToParts,
    DateFromParts,
    DateAdd,
    DateSubtract,
    DateDiff,
    DateTrunc,
    // object
    MergeObjects,
    GetField,
    SetField,
    UnsetField,
    // accumulators as expressions
    Sum,
    Avg,
    Min,
    Max,
    StdDevPop,
    StdDevSamp,
    // misc
    Rand,
    BsonSize,
    BinarySize,
}

fn op_from_name(name: &str) -> Option<Op> {
    use Op::*;
    Some(match name {
        "$add" => Add,
        "$subtract" => Subtract,
        "$multiply" => Multiply,
        "$divide" => Divide,
        "$mod" => Mod,
        "$abs" => Abs,
        "$ceil" => Ceil,
        "$floor" => Floor,
        "$round" => Round,
        "$trunc" => Trunc,
        "$sqrt" => Sqrt,
        "$pow" => Pow,
        "$exp" => Exp,
        "$ln" => Ln,
        "$log" => Log,
        "$log10" => Log10,
        "$eq" => Eq,
        "$ne" => Ne,
        "$gt" => Gt,
        "$gte" => Gte,
        "$lt" => Lt,
        "$lte" => Lte,
        "$cmp" => Cmp,
        "$and" => And,
        "$or" => Or,
        "$not" => Not,
        "$ifNull" => IfNull,
        "$concat" => Concat,
        "$substr" | "$substrBytes" => SubstrBytes,
        "$substrCP" => SubstrCP,
        "$toLower" => ToLower,
        "$toUpper" => ToUpper,
        "$strLenBytes" => StrLenBytes,
        "$strLenCP" => StrLenCP,
        "$split" => Split,
        "$trim" => Trim,
        "$ltrim" => LTrim,
        "$rtrim" => RTrim,
        "$indexOfBytes" => IndexOfBytes,
        "$indexOfCP" => IndexOfCP,
        "$regexMatch" => RegexMatch,
        "$regexFind" => RegexFind,
        "$regexFindAll" => RegexFindAll,
        "$replaceOne" => ReplaceOne,
        "$replaceAll" => ReplaceAll,
        "$strcasecmp" => Strcasecmp,
        "$arrayElemAt" => ArrayElemAt,
        "$first" => First,
        "$last" => Last,
        "$size" => Size,
        "$slice" => Slice,
        "$concatArrays" => ConcatArrays,
        "$in" => In,
        "$indexOfArray" => IndexOfArray,
        "$isArray" => IsArray,
        "$range" => Range,
        "$reverseArray" => ReverseArray,
        "$zip" => Zip,
        "$arrayToObject" => ArrayToObject,
        "$objectToArray" => ObjectToArray,
        "$sortArray" => SortArray,
        "$firstN" => FirstN,
        "$lastN" => LastN,
        "$maxN" => MaxN,
        "$minN" => MinN,
        "$setUnion" => SetUnion,
        "$setIntersection" => SetIntersection,
        "$setDifference" => SetDifference,
        "$setEquals" => SetEquals,
        "$setIsSubset" => SetIsSubset,
        "$allElementsTrue" => AllElementsTrue,
        "$anyElementTrue" => AnyElementTrue,
        "$type" => Type,
        "$toString" => ToString,
        "$toInt" => ToInt,
        "$toLong" => ToLong,
        "$toDouble" => ToDouble,
        "$toDecimal" => ToDecimal,
        "$toBool" => ToBool,
        "$toObjectId" => ToObjectId,
        "$toDate" => ToDate,
        "$convert" => Convert,
        "$isNumber" => IsNumber,
        "$year" => Year,
        "$month" => Month,
        "$dayOfMonth" => DayOfMonth,
        "$hour" => Hour,
        "$minute" => Minute,
        "$second" => Second,
        "$millisecond" => Millisecond,
        "$dayOfWeek" => DayOfWeek,
        "$dayOfYear" => DayOfYear,
        "$week" => Week,
        "$isoWeek" => IsoWeek,
        "$isoWeekYear" => IsoWeekYear,
        "$isoDayOfWeek" => IsoDayOfWeek,
        "$dateToString" => DateToString,
        "$dateFromString" => DateFromString,
        "$dateToParts" => DateToParts,
        "$dateFromParts" => DateFromParts,
        "$dateAdd" => DateAdd,
        "$dateSubtract" => DateSubtract,
        "$dateDiff" => DateDiff,
        "$dateTrunc" => DateTrunc,
        "$mergeObjects" => MergeObjects,
        "$getField" => GetField,
        "$setField" => SetField,
        "$unsetField" => UnsetField,
        "$sum" => Sum,
        "$avg" => Avg,
        "$min" => Min,
        "$max" => Max,
        "$stdDevPop" => StdDevPop,
        "$stdDevSamp" => StdDevSamp,
        "$rand" => Rand,
        "$bsonSize" => BsonSize,
        "$binarySize" => BinarySize,
        _ => return None,
    })
}

fn op_name(op: Op) -> &'static str {
    use Op::*;
    match op {
        Add => "$add",
        Subtract => "$subtract",
        Multiply => "$multiply",
        Divide => "$divide",
        Mod => "$mod",
        Abs => "$abs",
        Ceil => "$ceil",
        Floor => "$floor",
        Round => "$round",
        Trunc => "$trunc",
        Sqrt => "$sqrt",
        Pow => "$pow",
        Exp => "$exp",
        Ln => "$ln",
        Log => "$log",
        Log10 => "$log10",
        Eq => "$eq",
        Ne => "$ne",
        Gt => "$gt",
        Gte => "$gte",
        Lt => "$lt",
        Lte => "$lte",
        Cmp => "$cmp",
        And => "$and",
        Or => "$or",
        Not => "$not",
        IfNull => "$ifNull",
        Concat => "$concat",
        SubstrBytes => "$substrBytes",
        SubstrCP => "$substrCP",
        ToLower => "$toLower",
        ToUpper => "$toUpper",
        StrLenBytes => "$strLenBytes",
        StrLenCP => "$strLenCP",
        Split => "$split",
        Trim => "$trim",
        LTrim => "$ltrim",
        RTrim => "$rtrim",
        IndexOfBytes => "$indexOfBytes",
        IndexOfCP => "$indexOfCP",
        RegexMatch => "$regexMatch",
        RegexFind => "$regexFind",
        RegexFindAll => "$regexFindAll",
        ReplaceOne => "$replaceOne",
        ReplaceAll => "$replaceAll",
        Strcasecmp => "$strcasecmp",
        ArrayElemAt => "$arrayElemAt",
        First => "$first",
        Last => "$last",
        Size => "$size",
        Slice => "$slice",
        ConcatArrays => "$concatArrays",
        In => "$in",
        IndexOfArray => "$indexOfArray",
        IsArray => "$isArray",
        Range => "$range",
        ReverseArray => "$reverseArray",
        Zip => "$zip",
        ArrayToObject => "$arrayToObject",
        ObjectToArray => "$objectToArray",
        SortArray => "$sortArray",
        FirstN => "$firstN",
        LastN => "$lastN",
        MaxN => "$maxN",
        MinN => "$minN",
        SetUnion => "$setUnion",
        SetIntersection => "$setIntersection",
        SetDifference => "$setDifference",
        SetEquals => "$setEquals",
        SetIsSubset => "$setIsSubset",
        AllElementsTrue => "$allElementsTrue",
        AnyElementTrue => "$anyElementTrue",
        Type => "$type",
        ToString => "$toString",
        ToInt => "$toInt",
        ToLong => "$toLong",
        ToDouble => "$toDouble",
        ToDecimal => "$toDecimal",
        ToBool => "$toBool",
        ToObjectId => "$toObjectId",
        ToDate => "$toDate",
        Convert => "$convert",
        IsNumber => "$isNumber",
        Year => "$year",
        Month => "$month",
        DayOfMonth => "$dayOfMonth",
        Hour => "$hour",
        Minute => "$minute",
        Second => "$second",
        Millisecond => "$millisecond",
        DayOfWeek => "$dayOfWeek",
        DayOfYear => "$dayOfYear",
        Week => "$week",
        IsoWeek => "$isoWeek",
        IsoWeekYear => "$isoWeekYear",
        IsoDayOfWeek => "$isoDayOfWeek",
        DateToString => "$dateToString",
        DateFromString => "$dateFromString",
        DateToParts => "$dateToParts",
        DateFromParts => "$dateFromParts",
        DateAdd => "$dateAdd",
        DateSubtract => "$dateSubtract",
        DateDiff => "$dateDiff",
        DateTrunc => "$dateTrunc",
        MergeObjects => "$mergeObjects",
        GetField => "$getField",
        SetField => "$setField",
        UnsetField => "$unsetField",
        Sum => "$sum",
        Avg => "$avg",
        Min => "$min",
        Max => "$max",
        StdDevPop => "$stdDevPop",
        StdDevSamp => "$stdDevSamp",
        Rand => "$rand",
        BsonSize => "$bsonSize",
        BinarySize => "$binarySize",
    }
}

/// (min, max) positional arguments; `None` for operators taking named arguments only.
fn arity(op: Op) -> Option<(usize, usize)> {
    use Op::*;
    const MANY: usize = usize::MAX;
    Some(match op {
        Add | Multiply | And | Or | Concat | ConcatArrays | SetUnion | SetIntersection
        | MergeObjects | Sum | Avg | Min | Max | StdDevPop | StdDevSamp => (0, MANY),
        Subtract | Divide | Mod | Pow | Log | Eq | Ne | Gt | Gte | Lt | Lte | Cmp | Split
        | Strcasecmp | ArrayElemAt | In | SetDifference | SetIsSubset => (2, 2),
        IfNull | SetEquals => (2, MANY),
        Abs | Ceil | Floor | Sqrt | Exp | Ln | Log10 | Not | ToLower | ToUpper | StrLenBytes
        | StrLenCP | First | Last | Size | IsArray | ReverseArray | ArrayToObject
        | ObjectToArray | AllElementsTrue | AnyElementTrue | Type | ToString | ToInt | ToLong
        | ToDouble | ToDecimal | ToBool | ToObjectId | ToDate | IsNumber | BsonSize
        | BinarySize => (1, 1),
        Round | Trunc => (1, 2),
        SubstrBytes | SubstrCP => (3, 3),
        IndexOfBytes | IndexOfCP | IndexOfArray => (2, 4),
        Slice | Range => (2, 3),
        Rand => (0, 0),
        Year | Month | DayOfMonth | Hour | Minute | Second | Millisecond | DayOfWeek
        | DayOfYear | Week | IsoWeek | IsoWeekYear | IsoDayOfWeek => (1, 1),
        GetField => (1, 1),
        _ => return None,
    })
}

/// Named parameters (all, required) for operators that take an argument object.
fn named_params(op: Op) -> (&'static [&'static str], &'static [&'static str]) {
    use Op::*;
    match op {
        Trim | LTrim | RTrim => (&["input", "chars"], &["input"]),
        ReplaceOne | ReplaceAll => (
            &["input", "find", "replacement"],
            &["input", "find", "replacement"],
        ),
        Zip => (&["inputs", "useLongestLength", "defaults"], &["inputs"]),
        SortArray => (&["input", "sortBy"], &["input", "sortBy"]),
        FirstN | LastN | MaxN | MinN => (&["input", "n"], &["input", "n"]),
        Convert => (&["input", "to", "onError", "onNull"], &["input", "to"]),
        DateToString => (&["date", "format", "timezone", "onNull"], &["date"]),
        DateFromString => (
            &["dateString", "format", "timezone", "onError", "onNull"],
            &["dateString"],
        ),
        DateToParts => (&["date", "timezone", "iso8601"], &["date"]),
        DateFromParts => (
            &[
                "year",
                "month",
                "day",
                "hour",
                "minute",
                "second",
                "millisecond",
                "isoWeekYear",
                "isoWeek",
                "isoDayOfWeek",
                "timezone",
            ],
            &[],
        ),
        DateAdd | DateSubtract => (
            &["startDate", "unit", "amount", "timezone"],
            &["startDate", "unit", "amount"],
        ),
        DateDiff => (
            &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
            &["startDate", "endDate", "unit"],
        ),
        DateTrunc => (
            &["date", "unit", "binSize", "timezone", "startOfWeek"],
            &["date", "unit"],
        ),
        GetField => (&["field", "input"], &["field"]),
        SetField => (&["field", "input", "value"], &["field", "input", "value"]),
        UnsetField => (&["field", "input"], &["field", "input"]),
        Year | Month | DayOfMonth | Hour | Minute | Second | Millisecond | DayOfWeek
        | DayOfYear | Week | IsoWeek | IsoWeekYear | IsoDayOfWeek => {
            (&["date", "timezone"], &["date"])
        }
        _ => (&[], &[]),
    }
}

fn is_date_part(op: Op) -> bool {
    use Op::*;
    matches!(
        op,
        Year | Month
            | DayOfMonth
            | Hour
            | Minute
            | Second
            | Millisecond
            | DayOfWeek
            | DayOfYear
            | Week
            | IsoWeek
            | IsoWeekYear
            | IsoDayOfWeek
    )
}

// ---------------------------------------------------------------------------------------
// Parsing

fn err(code: i32, msg: impl Into<String>) -> MongoError {
    MongoError::location(code, msg)
}

fn parse_node(spec: &Bson) -> MongoResult<Node> {
    match spec {
        Bson::String(s) if s.starts_with('$') => parse_path_string(s),
        Bson::Document(d) => parse_doc(d),
        Bson::Array(a) => {
            let items = a.iter().map(Expr::parse).collect::<MongoResult<Vec<_>>>()?;
            if items.iter().all(|e| matches!(e.0, Node::Const(_))) {
                let vals = items
                    .into_iter()
                    .map(|e| match e.0 {
                        Node::Const(Bson::Undefined) => Bson::Null,
                        Node::Const(v) => v,
                        _ => unreachable!(),
                    })
                    .collect();
                return Ok(Node::Const(Bson::Array(vals)));
            }
            Ok(Node::Array(items))
        }
        other => Ok(Node::Const(other.clone())),
    }
}

fn parse_path_string(s: &str) -> MongoResult<Node> {
    crate::depth::check_path(s)?;
    if let Some(var) = s.strip_prefix("$$") {
        let mut parts = var.split('.');
        let name = parts.next().unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(err(16869, "empty variable name"));
        }
        let path: Vec<String> = parts.map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(err(
                15998,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if !is_system_var(&name) {
            validate_var_name(&name)?;
        }
        if name == "CURRENT" && path.is_empty() {
            return Ok(Node::Var(name, path));
        }
        if name == "CURRENT" {
            return Ok(Node::Field(path));
        }
        return Ok(Node::Var(name, path));
    }
    let path = &s[1..];
    if path.is_empty() {
        return Err(err(16872, "'$' by itself is not a valid FieldPath"));
    }
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(err(
            15998,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if parts.iter().any(|p| p.starts_with('$')) {
        return Err(err(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    Ok(Node::Field(parts))
}

fn is_system_var(name: &str) -> bool {
    matches!(
        name,
        "ROOT"
            | "CURRENT"
            | "REMOVE"
            | "NOW"
            | "CLUSTER_TIME"
            | "DESCEND"
            | "PRUNE"
            | "KEEP"
            | "SEARCH_META"
            | "USER_ROLES"
    )
}

fn validate_var_name(name: &str) -> MongoResult<()> {
    let first = name.chars().next();
    let ok_first = matches!(first, Some(c) if c.is_ascii_lowercase() || !c.is_ascii());
    if !ok_first {
        return Err(err(
            16867,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    if name
        .chars()
        .any(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(err(
            16868,
            format!("'{name}' contains an invalid character for a variable name"),
        ));
    }
    Ok(())
}

fn parse_doc(d: &Document) -> MongoResult<Node> {
    if let Some((first, _)) = d.iter().next() {
        if first.starts_with('$') {
            if d.len() != 1 {
                return Err(doc_error(15983, d, ""));
            }
            if let Some((name, arg)) = d.iter().next() {
                return parse_operator(name, arg);
            }
        }
    }
    let mut fields = Vec::with_capacity(d.len());
    for (k, v) in d {
        if k.starts_with('$') {
            return Err(doc_error(16404, d, k));
        }
        if k.contains('.') {
            return Err(doc_error(16412, d, k));
        }
        fields.push((k.clone(), Expr::parse(v)?));
    }
    if fields
        .iter()
        .all(|(_, e)| matches!(&e.0, Node::Const(v) if !matches!(v, Bson::Undefined)))
    {
        let mut out = Document::new();
        for (k, e) in fields {
            if let Node::Const(v) = e.0 {
                out.insert(k, v);
            }
        }
        return Ok(Node::Const(Bson::Document(out)));
    }
    Ok(Node::Object(fields))
}

#[cold]
#[inline(never)]
fn doc_error(code: i32, d: &Document, k: &str) -> MongoError {
    match code {
        15983 => err(
            code,
            format!(
                "an expression specification must contain exactly one field, the name of the expression. Found {} fields in {}",
                d.len(),
                d
            ),
        ),
        16404 => err(
            code,
            format!("FieldPath field names may not start with '$'. Found '{k}'"),
        ),
        _ => err(
            code,
            format!("FieldPath field names may not contain '.'. Found '{k}'"),
        ),
    }
}

fn args_of(arg: &Bson) -> MongoResult<Vec<Expr>> {
    match arg {
        Bson::Array(a) => a.iter().map(Expr::parse).collect(),
        other => Ok(vec![Expr::parse(other)?]),
    }
}

fn boxed(e: Expr) -> Box<Expr> {
    Box::new(e)
}

// Parsing recurses once per level of expression nesting (up to the document depth
// limit), through `parse_node`, `parse_doc` and `parse_operator`: their frames are kept
// small by building error messages in cold functions and splitting the named and
// positional argument forms out.
fn parse_operator(name: &str, arg: &Bson) -> MongoResult<Node> {
    match name {
        "$literal" => return Ok(Node::Const(arg.clone())),
        "$cond" => return parse_cond(arg),
        "$switch" => return parse_switch(arg),
        "$let" => return parse_let(arg),
        "$filter" => return parse_filter(arg),
        "$map" => return parse_map(arg),
        "$reduce" => return parse_reduce(arg),
        "$expr" => return parse_node(arg),
        _ => {}
    }
    let Some(op) = op_from_name(name) else {
        return Err(unknown_expression(name));
    };
    match op {
        Op::RegexMatch | Op::RegexFind | Op::RegexFindAll => return parse_regex(op, arg),
        Op::GetField => {
            if let Bson::String(s) = arg {
                if !s.starts_with('$') {
                    return Ok(Node::Named(
                        op,
                        vec![Some(Expr::constant(arg.clone())), None],
                    ));
                }
            }
        }
        _ => {}
    }
    let (all, _) = named_params(op);
    let named_form = match arg {
        Bson::Document(d) => {
            !all.is_empty()
                && (arity(op).is_none() || d.keys().next().is_some_and(|k| !k.starts_with('$')))
        }
        _ => false,
    };
    if named_form || (arity(op).is_none() && !all.is_empty()) {
        parse_named(op, arg)
    } else {
        parse_positional(op, arg)
    }
}

#[cold]
#[inline(never)]
fn unknown_expression(name: &str) -> MongoError {
    MongoError::new(
        ErrorCode::InvalidPipelineOperator,
        format!("Unrecognized expression '{name}'"),
    )
}

#[cold]
#[inline(never)]
fn named_arg_error(code: i32, op: Op, what: &str) -> MongoError {
    err(code, format!("{} {what}", op_name(op)))
}

#[inline(never)]
fn parse_named(op: Op, arg: &Bson) -> MongoResult<Node> {
    let (all, required) = named_params(op);
    let Bson::Document(d) = arg else {
        return Err(named_arg_error(
            named_args_code(op),
            op,
            "only supports an object as its argument",
        ));
    };
    let mut slots: Vec<Option<Expr>> = vec![None; all.len()];
    for (k, v) in d {
        let Some(i) = all.iter().position(|p| p == k) else {
            return Err(named_arg_error(
                unknown_arg_code(op),
                op,
                &format!("found an unknown argument: {k}"),
            ));
        };
        slots[i] = Some(match (op, k.as_str()) {
            (Op::SortArray, "sortBy") => Expr::constant(v.clone()),
            _ => Expr::parse(v)?,
        });
    }
    for (i, p) in all.iter().enumerate() {
        if required.contains(p) && slots[i].is_none() {
            return Err(named_arg_error(
                missing_arg_code(op),
                op,
                &format!("requires '{p}' to be specified"),
            ));
        }
    }
    if op == Op::SortArray {
        let spec = slots
            .get(1)
            .and_then(Option::as_ref)
            .and_then(Expr::as_constant)
            .cloned()
            .unwrap_or(Bson::Null);
        validate_sort_by(&spec)?;
    }
    Ok(Node::Named(op, slots))
}

#[cold]
#[inline(never)]
fn arity_error(op: Op, min: usize, max: usize, n: usize) -> MongoError {
    let msg = if min == max {
        format!(
            "Expression {} takes exactly {} arguments. {} were passed in.",
            op_name(op),
            min,
            n
        )
    } else if max == usize::MAX {
        format!(
            "Expression {} takes at least {} arguments, and {} were passed in.",
            op_name(op),
            min,
            n
        )
    } else {
        format!(
            "Expression {} takes at least {} arguments, and at most {}, but {} were passed in.",
            op_name(op),
            min,
            max,
            n
        )
    };
    err(16020, msg)
}

#[inline(never)]
fn parse_positional(op: Op, arg: &Bson) -> MongoResult<Node> {
    // `{$rand: {}}` is MongoDB's documented spelling of a zero-argument call.
    let args = match (op, arg) {
        (Op::Rand, Bson::Document(d)) if d.is_empty() => Vec::new(),
        _ => args_of(arg)?,
    };
    let (min, max) = arity(op).unwrap_or((1, 1));
    if args.len() < min || args.len() > max {
        return Err(arity_error(op, min, max, args.len()));
    }
    if is_date_part(op) {
        // `{$year: "$d"}` and `{$year: ["$d"]}` both mean {date: ...}.
        let mut it = args.into_iter();
        return Ok(Node::Named(op, vec![it.next(), None]));
    }
    Ok(Node::Op(op, args))
}

fn named_args_code(op: Op) -> i32 {
    match op {
        Op::Trim | Op::LTrim | Op::RTrim => 50696,
        Op::ReplaceOne | Op::ReplaceAll => 51751,
        Op::Zip => 34460,
        Op::SortArray => 2942500,
        Op::Convert => 34468,
        Op::DateToString => 18629,
        Op::DateFromString => 40540,
        Op::SetField => 4161100,
        Op::UnsetField => 4161100,
        _ => 5787801,
    }
}

fn unknown_arg_code(op: Op) -> i32 {
    match op {
        Op::Trim | Op::LTrim | Op::RTrim => 50694,
        Op::ReplaceOne | Op::ReplaceAll => 51750,
        Op::Zip => 34464,
        Op::SortArray => 2942501,
        Op::Convert => 34467,
        Op::DateToString => 18534,
        Op::DateFromString => 40541,
        Op::GetField => 3041701,
        Op::SetField | Op::UnsetField => 4161101,
        Op::FirstN | Op::LastN | Op::MaxN | Op::MinN => 5787901,
        _ => 40518,
    }
}

fn missing_arg_code(op: Op) -> i32 {
    match op {
        Op::Trim | Op::LTrim | Op::RTrim => 50695,
        Op::ReplaceOne | Op::ReplaceAll => 51748,
        Op::Zip => 34465,
        Op::SortArray => 2942502,
        Op::Convert => 34469,
        Op::DateToString => 18628,
        Op::DateFromString => 40542,
        Op::GetField => 3041702,
        Op::SetField | Op::UnsetField => 4161102,
        Op::FirstN | Op::LastN | Op::MaxN | Op::MinN => 5787906,
        _ => 40539,
    }
}

fn validate_sort_by(spec: &Bson) -> MongoResult<()> {
    match spec {
        Bson::Document(d) if !d.is_empty() => Ok(()),
        Bson::Int32(1) | Bson::Int32(-1) | Bson::Int64(1) | Bson::Int64(-1) => Ok(()),
        Bson::Double(f) if *f == 1.0 || *f == -1.0 => Ok(()),
        _ => Err(err(
            2942503,
            "$sortArray sortBy must be either 1, -1, or a non-empty sort specification",
        )),
    }
}

fn parse_cond(arg: &Bson) -> MongoResult<Node> {
    match arg {
        Bson::Document(d) => {
            let (mut i, mut t, mut e) = (None, None, None);
            for (k, v) in d {
                match k.as_str() {
                    "if" => i = Some(Expr::parse(v)?),
                    "then" => t = Some(Expr::parse(v)?),
                    "else" => e = Some(Expr::parse(v)?),
                    _ => return Err(err(17083, format!("Unrecognized parameter to $cond: {k}"))),
                }
            }
            let i = i.ok_or_else(|| err(17080, "Missing 'if' parameter to $cond"))?;
            let t = t.ok_or_else(|| err(17081, "Missing 'then' parameter to $cond"))?;
            let e = e.ok_or_else(|| err(17082, "Missing 'else' parameter to $cond"))?;
            Ok(Node::Cond(Box::new((i, t, e))))
        }
        _ => {
            let args = args_of(arg)?;
            if args.len() != 3 {
                return Err(err(
                    16020,
                    format!(
                        "Expression $cond takes exactly 3 arguments. {} were passed in.",
                        args.len()
                    ),
                ));
            }
            let mut it = args.into_iter();
            Ok(Node::Cond(Box::new((
                it.next().unwrap(),
                it.next().unwrap(),
                it.next().unwrap(),
            ))))
        }
    }
}

fn parse_switch(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(40060, "$switch requires an object as an argument"));
    };
    let mut branches = Vec::new();
    let mut default = None;
    for (k, v) in d {
        match k.as_str() {
            "branches" => {
                let Bson::Array(a) = v else {
                    return Err(err(40061, "$switch expected an array for 'branches'"));
                };
                for b in a {
                    let Bson::Document(bd) = b else {
                        return Err(err(40062, "$switch expected each branch to be an object"));
                    };
                    let (mut case, mut then) = (None, None);
                    for (bk, bv) in bd {
                        match bk.as_str() {
                            "case" => case = Some(Expr::parse(bv)?),
                            "then" => then = Some(Expr::parse(bv)?),
                            _ => {
                                return Err(err(
                                    40063,
                                    format!("$switch found an unknown argument to a branch: {bk}"),
                                ))
                            }
                        }
                    }
                    let case = case.ok_or_else(|| {
                        err(
                            40064,
                            "$switch requires each branch have a 'case' expression",
                        )
                    })?;
                    let then = then.ok_or_else(|| {
                        err(
                            40065,
                            "$switch requires each branch have a 'then' expression.",
                        )
                    })?;
                    branches.push((case, then));
                }
            }
            "default" => default = Some(boxed(Expr::parse(v)?)),
            _ => {
                return Err(err(
                    40067,
                    format!("$switch found an unknown argument: {k}"),
                ))
            }
        }
    }
    if branches.is_empty() {
        return Err(err(40068, "$switch requires at least one branch."));
    }
    Ok(Node::Switch(branches, default))
}

fn parse_let(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(16874, "$let only supports an object as its argument"));
    };
    let (mut vars, mut body) = (None, None);
    for (k, v) in d {
        match k.as_str() {
            "vars" => {
                let Bson::Document(vd) = v else {
                    return Err(err(10065, "invalid parameter: expected an object (vars)"));
                };
                let mut out = Vec::new();
                for (name, e) in vd {
                    validate_var_name(name)?;
                    out.push((name.clone(), Expr::parse(e)?));
                }
                vars = Some(out);
            }
            "in" => body = Some(Expr::parse(v)?),
            _ => return Err(err(16875, format!("Unrecognized parameter to $let: {k}"))),
        }
    }
    let vars = vars.ok_or_else(|| err(16876, "Missing 'vars' parameter to $let"))?;
    let body = body.ok_or_else(|| err(16877, "Missing 'in' parameter to $let"))?;
    Ok(Node::Let(vars, boxed(body)))
}

fn parse_as(v: Option<&Bson>, default: &str) -> MongoResult<String> {
    match v {
        None => Ok(default.to_string()),
        Some(Bson::String(s)) => {
            validate_var_name(s)?;
            Ok(s.clone())
        }
        Some(_) => Err(err(16866, "'as' must be a string")),
    }
}

fn parse_filter(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(
            28646,
            "$filter only supports an object as its argument",
        ));
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "input" | "as" | "cond" | "limit") {
            return Err(err(
                28647,
                format!("Unrecognized parameter to $filter: {k}"),
            ));
        }
    }
    let input = d
        .get("input")
        .ok_or_else(|| err(28648, "Missing 'input' parameter to $filter"))?;
    let cond = d
        .get("cond")
        .ok_or_else(|| err(28650, "Missing 'cond' parameter to $filter"))?;
    Ok(Node::Filter {
        input: boxed(Expr::parse(input)?),
        name: parse_as(d.get("as"), "this")?,
        cond: boxed(Expr::parse(cond)?),
        limit: d.get("limit").map(Expr::parse).transpose()?.map(boxed),
    })
}

fn parse_map(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(16878, "$map only supports an object as its argument"));
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "input" | "as" | "in") {
            return Err(err(16879, format!("Unrecognized parameter to $map: {k}")));
        }
    }
    let input = d
        .get("input")
        .ok_or_else(|| err(16880, "Missing 'input' parameter to $map"))?;
    let body = d
        .get("in")
        .ok_or_else(|| err(16882, "Missing 'in' parameter to $map"))?;
    Ok(Node::Map {
        input: boxed(Expr::parse(input)?),
        name: parse_as(d.get("as"), "this")?,
        body: boxed(Expr::parse(body)?),
    })
}

fn parse_reduce(arg: &Bson) -> MongoResult<Node> {
    let Bson::Document(d) = arg else {
        return Err(err(40075, "$reduce requires an object as an argument"));
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "input" | "initialValue" | "in") {
            return Err(err(
                40076,
                format!("$reduce found an unknown argument: {k}"),
            ));
        }
    }
    let input = d
        .get("input")
        .ok_or_else(|| err(40077, "$reduce requires 'input' to be specified"))?;
    let initial = d
        .get("initialValue")
        .ok_or_else(|| err(40078, "$reduce requires 'initialValue' to be specified"))?;
    let body = d
        .get("in")
        .ok_or_else(|| err(40079, "$reduce requires 'in' to be specified"))?;
    Ok(Node::Reduce {
        input: boxed(Expr::parse(input)?),
        initial: boxed(Expr::parse(initial)?),
        body: boxed(Expr::parse(body)?),
    })
}

fn parse_regex(op: Op, arg: &Bson) -> MongoResult<Node> {
    let name = op_name(op);
    let Bson::Document(d) = arg else {
        return Err(err(
            51103,
            format!(
                "{name} expects an object of named arguments but found: {}",
                type_name(arg)
            ),
        ));
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "input" | "regex" | "options") {
            return Err(err(31024, format!("{name} found an unknown argument: {k}")));
        }
    }
    let input = d
        .get("input")
        .ok_or_else(|| err(31022, format!("{name} requires 'input' parameter")))?;
    let regex = d
        .get("regex")
        .ok_or_else(|| err(31023, format!("{name} requires 'regex' parameter")))?;
    let regex_e = Expr::parse(regex)?;
    let options_e = d.get("options").map(Expr::parse).transpose()?;
    let constant = regex_e.as_constant().is_some()
        && options_e.as_ref().is_none_or(|o| o.as_constant().is_some());
    let regex = if constant {
        match build_regex(
            name,
            regex_e.as_constant().unwrap(),
            options_e.as_ref().and_then(|o| o.as_constant()),
        )? {
            Some(re) => RegexArg::Compiled(Box::new(re)),
            None => RegexArg::Dynamic(boxed(regex_e), options_e.map(boxed)),
        }
    } else {
        RegexArg::Dynamic(boxed(regex_e), options_e.map(boxed))
    };
    Ok(Node::Regex {
        op,
        input: boxed(Expr::parse(input)?),
        regex,
    })
}

/// Compiles a MongoDB regex (pattern string or BSON regex, plus options). `None` when the
/// pattern is null/missing (the operator then yields its null result).
fn build_regex(name: &str, pattern: &Bson, options: Option<&Bson>) -> MongoResult<Option<Regex>> {
    let (pat, mut flags) = match pattern {
        Bson::String(s) => (s.clone(), String::new()),
        Bson::RegularExpression(r) => (r.pattern.clone(), r.options.clone()),
        Bson::Null | Bson::Undefined => return Ok(None),
        other => {
            return Err(err(
                51105,
                format!(
                    "{name} needs 'regex' to be of type string or regex, found: {}",
                    type_name(other)
                ),
            ))
        }
    };
    match options {
        None | Some(Bson::Null) | Some(Bson::Undefined) => {}
        Some(Bson::String(o)) => {
            if !flags.is_empty() && !o.is_empty() {
                return Err(err(51107, format!("{name} found regex option(s) specified in both 'regex' and 'option' fields")));
            }
            flags.push_str(o);
        }
        Some(other) => {
            return Err(err(
                51106,
                format!(
                    "{name} needs 'options' to be of type string, found: {}",
                    type_name(other)
                ),
            ))
        }
    }
    compile_regex(&pat, &flags)
        .map(Some)
        .map_err(|e| err(51111, format!("Invalid Regex in {name}: {e}")))
}

/// Compiles a pattern with MongoDB regex option letters (i, m, s, x, u).
pub fn compile_regex(pattern: &str, options: &str) -> Result<Regex, String> {
    let mut prefix = String::new();
    for c in options.chars() {
        match c {
            'i' | 'm' | 's' | 'x' => prefix.push(c),
            'u' => {}
            other => return Err(format!("invalid flag in regex options: {other}")),
        }
    }
    let full = if prefix.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{prefix}){pattern}")
    };
    Regex::new(&full).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------
// Evaluation

struct Cx<'r, 'e> {
    root: &'r Document,
    vars: &'r Variables,
    /// Variables bound by `$let`, `$map`, `$filter`, `$reduce` (innermost last).
    locals: Vec<(&'e str, Bson)>,
}

const MISSING: Bson = Bson::Undefined;

fn is_nullish(v: &Bson) -> bool {
    matches!(v, Bson::Null | Bson::Undefined)
}

impl<'r, 'e> Cx<'r, 'e> {
    fn local(&self, name: &str) -> Option<&Bson> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    fn field(&self, path: &[String]) -> Bson {
        if !self.locals.is_empty() {
            if let Some(cur) = self.local("CURRENT") {
                return get_path(cur, path);
            }
        }
        get_path_doc(self.root, path)
    }

    fn var(&self, name: &str, path: &[String]) -> MongoResult<Bson> {
        if let Some(v) = self.local(name) {
            return Ok(get_path(v, path));
        }
        match name {
            "ROOT" => Ok(if path.is_empty() {
                Bson::Document(self.root.clone())
            } else {
                get_path_doc(self.root, path)
            }),
            "CURRENT" => Ok(if path.is_empty() {
                Bson::Document(self.root.clone())
            } else {
                get_path_doc(self.root, path)
            }),
            "REMOVE" => Ok(MISSING),
            "NOW" => Ok(get_path(&Bson::DateTime(self.vars.now()), path)),
            "CLUSTER_TIME" => {
                let now = self.vars.now().timestamp_millis();
                Ok(Bson::Timestamp(bson::Timestamp {
                    time: (now / 1000) as u32,
                    increment: 1,
                }))
            }
            "DESCEND" | "PRUNE" | "KEEP" => Ok(Bson::String(name.to_string())),
            _ => match self.vars.get(name) {
                Some(v) => Ok(get_path(v, path)),
                None => Err(err(17276, format!("Use of undefined variable: {name}"))),
            },
        }
    }
}

/// Reads a dotted path from a document the way aggregation field paths do: arrays along
/// the way are traversed and yield arrays of the values found. Missing → `Bson::Undefined`.
pub fn get_path_doc(d: &Document, path: &[String]) -> Bson {
    match path.split_first() {
        None => Bson::Document(d.clone()),
        Some((head, rest)) => match d.get(head) {
            None => MISSING,
            Some(v) => get_path(v, rest),
        },
    }
}

fn get_path(v: &Bson, path: &[String]) -> Bson {
    if path.is_empty() {
        return v.clone();
    }
    match v {
        Bson::Document(d) => get_path_doc(d, path),
        Bson::Array(a) => {
            let mut out = Vec::new();
            for e in a {
                if matches!(e, Bson::Document(_) | Bson::Array(_)) {
                    let r = get_path(e, path);
                    if !matches!(r, Bson::Undefined) {
                        out.push(r);
                    }
                }
            }
            Bson::Array(out)
        }
        _ => MISSING,
    }
}

impl Expr {
    fn ev<'e>(&'e self, cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
        match &self.0 {
            Node::Const(v) => Ok(v.clone()),
            Node::Field(p) => Ok(cx.field(p)),
            Node::Var(name, p) => cx.var(name, p),
            Node::Object(fields) => ev_object(fields, cx),
            Node::Array(items) => ev_array(items, cx),
            Node::Cond(c) => {
                if truthy(&c.0.ev(cx)?) {
                    c.1.ev(cx)
                } else {
                    c.2.ev(cx)
                }
            }
            Node::Switch(branches, default) => ev_switch(branches, default, cx),
            Node::Let(vars, body) => ev_let(vars, body, cx),
            Node::Filter {
                input,
                name,
                cond,
                limit,
            } => ev_filter(input, name, cond, limit, cx),
            Node::Map { input, name, body } => ev_map(input, name, body, cx),
            Node::Reduce {
                input,
                initial,
                body,
            } => ev_reduce(input, initial, body, cx),
            Node::Regex { op, input, regex } => eval_regex(*op, input, regex, cx),
            Node::Op(op, args) => self.eval_op(*op, args, cx),
            Node::Named(op, slots) => eval_named(*op, slots, cx),
        }
    }

    fn eval_op<'e>(&'e self, op: Op, args: &'e [Expr], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
        // Short-circuiting operators first; they must not evaluate every argument.
        match op {
            Op::And => {
                for a in args {
                    if !truthy(&a.ev(cx)?) {
                        return Ok(Bson::Boolean(false));
                    }
                }
                return Ok(Bson::Boolean(true));
            }
            Op::Or => {
                for a in args {
                    if truthy(&a.ev(cx)?) {
                        return Ok(Bson::Boolean(true));
                    }
                }
                return Ok(Bson::Boolean(false));
            }
            Op::IfNull => {
                let (last, rest) = args.split_last().unwrap();
                for a in rest {
                    let v = a.ev(cx)?;
                    if !is_nullish(&v) {
                        return Ok(v);
                    }
                }
                return last.ev(cx);
            }
            _ => {}
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(a.ev(cx)?);
        }
        eval_simple(op, vals, cx)
    }
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_object<'e>(fields: &'e [(String, Expr)], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    let mut out = Document::new();
    for (k, e) in fields {
        let v = e.ev(cx)?;
        if !matches!(v, Bson::Undefined) {
            out.insert(k.clone(), v);
        }
    }
    Ok(Bson::Document(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_array<'e>(items: &'e [Expr], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    let mut out = Vec::with_capacity(items.len());
    for e in items {
        match e.ev(cx)? {
            Bson::Undefined => out.push(Bson::Null),
            v => out.push(v),
        }
    }
    Ok(Bson::Array(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_switch<'e>(
    branches: &'e [(Expr, Expr)],
    default: &'e Option<Box<Expr>>,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    for (case, then) in branches {
        if truthy(&case.ev(cx)?) {
            return then.ev(cx);
        }
    }
    match default {
        Some(d) => d.ev(cx),
        None => Err(err(
            40066,
            "$switch could not find a matching branch for an input, and no default was specified.",
        )),
    }
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_let<'e>(
    vars: &'e [(String, Expr)],
    body: &'e Expr,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let mut vals = Vec::with_capacity(vars.len());
    for (n, e) in vars {
        vals.push((n.as_str(), e.ev(cx)?));
    }
    let depth = cx.locals.len();
    cx.locals.extend(vals);
    let r = body.ev(cx);
    cx.locals.truncate(depth);
    r
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_filter<'e>(
    input: &'e Expr,
    name: &'e str,
    cond: &'e Expr,
    limit: &'e Option<Box<Expr>>,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let input = input.ev(cx)?;
    let limit = match limit {
        None => None,
        Some(l) => match l.ev(cx)? {
            v if is_nullish(&v) => None,
            v => match as_int_exact(&v) {
                Some(n) if n >= 1 && n <= i32::MAX as i64 => Some(n as usize),
                Some(_) => return Err(err(327391, "$filter: limit must be greater than 0")),
                None => {
                    return Err(err(
                        327392,
                        format!(
                            "$filter: limit must be represented as a 32-bit integral value: {v}"
                        ),
                    ))
                }
            },
        },
    };
    let items = match input {
        Bson::Array(a) => a,
        v if is_nullish(&v) => return Ok(Bson::Null),
        v => {
            return Err(err(
                28651,
                format!("input to $filter must be an array not {}", type_name(&v)),
            ))
        }
    };
    let mut out = Vec::new();
    let depth = cx.locals.len();
    for item in items {
        cx.locals.push((name, item));
        let keep = cond.ev(cx).map(|v| truthy(&v));
        let item = cx.locals.pop().unwrap().1;
        if keep? {
            out.push(item);
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
        }
    }
    cx.locals.truncate(depth);
    Ok(Bson::Array(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_map<'e>(
    input: &'e Expr,
    name: &'e str,
    body: &'e Expr,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let items = match input.ev(cx)? {
        Bson::Array(a) => a,
        v if is_nullish(&v) => return Ok(Bson::Null),
        v => {
            return Err(err(
                16883,
                format!("input to $map must be an array not {}", type_name(&v)),
            ))
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        cx.locals.push((name, item));
        let r = body.ev(cx);
        cx.locals.pop();
        out.push(match r? {
            Bson::Undefined => Bson::Null,
            v => v,
        });
    }
    Ok(Bson::Array(out))
}

// Separate functions keep `ev`'s frame small: it is on the stack once per level of
// expression nesting.
#[inline(never)]
fn ev_reduce<'e>(
    input: &'e Expr,
    initial: &'e Expr,
    body: &'e Expr,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let items = match input.ev(cx)? {
        Bson::Array(a) => a,
        v if is_nullish(&v) => return Ok(Bson::Null),
        v => {
            return Err(err(
                40080,
                format!(
                    "$reduce requires that 'input' be an array, found: {}",
                    type_name(&v)
                ),
            ))
        }
    };
    let mut acc = initial.ev(cx)?;
    for item in items {
        cx.locals.push(("value", acc));
        cx.locals.push(("this", item));
        let r = body.ev(cx);
        cx.locals.pop();
        cx.locals.pop();
        acc = r?;
        // The accumulator feeds back into the body: without a bound,
        // `in: ["$$value"]` nests one level per element, past any stack.
        crate::depth::check_value_depth(&acc)?;
    }
    Ok(acc)
}

#[inline(never)]
fn eval_simple(op: Op, mut v: Vec<Bson>, cx: &mut Cx) -> MongoResult<Bson> {
    use Op::*;
    let name = op_name(op);
    match op {
        Add => arith_add(&v),
        Subtract => arith_subtract(&v[0], &v[1]),
        Multiply => arith_multiply(&v),
        Divide => arith_divide(&v[0], &v[1]),
        Mod => arith_mod(&v[0], &v[1]),
        Abs | Ceil | Floor | Sqrt | Exp | Ln | Log10 => unary_math(op, &v[0]),
        Round | Trunc => round_trunc(op, &v[0], v.get(1)),
        Pow => arith_pow(&v[0], &v[1]),
        Log => arith_log(&v[0], &v[1]),
        Eq | Ne | Gt | Gte | Lt | Lte | Cmp => {
            let o = compare_values(&v[0], &v[1]);
            Ok(match op {
                Eq => Bson::Boolean(o == Ordering::Equal),
                Ne => Bson::Boolean(o != Ordering::Equal),
                Gt => Bson::Boolean(o == Ordering::Greater),
                Gte => Bson::Boolean(o != Ordering::Less),
                Lt => Bson::Boolean(o == Ordering::Less),
                Lte => Bson::Boolean(o != Ordering::Greater),
                _ => Bson::Int32(o as i32),
            })
        }
        Not => Ok(Bson::Boolean(!truthy(&v[0]))),
        Concat => {
            let total = v.iter().try_fold(0usize, |n, x| match x {
                Bson::String(p) => n.checked_add(p.len()),
                _ => Some(n),
            });
            check_string_size(total)?;
            let mut s = String::new();
            for x in &v {
                match x {
                    Bson::String(p) => s.push_str(p),
                    x if is_nullish(x) => return Ok(Bson::Null),
                    x => {
                        return Err(err(
                            16702,
                            format!("$concat only supports strings, not {}", type_name(x)),
                        ))
                    }
                }
            }
            Ok(Bson::String(s))
        }
        SubstrBytes | SubstrCP => substr(op, &v[0], &v[1], &v[2]),
        ToLower | ToUpper => {
            let s = coerce_to_string(name, &v[0])?;
            Ok(Bson::String(if op == ToLower {
                s.to_ascii_lowercase()
            } else {
                s.to_ascii_uppercase()
            }))
        }
        StrLenBytes | StrLenCP => match &v[0] {
            Bson::String(s) => Ok(Bson::Int32(if op == StrLenBytes {
                s.len()
            } else {
                s.chars().count()
            } as i32)),
            x => Err(err(
                if op == StrLenBytes { 34473 } else { 34471 },
                format!(
                    "{name} requires a string argument, found: {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        Split => {
            let s = match &v[0] {
                Bson::String(s) => s,
                x if is_nullish(x) => return Ok(Bson::Null),
                x => {
                    return Err(err(
                        40085,
                        format!(
                            "$split requires an expression that evaluates to a string as a first argument, found: {}",
                            type_name(x)
                        ),
                    ))
                }
            };
            let sep = match &v[1] {
                Bson::String(s) => s,
                x if is_nullish(x) => return Ok(Bson::Null),
                x => {
                    return Err(err(
                        40086,
                        format!(
                            "$split requires an expression that evaluates to a string as a second argument, found: {}",
                            type_name(x)
                        ),
                    ))
                }
            };
            if sep.is_empty() {
                return Err(err(40087, "$split requires a non-empty separator"));
            }
            Ok(Bson::Array(
                s.split(sep.as_str())
                    .map(|p| Bson::String(p.to_string()))
                    .collect(),
            ))
        }
        IndexOfBytes | IndexOfCP => index_of_str(op, &v),
        Strcasecmp => {
            let a = coerce_to_string(name, &v[0])?.to_ascii_lowercase();
            let b = coerce_to_string(name, &v[1])?.to_ascii_lowercase();
            Ok(Bson::Int32(a.cmp(&b) as i32))
        }
        ArrayElemAt => {
            let arr = match &v[0] {
                Bson::Array(a) => a,
                x if is_nullish(x) => return Ok(Bson::Null),
                x => {
                    return Err(err(
                        28689,
                        format!(
                            "$arrayElemAt's first argument must be an array, but is {}",
                            type_name(x)
                        ),
                    ))
                }
            };
            if is_nullish(&v[1]) {
                return Ok(Bson::Null);
            }
            let Some(num) = num_of(&v[1]) else {
                return Err(err(
                    28690,
                    format!(
                        "$arrayElemAt's second argument must be a numeric value, but is {}",
                        type_name(&v[1])
                    ),
                ));
            };
            let Some(i) = as_int_exact(&v[1]).filter(|i| i32::try_from(*i).is_ok()) else {
                return Err(err(
                    28691,
                    format!("$arrayElemAt's second argument must be representable as a 32-bit integer: {}", num_to_bson(num)),
                ));
            };
            Ok(elem_at(arr, i))
        }
        First | Last => match &v[0] {
            Bson::Array(a) => {
                let e = if op == First { a.first() } else { a.last() };
                Ok(e.cloned().unwrap_or(MISSING))
            }
            x if is_nullish(x) => Ok(Bson::Null),
            x => Err(err(
                28689,
                format!(
                    "{name}'s argument must be an array, but is {}",
                    type_name(x)
                ),
            )),
        },
        Size => match &v[0] {
            Bson::Array(a) => Ok(Bson::Int32(a.len() as i32)),
            x => Err(err(
                17124,
                format!(
                    "The argument to $size must be an array. Type of argument was: {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        Slice => slice(&v),
        ConcatArrays => {
            let mut out = Vec::new();
            for x in v {
                match x {
                    Bson::Array(a) => out.extend(a),
                    x if is_nullish(&x) => return Ok(Bson::Null),
                    x => {
                        return Err(err(
                            28664,
                            format!("$concatArrays only supports arrays, not {}", type_name(&x)),
                        ))
                    }
                }
            }
            Ok(Bson::Array(out))
        }
        In => match &v[1] {
            Bson::Array(a) => Ok(Bson::Boolean(a.iter().any(|e| values_eq(e, &v[0])))),
            x => Err(err(
                40081,
                format!(
                    "$in requires an array as a second argument, found: {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        IndexOfArray => index_of_array(&v),
        IsArray => Ok(Bson::Boolean(matches!(v[0], Bson::Array(_)))),
        Range => range(&v),
        ReverseArray => match v.pop().unwrap() {
            Bson::Array(mut a) => {
                a.reverse();
                Ok(Bson::Array(a))
            }
            x if is_nullish(&x) => Ok(Bson::Null),
            x => Err(err(
                34435,
                format!(
                    "The argument to $reverseArray must be an array, but was of type: {}",
                    type_name(&x)
                ),
            )),
        },
        ArrayToObject => array_to_object(v.pop().unwrap()),
        ObjectToArray => match v.pop().unwrap() {
            Bson::Document(d) => Ok(Bson::Array(
                d.into_iter()
                    .map(|(k, val)| Bson::Document(bson::doc! {"k": k, "v": val}))
                    .collect(),
            )),
            x if is_nullish(&x) => Ok(Bson::Null),
            x => Err(err(
                40390,
                format!(
                    "$objectToArray requires a document input, found: {}",
                    type_name(&x)
                ),
            )),
        },
        SetUnion | SetIntersection | SetDifference | SetEquals | SetIsSubset => set_op(op, v),
        AllElementsTrue | AnyElementTrue => match &v[0] {
            Bson::Array(a) => Ok(Bson::Boolean(if op == AllElementsTrue {
                a.iter().all(truthy)
            } else {
                a.iter().any(truthy)
            })),
            x => Err(err(
                if op == AllElementsTrue { 17040 } else { 17041 },
                format!(
                    "{name}'s argument must be an array, but is {}",
                    type_name_or_missing(x)
                ),
            )),
        },
        Type => Ok(Bson::String(type_name_or_missing(&v[0]).to_string())),
        ToString | ToInt | ToLong | ToDouble | ToDecimal | ToBool | ToObjectId | ToDate => {
            let target = match op {
                ToString => ElementType::String,
                ToInt => ElementType::Int32,
                ToLong => ElementType::Int64,
                ToDouble => ElementType::Double,
                ToDecimal => ElementType::Decimal128,
                ToBool => ElementType::Boolean,
                ToObjectId => ElementType::ObjectId,
                _ => ElementType::DateTime,
            };
            let x = v.pop().unwrap();
            if is_nullish(&x) {
                return Ok(Bson::Null);
            }
            convert(x, target)
        }
        IsNumber => Ok(Bson::Boolean(num_of(&v[0]).is_some())),
        MergeObjects => {
            let mut out = Document::new();
            for (i, x) in v.into_iter().enumerate() {
                match x {
                    Bson::Document(d) => {
                        for (k, val) in d {
                            out.insert(k, val);
                        }
                    }
                    x if is_nullish(&x) => {}
                    x => {
                        return Err(err(
                            40400,
                            format!(
                                "$mergeObjects requires object inputs, but input {} is of type {}",
                                i,
                                type_name(&x)
                            ),
                        ))
                    }
                }
            }
            Ok(Bson::Document(out))
        }
        Sum | Avg | Min | Max | StdDevPop | StdDevSamp => {
            let items: Vec<Bson> = if v.len() == 1 {
                match v.pop().unwrap() {
                    Bson::Array(a) => a,
                    x => vec![x],
                }
            } else {
                v
            };
            accumulate_values(op, items)
        }
        Rand => Ok(Bson::Double(rand::random::<f64>())),
        BsonSize => match &v[0] {
            Bson::Document(d) => {
                let mut buf = Vec::new();
                d.to_writer(&mut buf)
                    .map_err(|e| MongoError::internal(e.to_string()))?;
                Ok(Bson::Int32(buf.len() as i32))
            }
            x if is_nullish(x) => Ok(Bson::Null),
            x => Err(err(
                31393,
                format!(
                    "$bsonSize requires a document input, found: {}",
                    type_name(x)
                ),
            )),
        },
        BinarySize => match &v[0] {
            Bson::String(s) => Ok(Bson::Int32(s.len() as i32)),
            Bson::Binary(b) => Ok(Bson::Int32(b.bytes.len() as i32)),
            x if is_nullish(x) => Ok(Bson::Null),
            x => Err(err(
                51276,
                format!(
                    "$binarySize requires a string or BinData argument, found: {}",
                    type_name(x)
                ),
            )),
        },
        _ => {
            let _ = cx;
            Err(MongoError::internal(format!(
                "operator {name} evaluated positionally"
            )))
        }
    }
}

fn elem_at(arr: &[Bson], i: i64) -> Bson {
    let idx = if i < 0 { arr.len() as i64 + i } else { i };
    if idx < 0 || idx >= arr.len() as i64 {
        MISSING
    } else {
        arr[idx as usize].clone()
    }
}

/// Folds values the way `$sum`/`$avg`/`$min`/`$max`/`$stdDev*` do over an array.
fn accumulate_values(op: Op, items: Vec<Bson>) -> MongoResult<Bson> {
    match op {
        Op::Sum => {
            let mut acc = Num::I(0);
            for x in &items {
                if let Some(n) = num_of(x) {
                    acc = num_add(acc, n);
                }
            }
            Ok(num_to_bson(acc))
        }
        Op::Avg => {
            let mut acc = Num::I(0);
            let mut count = 0i64;
            for x in &items {
                if let Some(n) = num_of(x) {
                    acc = num_add(acc, n);
                    count += 1;
                }
            }
            if count == 0 {
                return Ok(Bson::Null);
            }
            Ok(match acc {
                Num::M(d) => Bson::Decimal128(d.div(&Dec::from_i64(count)).to_d128()),
                n => Bson::Double(num_f64(n) / count as f64),
            })
        }
        Op::Min | Op::Max => {
            let mut best: Option<Bson> = None;
            for x in items {
                if is_nullish(&x) {
                    continue;
                }
                best = match best {
                    None => Some(x),
                    Some(b) => {
                        let o = compare_values(&x, &b);
                        if (op == Op::Min && o == Ordering::Less)
                            || (op == Op::Max && o == Ordering::Greater)
                        {
                            Some(x)
                        } else {
                            Some(b)
                        }
                    }
                };
            }
            Ok(best.unwrap_or(Bson::Null))
        }
        _ => {
            let xs: Vec<f64> = items.iter().filter_map(num_of).map(num_f64).collect();
            Ok(std_dev(&xs, op == Op::StdDevSamp))
        }
    }
}

/// Population or sample standard deviation; null when undefined.
pub(crate) fn std_dev(xs: &[f64], sample: bool) -> Bson {
    let n = xs.len();
    if n == 0 || (sample && n < 2) {
        return Bson::Null;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let ss: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
    let denom = if sample { (n - 1) as f64 } else { n as f64 };
    Bson::Double((ss / denom).sqrt())
}

// ---------------------------------------------------------------------------------------
// Numbers

#[derive(Clone, Copy, Debug)]
pub(crate) enum Num {
    I(i32),
    L(i64),
    D(f64),
    M(Dec),
}

pub(crate) fn num_of(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(Num::I(*i)),
        Bson::Int64(i) => Some(Num::L(*i)),
        Bson::Double(d) => Some(Num::D(*d)),
        Bson::Decimal128(d) => Some(Num::M(Dec::from_d128(d))),
        _ => None,
    }
}

pub(crate) fn num_to_bson(n: Num) -> Bson {
    match n {
        Num::I(i) => Bson::Int32(i),
        Num::L(i) => Bson::Int64(i),
        Num::D(d) => Bson::Double(d),
        Num::M(d) => Bson::Decimal128(d.to_d128()),
    }
}

pub(crate) fn num_f64(n: Num) -> f64 {
    match n {
        Num::I(i) => i as f64,
        Num::L(i) => i as f64,
        Num::D(d) => d,
        Num::M(d) => d.to_f64(),
    }
}

fn num_dec(n: Num) -> Dec {
    match n {
        Num::I(i) => Dec::from_i64(i as i64),
        Num::L(i) => Dec::from_i64(i),
        Num::D(d) => Dec::from_f64(d),
        Num::M(d) => d,
    }
}

fn num_i64(n: Num) -> Option<i64> {
    match n {
        Num::I(i) => Some(i as i64),
        Num::L(i) => Some(i),
        _ => None,
    }
}

/// The integer value of a numeric that holds one exactly (2.0 yes, 2.5 no).
pub(crate) fn as_int_exact(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        Bson::Decimal128(d) => Dec::from_d128(d).to_i64_exact(),
        _ => None,
    }
}

pub(crate) fn num_add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::M(_), _) | (_, Num::M(_)) => Num::M(num_dec(a).add(&num_dec(b))),
        (Num::D(_), _) | (_, Num::D(_)) => Num::D(num_f64(a) + num_f64(b)),
        (Num::I(x), Num::I(y)) => match x.checked_add(y) {
            Some(s) => Num::I(s),
            None => Num::L(x as i64 + y as i64),
        },
        _ => {
            let (x, y) = (num_i64(a).unwrap(), num_i64(b).unwrap());
            match x.checked_add(y) {
                Some(s) => Num::L(s),
                None => Num::D(x as f64 + y as f64),
            }
        }
    }
}

fn num_sub(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::M(_), _) | (_, Num::M(_)) => Num::M(num_dec(a).sub(&num_dec(b))),
        (Num::D(_), _) | (_, Num::D(_)) => Num::D(num_f64(a) - num_f64(b)),
        (Num::I(x), Num::I(y)) => match x.checked_sub(y) {
            Some(s) => Num::I(s),
            None => Num::L(x as i64 - y as i64),
        },
        _ => {
            let (x, y) = (num_i64(a).unwrap(), num_i64(b).unwrap());
            match x.checked_sub(y) {
                Some(s) => Num::L(s),
                None => Num::D(x as f64 - y as f64),
            }
        }
    }
}

fn num_mul(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::M(_), _) | (_, Num::M(_)) => Num::M(num_dec(a).mul(&num_dec(b))),
        (Num::D(_), _) | (_, Num::D(_)) => Num::D(num_f64(a) * num_f64(b)),
        (Num::I(x), Num::I(y)) => match x.checked_mul(y) {
            Some(s) => Num::I(s),
            None => Num::L(x as i64 * y as i64),
        },
        _ => {
            let (x, y) = (num_i64(a).unwrap(), num_i64(b).unwrap());
            match x.checked_mul(y) {
                Some(s) => Num::L(s),
                None => Num::D(x as f64 * y as f64),
            }
        }
    }
}

fn arith_add(v: &[Bson]) -> MongoResult<Bson> {
    let mut acc = Num::I(0);
    let mut date: Option<i64> = None;
    let mut saw_null = false;
    for x in v {
        match x {
            Bson::DateTime(d) => {
                if date.is_some() {
                    return Err(err(16612, "only one date allowed in an $add expression"));
                }
                date = Some(d.timestamp_millis());
            }
            x if is_nullish(x) => saw_null = true,
            x => match num_of(x) {
                Some(n) => acc = num_add(acc, n),
                None => {
                    return Err(err(
                        16554,
                        format!(
                            "$add only supports numeric or date types, not {}",
                            type_name(x)
                        ),
                    ))
                }
            },
        }
    }
    if saw_null {
        return Ok(Bson::Null);
    }
    match date {
        Some(ms) => {
            let delta = match acc {
                Num::I(i) => i as i64,
                Num::L(l) => l,
                n => num_f64(n).round() as i64,
            };
            Ok(Bson::DateTime(DateTime::from_millis(
                ms.wrapping_add(delta),
            )))
        }
        None => Ok(num_to_bson(acc)),
    }
}

fn arith_subtract(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    match (a, b) {
        (Bson::DateTime(x), Bson::DateTime(y)) => Ok(Bson::Int64(
            x.timestamp_millis().wrapping_sub(y.timestamp_millis()),
        )),
        (Bson::DateTime(x), n) if num_of(n).is_some() => {
            let delta = match num_of(n).unwrap() {
                Num::I(i) => i as i64,
                Num::L(l) => l,
                n => num_f64(n).round() as i64,
            };
            Ok(Bson::DateTime(DateTime::from_millis(
                x.timestamp_millis().wrapping_sub(delta),
            )))
        }
        _ => match (num_of(a), num_of(b)) {
            (Some(x), Some(y)) => Ok(num_to_bson(num_sub(x, y))),
            _ => Err(err(
                16556,
                format!("can't $subtract {} from {}", type_name(b), type_name(a)),
            )),
        },
    }
}

fn arith_multiply(v: &[Bson]) -> MongoResult<Bson> {
    let mut acc = Num::I(1);
    let mut saw_null = false;
    for x in v {
        if is_nullish(x) {
            saw_null = true;
            continue;
        }
        match num_of(x) {
            Some(n) => acc = num_mul(acc, n),
            None => {
                return Err(err(
                    16555,
                    format!(
                        "$multiply only supports numeric types, not {}",
                        type_name(x)
                    ),
                ))
            }
        }
    }
    Ok(if saw_null {
        Bson::Null
    } else {
        num_to_bson(acc)
    })
}

fn arith_divide(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let (Some(x), Some(y)) = (num_of(a), num_of(b)) else {
        return Err(err(
            16609,
            format!(
                "$divide only supports numeric types, not {} and {}",
                type_name(a),
                type_name(b)
            ),
        ));
    };
    let zero = match y {
        Num::M(d) => d.is_zero(),
        n => num_f64(n) == 0.0,
    };
    if zero {
        return Err(MongoError::bad_value("can't $divide by zero"));
    }
    Ok(match (x, y) {
        (Num::M(_), _) | (_, Num::M(_)) => Bson::Decimal128(num_dec(x).div(&num_dec(y)).to_d128()),
        _ => Bson::Double(num_f64(x) / num_f64(y)),
    })
}

fn arith_mod(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let (Some(x), Some(y)) = (num_of(a), num_of(b)) else {
        return Err(err(
            16611,
            format!(
                "$mod only supports numeric types, not {} and {}",
                type_name(a),
                type_name(b)
            ),
        ));
    };
    let zero = match y {
        Num::M(d) => d.is_zero(),
        n => num_f64(n) == 0.0,
    };
    if zero && !matches!((x, y), (Num::D(_), _) | (_, Num::D(_))) {
        return Err(err(16610, "can't $mod by zero"));
    }
    Ok(match (x, y) {
        (Num::M(_), _) | (_, Num::M(_)) => Bson::Decimal128(num_dec(x).rem(&num_dec(y)).to_d128()),
        (Num::D(_), _) | (_, Num::D(_)) => Bson::Double(num_f64(x) % num_f64(y)),
        (Num::I(p), Num::I(q)) => Bson::Int32(p.checked_rem(q).unwrap_or(0)),
        _ => Bson::Int64(
            num_i64(x)
                .unwrap()
                .checked_rem(num_i64(y).unwrap())
                .unwrap_or(0),
        ),
    })
}

fn unary_math(op: Op, v: &Bson) -> MongoResult<Bson> {
    if is_nullish(v) {
        return Ok(Bson::Null);
    }
    let name = op_name(op);
    let Some(n) = num_of(v) else {
        let code = match op {
            Op::Abs => 28765,
            Op::Ceil | Op::Floor => 28765,
            Op::Sqrt => 28765,
            Op::Exp => 28765,
            Op::Ln => 28765,
            _ => 28765,
        };
        return Err(err(
            code,
            format!("{name} only supports numeric types, not {}", type_name(v)),
        ));
    };
    let is_nan = matches!(n, Num::D(d) if d.is_nan()) || matches!(n, Num::M(d) if d.is_nan());
    if is_nan && !matches!(op, Op::Abs | Op::Ceil | Op::Floor) {
        return Ok(num_to_bson(n));
    }
    let positive_check = |code: i32, allow_zero: bool| -> MongoResult<()> {
        let f = num_f64(n);
        if f < 0.0 || (!allow_zero && f == 0.0) {
            let what = if allow_zero {
                "greater than or equal to 0"
            } else {
                "a positive number"
            };
            return Err(err(
                code,
                format!(
                    "{name}'s argument must be {what}, but is {}",
                    num_to_bson(n)
                ),
            ));
        }
        Ok(())
    };
    Ok(match op {
        Op::Abs => match n {
            Num::I(i) => match i.checked_abs() {
                Some(a) => Bson::Int32(a),
                None => Bson::Int64((i as i64).abs()),
            },
            Num::L(l) => match l.checked_abs() {
                Some(a) => Bson::Int64(a),
                None => return Err(err(28680, "can't take $abs of long long min")),
            },
            Num::D(d) => Bson::Double(d.abs()),
            Num::M(d) => Bson::Decimal128(Dec { neg: false, ..d }.to_d128()),
        },
        Op::Ceil | Op::Floor => match n {
            Num::I(_) | Num::L(_) => num_to_bson(n),
            Num::D(d) => Bson::Double(if op == Op::Ceil { d.ceil() } else { d.floor() }),
            Num::M(d) => {
                let mode = if op == Op::Ceil {
                    Rounding::Ceil
                } else {
                    Rounding::Floor
                };
                Bson::Decimal128(d.round(0, mode).to_d128())
            }
        },
        Op::Sqrt => {
            positive_check(28714, true)?;
            float_result(n, num_f64(n).sqrt())
        }
        Op::Exp => float_result(n, num_f64(n).exp()),
        Op::Ln => {
            positive_check(28766, false)?;
            float_result(n, num_f64(n).ln())
        }
        Op::Log10 => {
            positive_check(28761, false)?;
            float_result(n, num_f64(n).log10())
        }
        _ => unreachable!(),
    })
}

fn float_result(input: Num, f: f64) -> Bson {
    match input {
        Num::M(_) => Bson::Decimal128(Dec::from_f64(f).to_d128()),
        _ => Bson::Double(f),
    }
}

fn arith_log(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let Some(x) = num_of(a) else {
        return Err(err(
            28756,
            format!("$log's argument must be numeric, not {}", type_name(a)),
        ));
    };
    let Some(base) = num_of(b) else {
        return Err(err(
            28757,
            format!("$log's base must be numeric, not {}", type_name(b)),
        ));
    };
    let (xf, bf) = (num_f64(x), num_f64(base));
    if xf <= 0.0 {
        return Err(err(
            28758,
            format!(
                "$log's argument must be a positive number, but is {}",
                num_to_bson(x)
            ),
        ));
    }
    if bf <= 0.0 || bf == 1.0 {
        return Err(err(
            28759,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                num_to_bson(base)
            ),
        ));
    }
    let r = xf.ln() / bf.ln();
    Ok(match (x, base) {
        (Num::M(_), _) | (_, Num::M(_)) => Bson::Decimal128(Dec::from_f64(r).to_d128()),
        _ => Bson::Double(r),
    })
}

fn arith_pow(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    if is_nullish(a) || is_nullish(b) {
        return Ok(Bson::Null);
    }
    let Some(x) = num_of(a) else {
        return Err(err(
            28762,
            format!("$pow's base must be numeric, not {}", type_name(a)),
        ));
    };
    let Some(y) = num_of(b) else {
        return Err(err(
            28763,
            format!("$pow's exponent must be numeric, not {}", type_name(b)),
        ));
    };
    let (xf, yf) = (num_f64(x), num_f64(y));
    if xf == 0.0 && yf < 0.0 {
        return Err(err(
            28764,
            "$pow cannot take a base of 0 and a negative exponent",
        ));
    }
    match (x, y) {
        (Num::M(_), _) | (_, Num::M(_)) => {
            Ok(Bson::Decimal128(Dec::from_f64(xf.powf(yf)).to_d128()))
        }
        (Num::D(_), _) | (_, Num::D(_)) => Ok(Bson::Double(xf.powf(yf))),
        _ => {
            let (base, exp) = (num_i64(x).unwrap(), num_i64(y).unwrap());
            let both_int = matches!((x, y), (Num::I(_), Num::I(_)));
            if exp < 0 {
                return Ok(match base {
                    1 => num_to_bson(if both_int { Num::I(1) } else { Num::L(1) }),
                    -1 => {
                        let r = if exp % 2 == 0 { 1 } else { -1 };
                        num_to_bson(if both_int {
                            Num::I(r)
                        } else {
                            Num::L(r as i64)
                        })
                    }
                    _ => Bson::Double(xf.powf(yf)),
                });
            }
            let r = u32::try_from(exp).ok().and_then(|e| base.checked_pow(e));
            Ok(match r {
                Some(r) if both_int && i32::try_from(r).is_ok() => Bson::Int32(r as i32),
                Some(r) => Bson::Int64(r),
                None => Bson::Double(xf.powf(yf)),
            })
        }
    }
}

fn round_trunc(op: Op, v: &Bson, place: Option<&Bson>) -> MongoResult<Bson> {
    let name = op_name(op);
    if is_nullish(v) || place.is_some_and(is_nullish) {
        return Ok(Bson::Null);
    }
    let place = match place {
        None => 0,
        Some(p) => match as_int_exact(p) {
            Some(p) if (-20..=100).contains(&p) => p as i32,
            _ => {
                return Err(err(
                    51083,
                    format!(
                        "cannot apply {name} with precision value {p} value must be in [-20, 100]"
                    ),
                ))
            }
        },
    };
    let Some(n) = num_of(v) else {
        return Err(err(
            51081,
            format!("{name} only supports numeric types, not {}", type_name(v)),
        ));
    };
    let mode = if op == Op::Round {
        Rounding::HalfEven
    } else {
        Rounding::Trunc
    };
    Ok(match n {
        Num::I(_) | Num::L(_) if place >= 0 => num_to_bson(n),
        Num::I(i) => {
            let r = Dec::from_i64(i as i64)
                .round(place, mode)
                .to_i64_exact()
                .unwrap_or(0);
            match i32::try_from(r) {
                Ok(r) => Bson::Int32(r),
                Err(_) => Bson::Int64(r),
            }
        }
        Num::L(l) => match Dec::from_i64(l).round(place, mode).to_i64_exact() {
            Some(r) => Bson::Int64(r),
            None => {
                return Err(err(
                    51080,
                    format!("invalid conversion from Decimal128 result in {name}"),
                ))
            }
        },
        Num::D(d) => {
            if !d.is_finite() {
                Bson::Double(d)
            } else {
                Bson::Double(Dec::from_f64(d).round(place, mode).to_f64())
            }
        }
        Num::M(d) => Bson::Decimal128(d.round(place, mode).to_d128()),
    })
}

// ---------------------------------------------------------------------------------------
// Decimal128 arithmetic (34 significant digits, round half to even).

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Dec {
    neg: bool,
    coef: u128,
    exp: i32,
    /// 0 finite, 1 infinity, 2 NaN.
    special: u8,
}

#[derive(Clone, Copy, PartialEq)]
enum Rounding {
    HalfEven,
    Trunc,
    Ceil,
    Floor,
}

const DEC_MAX_COEF: u128 = 10u128.pow(34) - 1;
const DEC_NAN: Dec = Dec {
    neg: false,
    coef: 0,
    exp: 0,
    special: 2,
};

fn pow10(k: u32) -> Option<u128> {
    10u128.checked_pow(k)
}

fn digits(mut c: u128) -> u32 {
    let mut n = 1;
    while c >= 10 {
        c /= 10;
        n += 1;
    }
    n
}

/// Drops `k` low digits of `c` with the given rounding; `neg` is the sign for ceil/floor.
fn drop_digits(c: u128, k: u32, mode: Rounding, neg: bool) -> u128 {
    if k == 0 {
        return c;
    }
    let Some(p) = pow10(k) else {
        return match mode {
            Rounding::Ceil if !neg && c != 0 => 1,
            Rounding::Floor if neg && c != 0 => 1,
            _ => 0,
        };
    };
    let (q, r) = (c / p, c % p);
    let up = match mode {
        Rounding::HalfEven => {
            let half = p / 2;
            r > half || (r == half && q % 2 == 1)
        }
        Rounding::Trunc => false,
        Rounding::Ceil => !neg && r != 0,
        Rounding::Floor => neg && r != 0,
    };
    if up {
        q + 1
    } else {
        q
    }
}

impl Dec {
    /// Decodes the BID bits directly (shared with the comparison order), no string round trip.
    pub(crate) fn from_d128(d: &Decimal128) -> Dec {
        match crate::order::decode_decimal(d) {
            crate::order::DecimalParts::NaN => DEC_NAN,
            crate::order::DecimalParts::Infinity { neg } => Dec {
                neg,
                coef: 0,
                exp: 0,
                special: 1,
            },
            crate::order::DecimalParts::Finite { neg, coef, exp } => Dec::finite(neg, coef, exp),
        }
    }

    fn finite(neg: bool, coef: u128, exp: i32) -> Dec {
        Dec {
            neg,
            coef,
            exp,
            special: 0,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Dec> {
        let s = s.trim();
        let (neg, body) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let lower = body.to_ascii_lowercase();
        if lower == "nan" {
            return Some(DEC_NAN);
        }
        if lower == "inf" || lower == "infinity" {
            return Some(Dec {
                neg,
                coef: 0,
                exp: 0,
                special: 1,
            });
        }
        let (mant, exp_part) = match lower.find('e') {
            Some(i) => (&lower[..i], Some(&lower[i + 1..])),
            None => (lower.as_str(), None),
        };
        let mut exp: i64 = match exp_part {
            Some(e) => e.parse().ok()?,
            None => 0,
        };
        let mut coef: u128 = 0;
        let mut seen_digit = false;
        let mut seen_dot = false;
        let mut dropped = 0i64;
        let mut tail: Vec<u8> = Vec::new();
        for ch in mant.bytes() {
            match ch {
                b'0'..=b'9' => {
                    seen_digit = true;
                    if coef <= DEC_MAX_COEF / 10 * 10 && coef < 10u128.pow(37) {
                        coef = coef * 10 + (ch - b'0') as u128;
                        if seen_dot {
                            exp -= 1;
                        }
                    } else {
                        tail.push(ch);
                        if !seen_dot {
                            dropped += 1;
                        }
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => return None,
            }
        }
        if !seen_digit {
            return None;
        }
        exp += dropped;
        if !tail.is_empty() && tail[0] >= b'5' {
            coef += 1;
        }
        let exp = exp.clamp(-100_000, 100_000) as i32;
        Some(Dec::finite(neg, coef, exp).normalize(Rounding::HalfEven))
    }

    fn normalize(mut self, mode: Rounding) -> Dec {
        if self.special != 0 {
            return self;
        }
        if self.coef > DEC_MAX_COEF {
            let k = digits(self.coef) - 34;
            self.coef = drop_digits(self.coef, k, mode, self.neg);
            self.exp += k as i32;
            if self.coef > DEC_MAX_COEF {
                self.coef /= 10;
                self.exp += 1;
            }
        }
        if self.exp < -6176 {
            let k = (-6176 - self.exp) as u32;
            self.coef = drop_digits(self.coef, k, mode, self.neg);
            self.exp = -6176;
        }
        while self.exp > 6111 && self.coef != 0 && self.coef * 10 <= DEC_MAX_COEF {
            self.coef *= 10;
            self.exp -= 1;
        }
        if self.exp > 6111 {
            if self.coef == 0 {
                self.exp = 6111;
            } else {
                return Dec {
                    neg: self.neg,
                    coef: 0,
                    exp: 0,
                    special: 1,
                };
            }
        }
        self
    }

    pub(crate) fn to_d128(self) -> Decimal128 {
        let s = match self.special {
            2 => "NaN".to_string(),
            1 => if self.neg { "-Infinity" } else { "Infinity" }.to_string(),
            _ => {
                let d = self.normalize(Rounding::HalfEven);
                if d.special != 0 {
                    return d.to_d128();
                }
                format!("{}{}E{}", if d.neg { "-" } else { "" }, d.coef, d.exp)
            }
        };
        s.parse().unwrap_or_else(|_| "NaN".parse().unwrap())
    }

    pub(crate) fn from_i64(i: i64) -> Dec {
        Dec::finite(i < 0, i.unsigned_abs() as u128, 0)
    }

    /// A double as MongoDB converts it: rounded to 15 significant digits.
    pub(crate) fn from_f64(f: f64) -> Dec {
        if f.is_nan() {
            return DEC_NAN;
        }
        if f.is_infinite() {
            return Dec {
                neg: f < 0.0,
                coef: 0,
                exp: 0,
                special: 1,
            };
        }
        if f == 0.0 {
            return Dec::finite(f.is_sign_negative(), 0, 0);
        }
        Dec::parse(&format!("{:.14e}", f)).unwrap_or(DEC_NAN)
    }

    pub(crate) fn to_f64(self) -> f64 {
        match self.special {
            2 => f64::NAN,
            1 => {
                if self.neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            _ => format!(
                "{}{}e{}",
                if self.neg { "-" } else { "" },
                self.coef,
                self.exp
            )
            .parse()
            .unwrap_or(f64::NAN),
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.special == 0 && self.coef == 0
    }

    fn is_nan(&self) -> bool {
        self.special == 2
    }

    pub(crate) fn to_i64_exact(self) -> Option<i64> {
        if self.special != 0 {
            return None;
        }
        let mag: u128 = if self.exp >= 0 {
            self.coef.checked_mul(pow10(self.exp as u32)?)?
        } else {
            let p = pow10((-self.exp) as u32).unwrap_or(u128::MAX);
            if !self.coef.is_multiple_of(p) {
                return None;
            }
            self.coef / p
        };
        let v = i128::try_from(mag).ok()?;
        i64::try_from(if self.neg { -v } else { v }).ok()
    }

    /// Truncated integer value, if it fits an i64.
    pub(crate) fn to_i64_trunc(self) -> Option<i64> {
        self.round(0, Rounding::Trunc).to_i64_exact()
    }

    fn signed(&self) -> i128 {
        if self.neg {
            -(self.coef as i128)
        } else {
            self.coef as i128
        }
    }

    fn special_add(&self, o: &Dec) -> Option<Dec> {
        if self.is_nan() || o.is_nan() {
            return Some(DEC_NAN);
        }
        match (self.special, o.special) {
            (1, 1) if self.neg != o.neg => Some(DEC_NAN),
            (1, _) => Some(*self),
            (_, 1) => Some(*o),
            _ => None,
        }
    }

    /// Brings both operands to a common exponent, rounding the smaller one if needed.
    fn align(mut a: Dec, mut b: Dec) -> (Dec, Dec) {
        const CAP: u128 = 1_000_000_000_000_000_000_000_000_000_000_000_000; // 1e36
        if a.exp < b.exp {
            let (x, y) = Dec::align(b, a);
            return (y, x);
        }
        // now a.exp >= b.exp: scale a up, or b down.
        while a.exp > b.exp {
            if a.coef == 0 {
                a.exp = b.exp;
                break;
            }
            if a.coef * 10 < CAP {
                a.coef *= 10;
                a.exp -= 1;
            } else {
                let k = (a.exp - b.exp) as u32;
                b.coef = drop_digits(b.coef, k, Rounding::HalfEven, b.neg);
                b.exp = a.exp;
            }
        }
        (a, b)
    }

    pub(crate) fn add(&self, o: &Dec) -> Dec {
        if let Some(s) = self.special_add(o) {
            return s;
        }
        let (a, b) = Dec::align(*self, *o);
        let sum = a.signed() + b.signed();
        let neg = if sum == 0 { a.neg && b.neg } else { sum < 0 };
        Dec::finite(neg, sum.unsigned_abs(), a.exp).normalize(Rounding::HalfEven)
    }

    pub(crate) fn sub(&self, o: &Dec) -> Dec {
        let mut neg_o = *o;
        if neg_o.special != 2 {
            neg_o.neg = !neg_o.neg;
        }
        self.add(&neg_o)
    }

    pub(crate) fn mul(&self, o: &Dec) -> Dec {
        if self.is_nan() || o.is_nan() {
            return DEC_NAN;
        }
        let neg = self.neg != o.neg;
        if self.special == 1 || o.special == 1 {
            if self.is_zero() || o.is_zero() {
                return DEC_NAN;
            }
            return Dec {
                neg,
                coef: 0,
                exp: 0,
                special: 1,
            };
        }
        let (mut a, mut b) = (*self, *o);
        if a.coef.checked_mul(b.coef).is_none() {
            for x in [&mut a, &mut b] {
                let d = digits(x.coef);
                if d > 19 {
                    x.coef = drop_digits(x.coef, d - 19, Rounding::HalfEven, x.neg);
                    x.exp += (d - 19) as i32;
                }
            }
        }
        Dec::finite(neg, a.coef * b.coef, a.exp + b.exp).normalize(Rounding::HalfEven)
    }

    pub(crate) fn div(&self, o: &Dec) -> Dec {
        if self.is_nan() || o.is_nan() {
            return DEC_NAN;
        }
        let neg = self.neg != o.neg;
        match (self.special, o.special) {
            (1, 1) => return DEC_NAN,
            (1, _) => {
                return Dec {
                    neg,
                    coef: 0,
                    exp: 0,
                    special: 1,
                }
            }
            (_, 1) => return Dec::finite(neg, 0, 0),
            _ => {}
        }
        if o.coef == 0 {
            if self.coef == 0 {
                return DEC_NAN;
            }
            return Dec {
                neg,
                coef: 0,
                exp: 0,
                special: 1,
            };
        }
        let mut exp = self.exp - o.exp;
        let mut q = self.coef / o.coef;
        let mut r = self.coef % o.coef;
        while r != 0 && q <= DEC_MAX_COEF / 10 {
            r *= 10;
            q = q * 10 + r / o.coef;
            r %= o.coef;
            exp -= 1;
        }
        if r != 0 {
            // one more digit decides the rounding
            let next = (r * 10) / o.coef;
            let rest = (r * 10) % o.coef;
            if next > 5 || (next == 5 && (rest != 0 || q % 2 == 1)) {
                q += 1;
            }
        }
        Dec::finite(neg, q, exp).normalize(Rounding::HalfEven)
    }

    pub(crate) fn rem(&self, o: &Dec) -> Dec {
        if self.special != 0 || o.special != 0 || o.coef == 0 {
            return DEC_NAN;
        }
        let (a, b) = Dec::align(*self, *o);
        if a.exp != b.exp || b.coef == 0 {
            return Dec::from_f64(self.to_f64() % o.to_f64());
        }
        Dec::finite(self.neg, a.coef % b.coef, a.exp).normalize(Rounding::HalfEven)
    }

    /// Rounds to `place` digits after the decimal point (negative: before it).
    fn round(&self, place: i32, mode: Rounding) -> Dec {
        if self.special != 0 {
            return *self;
        }
        let target = -place;
        if self.exp >= target {
            return *self;
        }
        let k = (target - self.exp) as u32;
        Dec::finite(self.neg, drop_digits(self.coef, k, mode, self.neg), target)
            .normalize(Rounding::HalfEven)
    }
}

// ---------------------------------------------------------------------------------------
// Strings

/// MongoDB's type name as `$type` reports it.
pub fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

pub(crate) fn type_name_or_missing(v: &Bson) -> &'static str {
    match v {
        Bson::Undefined => "missing",
        v => type_name(v),
    }
}

/// Formats a double the way MongoDB's `$toString` does (shortest round-trip form).
pub(crate) fn fmt_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let a = d.abs();
    if !(1e-5..1e21).contains(&a) {
        let s = format!("{:e}", d);
        // Rust prints "1e21" / "1.5e-7"; MongoDB prints "1e+21" / "1.5e-07".
        if let Some((m, e)) = s.split_once('e') {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(x) => ('-', x),
                None => ('+', e),
            };
            let digits = if digits.len() < 2 {
                format!("0{digits}")
            } else {
                digits.to_string()
            };
            return format!("{m}e{sign}{digits}");
        }
        return s;
    }
    format!("{}", d)
}

fn coerce_to_string(name: &str, v: &Bson) -> MongoResult<String> {
    Ok(match v {
        Bson::String(s) | Bson::Symbol(s) => s.clone(),
        Bson::Null | Bson::Undefined => String::new(),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(d) => fmt_double(*d),
        Bson::Decimal128(d) => d.to_string(),
        Bson::DateTime(d) => format_date("%Y-%m-%dT%H:%M:%S.%LZ", d.timestamp_millis(), 0)?,
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        other => {
            return Err(err(
                16007,
                format!(
                    "can't convert from BSON type {} to String in {name}",
                    type_name(other)
                ),
            ))
        }
    })
}

fn substr(op: Op, s: &Bson, start: &Bson, len: &Bson) -> MongoResult<Bson> {
    let name = op_name(op);
    let s = coerce_to_string(name, s)?;
    if op == Op::SubstrBytes {
        let Some(st) = num_of(start) else {
            return Err(err(
                16034,
                format!(
                    "{name}: starting index must be a numeric type (is BSON type {})",
                    type_name(start)
                ),
            ));
        };
        let Some(ln) = num_of(len) else {
            return Err(err(
                16035,
                format!(
                    "{name}: length must be a numeric type (is BSON type {})",
                    type_name(len)
                ),
            ));
        };
        let st = num_f64(st);
        if st < 0.0 {
            return Err(err(
                50752,
                format!("{name}: starting index must be non-negative (got: {st})"),
            ));
        }
        let st = st as usize;
        let ln = num_f64(ln);
        if st >= s.len() {
            return Ok(Bson::String(String::new()));
        }
        let end = if ln < 0.0 {
            s.len()
        } else {
            st.saturating_add(ln as usize).min(s.len())
        };
        if !s.is_char_boundary(st) {
            return Err(err(
                28656,
                format!("{name}:  Invalid range, starting index is a UTF-8 continuation byte."),
            ));
        }
        if !s.is_char_boundary(end) {
            return Err(err(
                28657,
                format!(
                    "{name}:  Invalid range, ending index is in the middle of a UTF-8 character."
                ),
            ));
        }
        return Ok(Bson::String(s[st..end].to_string()));
    }
    let Some(st) = num_of(start) else {
        return Err(err(
            34450,
            format!(
                "{name}: starting index must be a numeric type (is BSON type {})",
                type_name(start)
            ),
        ));
    };
    let Some(st) = as_int_exact(start).filter(|i| i32::try_from(*i).is_ok()) else {
        return Err(err(
            34451,
            format!(
                "{name}: starting index cannot be represented as a 32-bit integral value: {}",
                num_to_bson(st)
            ),
        ));
    };
    let Some(ln) = num_of(len) else {
        return Err(err(
            34452,
            format!(
                "{name}: length must be a numeric type (is BSON type {})",
                type_name(len)
            ),
        ));
    };
    let Some(ln) = as_int_exact(len).filter(|i| i32::try_from(*i).is_ok()) else {
        return Err(err(
            34453,
            format!(
                "{name}: length cannot be represented as a 32-bit integral value: {}",
                num_to_bson(ln)
            ),
        ));
    };
    if st < 0 {
        return Err(err(
            34455,
            format!("{name}: the starting index must be nonnegative integer."),
        ));
    }
    if ln < 0 {
        return Err(err(
            34454,
            format!("{name}: length must be a nonnegative integer."),
        ));
    }
    Ok(Bson::String(
        s.chars().skip(st as usize).take(ln as usize).collect(),
    ))
}

fn index_of_str(op: Op, v: &[Bson]) -> MongoResult<Bson> {
    let name = op_name(op);
    let s = match &v[0] {
        Bson::String(s) => s,
        x if is_nullish(x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                40091,
                format!(
                    "{name} requires a string as the first argument, found: {}",
                    type_name(x)
                ),
            ))
        }
    };
    let sub = match &v[1] {
        Bson::String(s) => s,
        x => {
            return Err(err(
                40092,
                format!(
                    "{name} requires a string as the second argument, found: {}",
                    type_name_or_missing(x)
                ),
            ))
        }
    };
    let bound = |i: usize| -> MongoResult<Option<usize>> {
        match v.get(i) {
            None => Ok(None),
            Some(x) => match as_int_exact(x) {
                Some(n) if n >= 0 => Ok(Some(n as usize)),
                Some(_) => Err(err(40097, format!("{name} requires a nonnegative start index, found: {x}"))),
                None => Err(err(
                    40096,
                    format!("{name} requires an integral starting index, found a value of type: {}, with value: {x}", type_name(x)),
                )),
            },
        }
    };
    let start = bound(2)?.unwrap_or(0);
    if op == Op::IndexOfBytes {
        let hay = s.as_bytes();
        let end = bound(3)?.unwrap_or(hay.len()).min(hay.len());
        if start > end {
            return Ok(Bson::Int32(-1));
        }
        let needle = sub.as_bytes();
        if needle.is_empty() {
            return Ok(Bson::Int32(start as i32));
        }
        let pos = hay[start..end]
            .windows(needle.len())
            .position(|w| w == needle);
        return Ok(Bson::Int32(pos.map_or(-1, |p| (p + start) as i32)));
    }
    let hay: Vec<char> = s.chars().collect();
    let needle: Vec<char> = sub.chars().collect();
    let end = bound(3)?.unwrap_or(hay.len()).min(hay.len());
    if start > end {
        return Ok(Bson::Int32(-1));
    }
    if needle.is_empty() {
        return Ok(Bson::Int32(start as i32));
    }
    let pos = hay[start..end]
        .windows(needle.len())
        .position(|w| w == needle.as_slice());
    Ok(Bson::Int32(pos.map_or(-1, |p| (p + start) as i32)))
}

const WHITESPACE: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{b}', '\u{c}', '\r', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}',
    '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}',
    '\u{200a}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
];

#[inline(never)]
fn eval_regex<'e>(
    op: Op,
    input: &'e Expr,
    regex: &'e RegexArg,
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let name = op_name(op);
    let input = input.ev(cx)?;
    let dynamic;
    let re: Option<&Regex> = match regex {
        RegexArg::Compiled(r) => Some(r),
        RegexArg::Dynamic(p, o) => {
            let p = p.ev(cx)?;
            let o = match o {
                Some(o) => Some(o.ev(cx)?),
                None => None,
            };
            dynamic = build_regex(name, &p, o.as_ref())?;
            dynamic.as_ref()
        }
    };
    let s = match &input {
        Bson::String(s) => Some(s.as_str()),
        x if is_nullish(x) => None,
        x => {
            return Err(err(
                51104,
                format!(
                    "{name} needs 'input' to be of type string, found: {}",
                    type_name(x)
                ),
            ))
        }
    };
    let (Some(s), Some(re)) = (s, re) else {
        return Ok(match op {
            Op::RegexMatch => Bson::Boolean(false),
            Op::RegexFind => Bson::Null,
            _ => Bson::Array(vec![]),
        });
    };
    let found = |c: regex::Captures| -> Bson {
        let m = c.get(0).unwrap();
        let idx = s[..m.start()].chars().count() as i32;
        let captures: Vec<Bson> = (1..c.len())
            .map(|i| {
                c.get(i)
                    .map_or(Bson::Null, |g| Bson::String(g.as_str().to_string()))
            })
            .collect();
        Bson::Document(bson::doc! {"match": m.as_str(), "idx": idx, "captures": captures})
    };
    Ok(match op {
        Op::RegexMatch => Bson::Boolean(re.is_match(s)),
        Op::RegexFind => re.captures(s).map_or(Bson::Null, found),
        _ => Bson::Array(re.captures_iter(s).map(found).collect()),
    })
}

// ---------------------------------------------------------------------------------------
// Arrays and sets

fn slice(v: &[Bson]) -> MongoResult<Bson> {
    let arr = match &v[0] {
        Bson::Array(a) => a,
        x if is_nullish(x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                28724,
                format!(
                    "First argument to $slice must be an array, but is of type: {}",
                    type_name(x)
                ),
            ))
        }
    };
    if v[1..].iter().any(is_nullish) {
        return Ok(Bson::Null);
    }
    let int_arg = |i: usize, code: i32, what: &str| -> MongoResult<i64> {
        as_int_exact(&v[i])
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| {
                err(
                    code,
                    format!(
                        "{what} argument to $slice must be numeric, but is of type: {}",
                        type_name(&v[i])
                    ),
                )
            })
    };
    let len = arr.len() as i64;
    let (start, count) = if v.len() == 2 {
        let n = int_arg(1, 28725, "Second")?;
        if n >= 0 {
            (0, n.min(len))
        } else {
            ((len + n).max(0), (-n).min(len))
        }
    } else {
        let pos = int_arg(1, 28725, "Second")?;
        let n = int_arg(2, 28726, "Third")?;
        if n <= 0 {
            return Err(err(
                28729,
                format!("Third argument to $slice must be positive: {}", v[2]),
            ));
        }
        let start = if pos < 0 {
            (len + pos).max(0)
        } else {
            pos.min(len)
        };
        (start, n.min(len - start))
    };
    Ok(Bson::Array(
        arr[start as usize..(start + count) as usize].to_vec(),
    ))
}

fn index_of_array(v: &[Bson]) -> MongoResult<Bson> {
    let arr = match &v[0] {
        Bson::Array(a) => a,
        x if is_nullish(x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                40090,
                format!(
                    "$indexOfArray requires an array as a first argument, found: {}",
                    type_name(x)
                ),
            ))
        }
    };
    let bound = |i: usize| -> MongoResult<Option<usize>> {
        match v.get(i) {
            None => Ok(None),
            Some(x) => match as_int_exact(x) {
                Some(n) if n >= 0 => Ok(Some(n as usize)),
                Some(_) => Err(err(40097, format!("$indexOfArray requires a nonnegative start index, found: {x}"))),
                None => Err(err(
                    40096,
                    format!("$indexOfArray requires an integral starting index, found a value of type: {}, with value: {x}", type_name(x)),
                )),
            },
        }
    };
    let start = bound(2)?.unwrap_or(0);
    let end = bound(3)?.unwrap_or(arr.len()).min(arr.len());
    for (i, e) in arr.iter().enumerate().take(end).skip(start) {
        if values_eq(e, &v[1]) {
            return Ok(Bson::Int32(i as i32));
        }
    }
    Ok(Bson::Int32(-1))
}

fn range(v: &[Bson]) -> MongoResult<Bson> {
    let get = |i: usize, c_num: i32, c_int: i32, what: &str| -> MongoResult<i64> {
        let x = &v[i];
        if num_of(x).is_none() {
            return Err(err(
                c_num,
                format!(
                    "$range requires a numeric {what}, found value of type: {}",
                    type_name_or_missing(x)
                ),
            ));
        }
        as_int_exact(x)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| err(c_int, format!("$range requires a {what} that can be represented as a 32-bit integer, found value: {x}")))
    };
    let start = get(0, 34443, 34444, "starting value")?;
    let end = get(1, 34445, 34446, "ending value")?;
    let step = if v.len() > 2 {
        get(2, 34447, 34448, "step value")?
    } else {
        1
    };
    if step == 0 {
        return Err(err(34449, "$range requires a non-zero step value"));
    }
    // mongod's estimate (sizeof(vector) + length * sizeof(Value)) against
    // internalQueryMaxRangeBytes: ExceededMemoryLimit (146) rather than a huge allocation.
    let steps = (end - start) / step;
    let length = if steps >= 0 { 1 + steps } else { 0 };
    let mem_needed = 24 + length * 16;
    if mem_needed >= MAX_RANGE_BYTES {
        return Err(MongoError::new(
            ErrorCode::ExceededMemoryLimit,
            format!("$range would use too much memory ({mem_needed} bytes) and cannot spill to disk. Memory limit: {MAX_RANGE_BYTES} bytes"),
        ));
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        out.push(Bson::Int32(i as i32));
        i += step;
    }
    Ok(Bson::Array(out))
}

/// mongod's `internalQueryMaxRangeBytes`.
const MAX_RANGE_BYTES: i64 = 100 * 1024 * 1024;

/// mongod's `BufferMaxSize`: a string an expression builds may not exceed it.
const MAX_STRING_BYTES: usize = 64 * 1024 * 1024;

/// mongod's BufBuilder error (13548) for a string that would outgrow [`MAX_STRING_BYTES`].
fn check_string_size(len: Option<usize>) -> MongoResult<()> {
    match len {
        Some(n) if n <= MAX_STRING_BYTES => Ok(()),
        n => Err(err(
            13548,
            format!(
                "BufBuilder attempted to grow() to {} bytes, past the 64MB limit.",
                n.map_or_else(
                    || "more than 18446744073709551615".to_string(),
                    |n| n.to_string()
                )
            ),
        )),
    }
}

fn array_to_object(v: Bson) -> MongoResult<Bson> {
    let arr = match v {
        Bson::Array(a) => a,
        x if is_nullish(&x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                40386,
                format!(
                    "$arrayToObject requires an array input, found: {}",
                    type_name(&x)
                ),
            ))
        }
    };
    let mut out = Document::new();
    let first_is_array = matches!(arr.first(), Some(Bson::Array(_)));
    for e in arr {
        let (k, val) = match e {
            Bson::Array(mut pair) if first_is_array => {
                if pair.len() != 2 {
                    return Err(err(
                        40397,
                        format!("$arrayToObject requires an array of size 2 arrays,found array of size: {}", pair.len()),
                    ));
                }
                let val = pair.pop().unwrap();
                match pair.pop().unwrap() {
                    Bson::String(k) => (k, val),
                    k => {
                        return Err(err(
                            40395,
                            format!(
                                "$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}",
                                type_name(&k)
                            ),
                        ))
                    }
                }
            }
            Bson::Document(mut d) if !first_is_array => {
                if d.len() != 2 {
                    return Err(err(
                        40392,
                        format!("$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:{}", d.len()),
                    ));
                }
                let (Some(k), Some(val)) = (d.remove("k"), d.remove("v")) else {
                    return Err(err(
                        40393,
                        "$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both keys from: {}",
                    ));
                };
                match k {
                    Bson::String(k) => (k, val),
                    k => {
                        return Err(err(
                            40394,
                            format!("$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: {}", type_name(&k)),
                        ))
                    }
                }
            }
            Bson::Array(_) | Bson::Document(_) => {
                return Err(err(
                    40396,
                    "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects",
                ))
            }
            other => {
                return Err(err(40398, format!("Unrecognised input type format for $arrayToObject: {}", type_name(&other))))
            }
        };
        if k.contains('\0') {
            return Err(err(
                4940400,
                "Key field cannot contain an embedded null byte",
            ));
        }
        out.insert(k, val);
    }
    Ok(Bson::Document(out))
}

/// A hashable canonical form of a value: equal values (per `$eq`, so 1 == 1.0) get equal
/// keys. Used for `$group` keys and set operators.
pub(crate) fn canonical_key(v: &Bson, out: &mut Vec<u8>) {
    match v {
        Bson::Null | Bson::Undefined => out.push(5),
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            out.push(10);
            match as_int_exact(v) {
                Some(i) => {
                    out.push(0);
                    out.extend_from_slice(&i.to_be_bytes());
                }
                None => {
                    let f = num_f64(num_of(v).unwrap());
                    let f = if f.is_nan() { f64::NAN } else { f };
                    out.push(1);
                    out.extend_from_slice(&f.to_bits().to_be_bytes());
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) => {
            out.push(15);
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Bson::Document(d) => {
            out.push(20);
            for (k, x) in d {
                out.extend_from_slice(k.as_bytes());
                out.push(0);
                canonical_key(x, out);
            }
            out.push(0xff);
        }
        Bson::Array(a) => {
            out.push(25);
            for x in a {
                canonical_key(x, out);
            }
            out.push(0xff);
        }
        other => {
            out.push(crate::order::type_rank(other));
            let s = format!("{other:?}");
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn key_of(v: &Bson) -> Vec<u8> {
    let mut k = Vec::new();
    canonical_key(v, &mut k);
    k
}

fn dedup(items: impl IntoIterator<Item = Bson>, seen: &mut HashSet<Vec<u8>>, out: &mut Vec<Bson>) {
    for x in items {
        if seen.insert(key_of(&x)) {
            out.push(x);
        }
    }
}

fn set_op(op: Op, v: Vec<Bson>) -> MongoResult<Bson> {
    let name = op_name(op);
    match op {
        Op::SetUnion | Op::SetIntersection => {
            let mut arrays = Vec::with_capacity(v.len());
            for x in v {
                match x {
                    Bson::Array(a) => arrays.push(a),
                    x if is_nullish(&x) => return Ok(Bson::Null),
                    x => {
                        return Err(err(
                            if op == Op::SetUnion { 17043 } else { 17047 },
                            format!(
                            "All operands of {name} must be arrays. One argument is of type: {}",
                            type_name(&x)
                        ),
                        ))
                    }
                }
            }
            let mut out = Vec::new();
            if op == Op::SetUnion {
                let mut seen = HashSet::new();
                for a in arrays {
                    dedup(a, &mut seen, &mut out);
                }
            } else if let Some((first, rest)) = arrays.split_first() {
                let rest_keys: Vec<HashSet<Vec<u8>>> = rest
                    .iter()
                    .map(|a| a.iter().map(key_of).collect())
                    .collect();
                let mut seen = HashSet::new();
                for x in first {
                    let k = key_of(x);
                    if rest_keys.iter().all(|s| s.contains(&k)) && seen.insert(k) {
                        out.push(x.clone());
                    }
                }
            }
            Ok(Bson::Array(out))
        }
        Op::SetDifference => {
            let (a, b) = (&v[0], &v[1]);
            if is_nullish(a) || is_nullish(b) {
                return Ok(Bson::Null);
            }
            let Bson::Array(a) = a else {
                return Err(err(17048, format!("both operands of $setDifference must be arrays. First argument is of type: {}", type_name(a))));
            };
            let Bson::Array(b) = b else {
                return Err(err(17049, format!("both operands of $setDifference must be arrays. Second argument is of type: {}", type_name(b))));
            };
            let mut seen: HashSet<Vec<u8>> = b.iter().map(key_of).collect();
            let mut out = Vec::new();
            dedup(a.iter().cloned(), &mut seen, &mut out);
            Ok(Bson::Array(out))
        }
        Op::SetEquals => {
            let mut sets: Vec<HashSet<Vec<u8>>> = Vec::new();
            for x in &v {
                let Bson::Array(a) = x else {
                    return Err(err(
                        17044,
                        format!("All operands of $setEquals must be arrays. One argument is of type: {}", type_name_or_missing(x)),
                    ));
                };
                sets.push(a.iter().map(key_of).collect());
            }
            Ok(Bson::Boolean(sets.windows(2).all(|w| w[0] == w[1])))
        }
        _ => {
            let Bson::Array(a) = &v[0] else {
                return Err(err(17046, format!("both operands of $setIsSubset must be arrays. First argument is of type: {}", type_name_or_missing(&v[0]))));
            };
            let Bson::Array(b) = &v[1] else {
                return Err(err(17042, format!("both operands of $setIsSubset must be arrays. Second argument is of type: {}", type_name_or_missing(&v[1]))));
            };
            let bs: HashSet<Vec<u8>> = b.iter().map(key_of).collect();
            Ok(Bson::Boolean(a.iter().all(|x| bs.contains(&key_of(x)))))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Type conversion

fn conversion_failure(msg: impl Into<String>) -> MongoError {
    MongoError {
        code: 241,
        code_name: std::borrow::Cow::Borrowed("ConversionFailure"),
        message: msg.into(),
        extra: None,
    }
}

fn target_type(v: &Bson) -> MongoResult<ElementType> {
    let t = match v {
        Bson::String(s) => match s.as_str() {
            "double" => ElementType::Double,
            "string" => ElementType::String,
            "objectId" => ElementType::ObjectId,
            "bool" => ElementType::Boolean,
            "date" => ElementType::DateTime,
            "int" => ElementType::Int32,
            "long" => ElementType::Int64,
            "decimal" => ElementType::Decimal128,
            "object" => ElementType::EmbeddedDocument,
            "array" => ElementType::Array,
            "binData" => ElementType::Binary,
            "null" => ElementType::Null,
            "regex" => ElementType::RegularExpression,
            "timestamp" => ElementType::Timestamp,
            "minKey" => ElementType::MinKey,
            "maxKey" => ElementType::MaxKey,
            other => return Err(MongoError::bad_value(format!("Unknown type name: {other}"))),
        },
        v => match as_int_exact(v)
            .and_then(|n| u8::try_from(n).ok())
            .and_then(ElementType::from)
        {
            Some(t) => t,
            None => {
                return Err(MongoError::bad_value(format!(
                    "In $convert, numeric 'to' argument is not a valid type: {v}"
                )))
            }
        },
    };
    Ok(t)
}

fn element_type_name(t: ElementType) -> &'static str {
    match t {
        ElementType::Double => "double",
        ElementType::String => "string",
        ElementType::ObjectId => "objectId",
        ElementType::Boolean => "bool",
        ElementType::DateTime => "date",
        ElementType::Int32 => "int",
        ElementType::Int64 => "long",
        ElementType::Decimal128 => "decimal",
        ElementType::EmbeddedDocument => "object",
        ElementType::Array => "array",
        ElementType::Binary => "binData",
        ElementType::Null => "null",
        _ => "unknown",
    }
}

fn parse_int_str(s: &str) -> Result<i64, String> {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Failed to parse number '{s}' in $convert with no onError value: Did not consume whole string."));
    }
    s.parse::<i64>().map_err(|_| {
        format!("Failed to parse number '{s}' in $convert with no onError value: Out of range")
    })
}

fn parse_double_str(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    match lower.trim_start_matches(['-', '+']) {
        "infinity" | "inf" => {
            return Some(if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            })
        }
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if s.is_empty() || s.contains(|c: char| c.is_whitespace()) || s.starts_with("0x") {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Converts as `$convert` does; errors are ConversionFailure (241).
fn convert(v: Bson, to: ElementType) -> MongoResult<Bson> {
    let unsupported = |v: &Bson| {
        conversion_failure(format!(
            "Unsupported conversion from {} to {} in $convert with no onError value",
            type_name(v),
            element_type_name(to)
        ))
    };
    let overflow = |v: &Bson| {
        conversion_failure(format!(
            "Conversion would overflow target type in $convert with no onError value: {v}"
        ))
    };
    let from_float = |f: f64, lo: f64, hi: f64, v: &Bson| -> MongoResult<i64> {
        if f.is_nan() {
            return Err(conversion_failure(
                "Attempt to convert NaN value to integer type in $convert with no onError value",
            ));
        }
        if f.is_infinite() {
            return Err(conversion_failure(
                "Attempt to convert infinity value to integer type in $convert with no onError value",
            ));
        }
        let t = f.trunc();
        if t < lo || t > hi {
            return Err(overflow(v));
        }
        Ok(t as i64)
    };
    match to {
        ElementType::Double => Ok(Bson::Double(match &v {
            Bson::Double(d) => *d,
            Bson::Int32(i) => *i as f64,
            Bson::Int64(i) => *i as f64,
            Bson::Decimal128(d) => {
                let f = Dec::from_d128(d).to_f64();
                if f.is_infinite() && Dec::from_d128(d).special == 0 {
                    return Err(overflow(&v));
                }
                f
            }
            Bson::Boolean(b) => *b as i32 as f64,
            Bson::DateTime(d) => d.timestamp_millis() as f64,
            Bson::String(s) => parse_double_str(s).ok_or_else(|| {
                conversion_failure(format!("Failed to parse number '{s}' in $convert with no onError value: Did not consume whole string."))
            })?,
            _ => return Err(unsupported(&v)),
        })),
        ElementType::Int32 | ElementType::Int64 => {
            let (lo, hi) =
                if to == ElementType::Int32 { (i32::MIN as f64, i32::MAX as f64) } else { (i64::MIN as f64, 9.223372036854775e18) };
            let n: i64 = match &v {
                Bson::Int32(i) => *i as i64,
                Bson::Int64(i) => *i,
                Bson::Double(d) => from_float(*d, lo, hi, &v)?,
                Bson::Decimal128(d) => {
                    let dec = Dec::from_d128(d);
                    if dec.special == 2 {
                        return Err(conversion_failure(
                            "Attempt to convert NaN value to integer type in $convert with no onError value",
                        ));
                    }
                    if dec.special == 1 {
                        return Err(conversion_failure(
                            "Attempt to convert infinity value to integer type in $convert with no onError value",
                        ));
                    }
                    dec.to_i64_trunc().ok_or_else(|| overflow(&v))?
                }
                Bson::Boolean(b) => *b as i64,
                Bson::DateTime(d) if to == ElementType::Int64 => d.timestamp_millis(),
                Bson::String(s) => parse_int_str(s).map_err(conversion_failure)?,
                _ => return Err(unsupported(&v)),
            };
            if to == ElementType::Int32 {
                i32::try_from(n).map(Bson::Int32).map_err(|_| overflow(&v))
            } else {
                Ok(Bson::Int64(n))
            }
        }
        ElementType::Decimal128 => Ok(Bson::Decimal128(match &v {
            Bson::Decimal128(d) => *d,
            Bson::Int32(i) => Dec::from_i64(*i as i64).to_d128(),
            Bson::Int64(i) => Dec::from_i64(*i).to_d128(),
            Bson::Double(d) => Dec::from_f64(*d).to_d128(),
            Bson::Boolean(b) => Dec::from_i64(*b as i64).to_d128(),
            Bson::DateTime(d) => Dec::from_i64(d.timestamp_millis()).to_d128(),
            Bson::String(s) => Dec::parse(s).map(|d| d.to_d128()).ok_or_else(|| {
                conversion_failure(format!("Failed to parse number '{s}' in $convert with no onError value: Failed to parse string to decimal"))
            })?,
            _ => return Err(unsupported(&v)),
        })),
        ElementType::Boolean => Ok(Bson::Boolean(match &v {
            Bson::Boolean(b) => *b,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => truthy(&v),
            Bson::MinKey | Bson::MaxKey => return Err(unsupported(&v)),
            _ => true,
        })),
        ElementType::String => Ok(Bson::String(match &v {
            Bson::ObjectId(o) => o.to_hex(),
            Bson::Boolean(b) => b.to_string(),
            Bson::String(s) => s.clone(),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) | Bson::DateTime(_) => {
                coerce_to_string("$convert", &v)?
            }
            Bson::Symbol(s) => s.clone(),
            Bson::JavaScriptCode(s) => s.clone(),
            _ => return Err(unsupported(&v)),
        })),
        ElementType::ObjectId => match &v {
            Bson::ObjectId(_) => Ok(v),
            Bson::String(s) => ObjectId::parse_str(s).map(Bson::ObjectId).map_err(|_| {
                conversion_failure(format!(
                    "Failed to parse objectId '{s}' in $convert with no onError value: Invalid string length for parsing to OID, expected 24 but found {}",
                    s.len()
                ))
            }),
            _ => Err(unsupported(&v)),
        },
        ElementType::DateTime => match &v {
            Bson::DateTime(_) => Ok(v),
            Bson::Int64(i) => Ok(Bson::DateTime(DateTime::from_millis(*i))),
            Bson::Double(d) => Ok(Bson::DateTime(DateTime::from_millis(from_float(*d, i64::MIN as f64, 9.2e18, &v)?))),
            Bson::Decimal128(d) => Ok(Bson::DateTime(DateTime::from_millis(
                Dec::from_d128(d).to_i64_trunc().ok_or_else(|| overflow(&v))?,
            ))),
            Bson::ObjectId(o) => Ok(Bson::DateTime(o.timestamp())),
            Bson::Timestamp(t) => Ok(Bson::DateTime(DateTime::from_millis(t.time as i64 * 1000))),
            Bson::String(s) => parse_date_string(s, None, 0).map(Bson::DateTime).map_err(conversion_failure),
            _ => Err(unsupported(&v)),
        },
        ElementType::Null => Ok(Bson::Null),
        _ if v.element_type() == to => Ok(v),
        _ => Err(unsupported(&v)),
    }
}

// ---------------------------------------------------------------------------------------
// Named-argument operators

fn eval_named<'e>(op: Op, slots: &'e [Option<Expr>], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    // One small function per operator: expressions nest (up to the document depth
    // limit) through here, so this frame and theirs must stay small.
    let name = op_name(op);
    match op {
        Op::Trim | Op::LTrim | Op::RTrim => named_trim(op, name, slots, cx),
        Op::ReplaceOne | Op::ReplaceAll => named_replace(op, name, slots, cx),
        Op::Zip => named_zip(op, name, slots, cx),
        Op::SortArray => named_sort_array(op, name, slots, cx),
        Op::FirstN | Op::LastN | Op::MaxN | Op::MinN => named_first_last_n(op, name, slots, cx),
        Op::Convert => named_convert(op, name, slots, cx),
        Op::DateToString => named_date_to_string(op, name, slots, cx),
        Op::DateFromString => named_date_from_string(op, name, slots, cx),
        Op::DateToParts => named_date_to_parts(op, name, slots, cx),
        Op::DateFromParts => date_from_parts(slots, cx),
        Op::DateAdd | Op::DateSubtract => named_date_add(op, name, slots, cx),
        Op::DateDiff => named_date_diff(op, name, slots, cx),
        Op::DateTrunc => named_date_trunc(op, name, slots, cx),
        Op::GetField => named_get_field(op, name, slots, cx),
        Op::SetField | Op::UnsetField => named_set_field(op, name, slots, cx),
        _ if is_date_part(op) => named_date_part(op, name, slots, cx),
        _ => Err(MongoError::internal(format!(
            "operator {name} has no named form"
        ))),
    }
}

/// Evaluates an optional named argument; absent → None.
fn arg<'e>(slots: &'e [Option<Expr>], cx: &mut Cx<'_, 'e>, i: usize) -> MongoResult<Option<Bson>> {
    match slots.get(i) {
        Some(Some(e)) => Ok(Some(e.ev(cx)?)),
        _ => Ok(None),
    }
}

/// Evaluates a required named argument (parsing guarantees it is present).
fn req<'e>(slots: &'e [Option<Expr>], cx: &mut Cx<'_, 'e>, i: usize) -> MongoResult<Bson> {
    arg(slots, cx, i)?.ok_or_else(|| MongoError::internal("missing required argument"))
}

#[inline(never)]
fn named_trim<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let input = req(slots, cx, 0)?;
    let chars = arg(slots, cx, 1)?;
    let s = match &input {
        Bson::String(s) => s,
        x if is_nullish(x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                50699,
                format!(
                    "{name} requires its input to be a string, got {x} (of type {}) instead.",
                    type_name(x)
                ),
            ))
        }
    };
    let set: Vec<char> = match &chars {
        None => WHITESPACE.to_vec(),
        Some(x) if is_nullish(x) => return Ok(Bson::Null),
        Some(Bson::String(c)) => c.chars().collect(),
        Some(x) => {
            return Err(err(
                50700,
                format!(
                    "{name} requires 'chars' to be a string, got {x} (of type {}) instead.",
                    type_name(x)
                ),
            ))
        }
    };
    let pred = |c: char| set.contains(&c);
    Ok(Bson::String(
        match op {
            Op::Trim => s.trim_matches(pred),
            Op::LTrim => s.trim_start_matches(pred),
            _ => s.trim_end_matches(pred),
        }
        .to_string(),
    ))
}

#[inline(never)]
fn named_replace<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let vals = [req(slots, cx, 0)?, req(slots, cx, 1)?, req(slots, cx, 2)?];
    let names = ["input", "find", "replacement"];
    let codes = [51746, 51745, 51744];
    let mut strs: Vec<&str> = Vec::new();
    let mut null = false;
    for i in 0..3 {
        match &vals[i] {
            Bson::String(s) => strs.push(s),
            x if is_nullish(x) => {
                null = true;
                strs.push("");
            }
            x => {
                return Err(err(
                    codes[i],
                    format!(
                        "{name} requires that '{}' be a string, found: {}",
                        names[i],
                        type_name(x)
                    ),
                ))
            }
        }
    }
    if null {
        return Ok(Bson::Null);
    }
    // The result's size, before building it: a short 'find' with a long
    // 'replacement' multiplies the input.
    let (input, find, repl) = (strs[0], strs[1], strs[2]);
    let matches = if op == Op::ReplaceOne {
        usize::from(find.is_empty() || input.contains(find))
    } else if find.is_empty() {
        input.chars().count() + 1
    } else {
        input.matches(find).count()
    };
    check_string_size(
        matches
            .checked_mul(repl.len())
            .and_then(|n| n.checked_add(input.len())),
    )?;
    Ok(Bson::String(if op == Op::ReplaceOne {
        strs[0].replacen(strs[1], strs[2], 1)
    } else if strs[1].is_empty() {
        // Like MongoDB: an empty 'find' matches between every character.
        let mut out = String::from(strs[2]);
        for c in strs[0].chars() {
            out.push(c);
            out.push_str(strs[2]);
        }
        out
    } else {
        strs[0].replace(strs[1], strs[2])
    }))
}

#[inline(never)]
fn named_zip<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let inputs = req(slots, cx, 0)?;
    let longest = match arg(slots, cx, 1)? {
        None => false,
        Some(Bson::Boolean(b)) => b,
        Some(x) => {
            return Err(err(
                34463,
                format!("useLongestLength must be a bool, found {}", type_name(&x)),
            ))
        }
    };
    let defaults = match arg(slots, cx, 2)? {
        None => None,
        Some(Bson::Array(a)) => Some(a),
        Some(x) => {
            return Err(err(
                34462,
                format!(
                    "defaults must be an array of expressions, found {}",
                    type_name(&x)
                ),
            ))
        }
    };
    let Bson::Array(inputs) = inputs else {
        return Err(err(
            34461,
            format!(
                "inputs must be an array of expressions, found {}",
                type_name(&inputs)
            ),
        ));
    };
    if defaults.is_some() && !longest {
        return Err(err(
            34466,
            "cannot specify defaults unless useLongestLength is true",
        ));
    }
    if defaults.as_ref().is_some_and(|d| d.len() != inputs.len()) {
        return Err(err(34467, "defaults and inputs must have the same length"));
    }
    let mut arrays = Vec::with_capacity(inputs.len());
    for x in inputs {
        match x {
            Bson::Array(a) => arrays.push(a),
            x if is_nullish(&x) => return Ok(Bson::Null),
            x => {
                return Err(err(
                    34468,
                    format!("$zip found a non-array expression in input: {x}"),
                ))
            }
        }
    }
    let n = if longest {
        arrays.iter().map(Vec::len).max().unwrap_or(0)
    } else {
        arrays.iter().map(Vec::len).min().unwrap_or(0)
    };
    let out = (0..n)
        .map(|i| {
            Bson::Array(
                arrays
                    .iter()
                    .enumerate()
                    .map(|(j, a)| {
                        a.get(i).cloned().unwrap_or_else(|| {
                            defaults.as_ref().map_or(Bson::Null, |d| d[j].clone())
                        })
                    })
                    .collect(),
            )
        })
        .collect();
    Ok(Bson::Array(out))
}

#[inline(never)]
fn named_sort_array<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let input = req(slots, cx, 0)?;
    let spec = slots[1].as_ref().and_then(Expr::as_constant).unwrap();
    let mut arr = match input {
        Bson::Array(a) => a,
        x if is_nullish(&x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                2942504,
                format!(
                    "The input argument to $sortArray must be an array, but was of type: {}",
                    type_name(&x)
                ),
            ))
        }
    };
    sort_values(&mut arr, spec)?;
    Ok(Bson::Array(arr))
}

#[inline(never)]
fn named_first_last_n<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let input = req(slots, cx, 0)?;
    let n = req(slots, cx, 1)?;
    let n = parse_n(name, &n)?;
    let mut arr = match input {
        Bson::Array(a) => a,
        x => {
            return Err(err(
                5788200,
                format!(
                    "Input must be an array, but found {}",
                    type_name_or_missing(&x)
                ),
            ))
        }
    };
    match op {
        Op::FirstN => arr.truncate(n),
        Op::LastN => {
            let k = arr.len().saturating_sub(n);
            arr.drain(..k);
        }
        _ => {
            arr.retain(|x| !is_nullish(x));
            if op == Op::MaxN {
                arr.sort_by(|a, b| compare_values(b, a));
            } else {
                arr.sort_by(compare_values);
            }
            arr.truncate(n);
        }
    }
    Ok(Bson::Array(arr))
}

#[inline(never)]
fn named_convert<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let input = req(slots, cx, 0)?;
    if is_nullish(&input) {
        return Ok(arg(slots, cx, 3)?.unwrap_or(Bson::Null));
    }
    let to = req(slots, cx, 1)?;
    if is_nullish(&to) {
        return Ok(Bson::Null);
    }
    let to = target_type(&to)?;
    match convert(input, to) {
        Ok(v) => Ok(v),
        Err(e) if e.code == 241 && slots[2].is_some() => Ok(req(slots, cx, 2)?),
        Err(e) => Err(e),
    }
}

#[inline(never)]
fn named_date_to_string<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let date = req(slots, cx, 0)?;
    if is_nullish(&date) {
        return Ok(arg(slots, cx, 3)?.unwrap_or(Bson::Null));
    }
    let format = match arg(slots, cx, 1)? {
        None => None,
        Some(Bson::String(s)) => Some(s),
        Some(x) if is_nullish(&x) => return Ok(Bson::Null),
        Some(x) => {
            return Err(err(
                18533,
                format!(
                    "$dateToString requires that 'format' be a string, found: {} with value {x}",
                    type_name(&x)
                ),
            ))
        }
    };
    let Some(tz) = timezone_arg(arg(slots, cx, 2)?)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&date)?;
    let off = tz.offset_at(ms);
    let fmt = format.as_deref().unwrap_or(if tz.is_utc() {
        "%Y-%m-%dT%H:%M:%S.%LZ"
    } else {
        "%Y-%m-%dT%H:%M:%S.%L"
    });
    Ok(Bson::String(format_date(fmt, ms, off)?))
}

#[inline(never)]
fn named_date_from_string<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let s = req(slots, cx, 0)?;
    let s = match s {
        Bson::String(s) => s,
        x if is_nullish(&x) => return Ok(arg(slots, cx, 4)?.unwrap_or(Bson::Null)),
        x => {
            let e = conversion_failure(format!(
                "$dateFromString requires that 'dateString' be a string, found: {} with value {x}",
                type_name(&x)
            ));
            return match &slots[3] {
                Some(_) => Ok(req(slots, cx, 3)?),
                None => Err(e),
            };
        }
    };
    let format = match arg(slots, cx, 1)? {
        None => None,
        Some(Bson::String(f)) => Some(f),
        Some(x) if is_nullish(&x) => return Ok(Bson::Null),
        Some(x) => {
            return Err(err(
                40684,
                format!(
                    "$dateFromString requires that 'format' be a string, found: {}",
                    type_name(&x)
                ),
            ))
        }
    };
    let Some(tz) = timezone_arg(arg(slots, cx, 2)?)? else {
        return Ok(Bson::Null);
    };
    match parse_date_string(&s, format.as_deref(), tz.fixed_offset()) {
        Ok(d) => Ok(Bson::DateTime(d)),
        Err(msg) => match &slots[3] {
            Some(_) => Ok(req(slots, cx, 3)?),
            None => Err(conversion_failure(msg)),
        },
    }
}

#[inline(never)]
fn named_date_to_parts<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let date = req(slots, cx, 0)?;
    if is_nullish(&date) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(arg(slots, cx, 1)?)? else {
        return Ok(Bson::Null);
    };
    let iso = match arg(slots, cx, 2)? {
        None => false,
        Some(Bson::Boolean(b)) => b,
        Some(x) if is_nullish(&x) => return Ok(Bson::Null),
        Some(x) => {
            return Err(err(
                40521,
                format!("iso8601 must evaluate to a bool, found {}", type_name(&x)),
            ))
        }
    };
    let ms = date_millis(&date)?;
    let p = Parts::of(tz.local(ms));
    Ok(Bson::Document(if iso {
        let (wy, w) = p.iso_week();
        bson::doc! {"isoWeekYear": wy as i32, "isoWeek": w as i32, "isoDayOfWeek": p.iso_dow() as i32,
        "hour": p.hour as i32, "minute": p.minute as i32, "second": p.second as i32, "millisecond": p.ms as i32}
    } else {
        bson::doc! {"year": p.year as i32, "month": p.month as i32, "day": p.day as i32,
        "hour": p.hour as i32, "minute": p.minute as i32, "second": p.second as i32, "millisecond": p.ms as i32}
    }))
}

#[inline(never)]
fn named_date_add<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let start = req(slots, cx, 0)?;
    let unit = req(slots, cx, 1)?;
    let amount = req(slots, cx, 2)?;
    let tz = arg(slots, cx, 3)?;
    if is_nullish(&start) || is_nullish(&unit) || is_nullish(&amount) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(tz)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&start)?;
    let unit = time_unit(name, &unit)?;
    let Some(mut amount) = as_int_exact(&amount) else {
        return Err(err(
            5166405,
            format!("{name} expects integer amount of time units"),
        ));
    };
    if op == Op::DateSubtract {
        // i64::MIN cannot be negated (mongod: 6045000).
        amount = amount.checked_neg().ok_or_else(|| {
            err(
                6045000,
                format!("invalid $dateSubtract 'amount' parameter value: {amount}"),
            )
        })?;
    }
    Ok(Bson::DateTime(DateTime::from_millis(date_add(
        ms, unit, amount, &tz,
    )?)))
}

#[inline(never)]
fn named_date_diff<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let start = req(slots, cx, 0)?;
    let end = req(slots, cx, 1)?;
    let unit = req(slots, cx, 2)?;
    let tz = arg(slots, cx, 3)?;
    let sow = arg(slots, cx, 4)?;
    if is_nullish(&start) || is_nullish(&end) || is_nullish(&unit) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(tz)? else {
        return Ok(Bson::Null);
    };
    let (s, e) = (date_millis(&start)?, date_millis(&end)?);
    let unit = time_unit(name, &unit)?;
    let sow = start_of_week(sow)?;
    Ok(Bson::Int64(date_diff(s, e, unit, &tz, sow)?))
}

#[inline(never)]
fn named_date_trunc<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let date = req(slots, cx, 0)?;
    let unit = req(slots, cx, 1)?;
    let bin = arg(slots, cx, 2)?;
    let tz = arg(slots, cx, 3)?;
    let sow = arg(slots, cx, 4)?;
    if is_nullish(&date) || is_nullish(&unit) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(tz)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&date)?;
    let unit = time_unit(name, &unit)?;
    let bin = match bin {
        None => 1,
        Some(b) if is_nullish(&b) => return Ok(Bson::Null),
        Some(b) => match as_int_exact(&b) {
            Some(n) if n > 0 => n,
            _ => return Err(err(5439017, format!("$dateTrunc requires 'binSize' to be a positive 64-bit integer, but got value '{b}'"))),
        },
    };
    let sow = start_of_week(sow)?;
    Ok(Bson::DateTime(DateTime::from_millis(date_trunc(
        ms, unit, bin, &tz, sow,
    )?)))
}

#[inline(never)]
fn named_get_field<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let field = req(slots, cx, 0)?;
    let Bson::String(field) = field else {
        return Err(err(
            3041704,
            format!(
                "$getField requires 'field' to evaluate to type String, but got {}",
                type_name_or_missing(&field)
            ),
        ));
    };
    let input = match arg(slots, cx, 1)? {
        Some(v) => v,
        None => cx.field(&[]),
    };
    match input {
        Bson::Document(d) => Ok(d.get(&field).cloned().unwrap_or(MISSING)),
        Bson::Undefined => Ok(MISSING),
        Bson::Null => Ok(Bson::Null),
        _ => Ok(MISSING),
    }
}

#[inline(never)]
fn named_set_field<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let field = req(slots, cx, 0)?;
    let Bson::String(field) = field else {
        return Err(err(
            4161106,
            format!(
                "{name} requires 'field' to evaluate to type String, but got {}",
                type_name_or_missing(&field)
            ),
        ));
    };
    let input = req(slots, cx, 1)?;
    let value = if op == Op::SetField {
        req(slots, cx, 2)?
    } else {
        MISSING
    };
    let mut d = match input {
        Bson::Document(d) => d,
        x if is_nullish(&x) => return Ok(Bson::Null),
        x => {
            return Err(err(
                4161105,
                format!(
                    "{name} requires 'input' to evaluate to type Object, but got {}",
                    type_name(&x)
                ),
            ))
        }
    };
    if matches!(value, Bson::Undefined) {
        d.remove(&field);
    } else {
        d.insert(field, value);
    }
    Ok(Bson::Document(d))
}

#[inline(never)]
fn named_date_part<'e>(
    op: Op,
    name: &'static str,
    slots: &'e [Option<Expr>],
    cx: &mut Cx<'_, 'e>,
) -> MongoResult<Bson> {
    let _ = (op, name);
    let date = req(slots, cx, 0)?;
    if is_nullish(&date) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(arg(slots, cx, 1)?)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&date)?;
    let p = Parts::of(tz.local(ms));
    let v = match op {
        Op::Year => p.year as i32,
        Op::Month => p.month as i32,
        Op::DayOfMonth => p.day as i32,
        Op::Hour => p.hour as i32,
        Op::Minute => p.minute as i32,
        Op::Second => p.second as i32,
        Op::Millisecond => p.ms as i32,
        Op::DayOfWeek => p.dow as i32 + 1,
        Op::DayOfYear => p.doy as i32,
        Op::Week => p.week_sunday() as i32,
        Op::IsoWeek => p.iso_week().1 as i32,
        Op::IsoWeekYear => p.iso_week().0 as i32,
        _ => p.iso_dow() as i32,
    };
    Ok(Bson::Int32(v))
}

fn parse_n(name: &str, n: &Bson) -> MongoResult<usize> {
    match as_int_exact(n) {
        Some(k) if k > 0 => Ok(k as usize),
        Some(_) => Err(err(
            5787908,
            format!("'n' must be greater than 0, found {n} for {name}"),
        )),
        None => Err(err(
            5787902,
            format!("Value for 'n' must be of integral type, but found {n} for {name}"),
        )),
    }
}

/// Sorts values for `$sortArray`: `1`/`-1` compares whole values, a document sorts by fields.
pub(crate) fn sort_values(arr: &mut [Bson], spec: &Bson) -> MongoResult<()> {
    match spec {
        Bson::Document(keys) => {
            let mut fields: Vec<(Vec<String>, bool)> = Vec::new();
            for (k, v) in keys {
                let desc =
                    match as_int_exact(v) {
                        Some(1) => false,
                        Some(-1) => true,
                        _ => return Err(err(
                            15975,
                            "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                        )),
                    };
                crate::depth::check_path(k)?;
                fields.push((k.split('.').map(str::to_string).collect(), desc));
            }
            let key = |v: &Bson, path: &[String], desc: bool| -> Bson {
                let x = get_path(v, path);
                match x {
                    Bson::Array(a) if !a.is_empty() => {
                        let it = a.into_iter();
                        if desc {
                            it.max_by(compare_values).unwrap()
                        } else {
                            it.min_by(compare_values).unwrap()
                        }
                    }
                    Bson::Array(_) => MISSING,
                    x => x,
                }
            };
            arr.sort_by(|a, b| {
                for (p, desc) in &fields {
                    let (x, y) = (key(a, p, *desc), key(b, p, *desc));
                    let o = compare_values(&x, &y);
                    if o != Ordering::Equal {
                        return if *desc { o.reverse() } else { o };
                    }
                }
                Ordering::Equal
            });
        }
        v => {
            let desc = as_int_exact(v) == Some(-1);
            arr.sort_by(|a, b| {
                if desc {
                    compare_values(b, a)
                } else {
                    compare_values(a, b)
                }
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Dates (proleptic Gregorian, UTC or fixed-offset time zones)

const MS_PER_DAY: i64 = 86_400_000;

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if is_leap(y) {
                29
            } else {
                28
            }
        }
    }
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    ms: u32,
    /// 0 = Sunday.
    dow: u32,
    /// 1-based day of year.
    doy: u32,
}

impl Parts {
    fn of(local_ms: i64) -> Parts {
        let days = local_ms.div_euclid(MS_PER_DAY);
        let rem = local_ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        Parts {
            year,
            month,
            day,
            hour: (rem / 3_600_000) as u32,
            minute: (rem / 60_000 % 60) as u32,
            second: (rem / 1000 % 60) as u32,
            ms: (rem % 1000) as u32,
            dow: (days + 4).rem_euclid(7) as u32,
            doy: (days - days_from_civil(year, 1, 1) + 1) as u32,
        }
    }

    fn iso_dow(&self) -> u32 {
        if self.dow == 0 {
            7
        } else {
            self.dow
        }
    }

    fn week_sunday(&self) -> u32 {
        (self.doy - 1 + 7 - self.dow) / 7
    }

    fn iso_week(&self) -> (i64, u32) {
        let w = (self.doy as i64 - self.iso_dow() as i64 + 10) / 7;
        if w < 1 {
            (self.year - 1, iso_weeks_in_year(self.year - 1))
        } else if w > iso_weeks_in_year(self.year) as i64 {
            (self.year + 1, 1)
        } else {
            (self.year, w as u32)
        }
    }
}

fn iso_weeks_in_year(y: i64) -> u32 {
    let p = |y: i64| (y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400)).rem_euclid(7);
    if p(y) == 4 || p(y - 1) == 3 {
        53
    } else {
        52
    }
}

/// A time zone: UTC or a fixed offset (Olson names other than UTC are not supported).
struct Tz {
    offset_ms: i64,
    named_utc: bool,
}

impl Tz {
    fn offset_at(&self, _ms: i64) -> i64 {
        self.offset_ms
    }
    /// Local time of `ms`; saturates within ~100 hours of the representable range.
    fn local(&self, ms: i64) -> i64 {
        ms.saturating_add(self.offset_at(ms))
    }
    fn fixed_offset(&self) -> i64 {
        self.offset_ms
    }
    fn is_utc(&self) -> bool {
        self.named_utc
    }
}

/// Parses a `timezone` argument; `Ok(None)` means it evaluated to null (result is null).
fn timezone_arg(v: Option<Bson>) -> MongoResult<Option<Tz>> {
    let s = match v {
        None => {
            return Ok(Some(Tz {
                offset_ms: 0,
                named_utc: true,
            }))
        }
        Some(x) if is_nullish(&x) => return Ok(None),
        Some(Bson::String(s)) => s,
        Some(x) => {
            return Err(err(
                40517,
                format!(
                    "timezone must evaluate to a string, found {}",
                    type_name(&x)
                ),
            ))
        }
    };
    match s.as_str() {
        "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" | "Universal" | "Zulu" => {
            return Ok(Some(Tz {
                offset_ms: 0,
                named_utc: true,
            }))
        }
        _ => {}
    }
    match parse_offset(&s) {
        Some(off) => Ok(Some(Tz {
            offset_ms: off,
            named_utc: false,
        })),
        None => Err(err(
            40485,
            format!("unrecognized time zone identifier: \"{s}\""),
        )),
    }
}

/// "+hh", "+hhmm", "+hh:mm" (and '-') → offset in ms.
fn parse_offset(s: &str) -> Option<i64> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i64>().ok()?, 0),
        4 => (
            digits[..2].parse::<i64>().ok()?,
            digits[2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    if m >= 60 {
        return None;
    }
    Some(sign * (h * 3_600_000 + m * 60_000))
}

fn date_millis(v: &Bson) -> MongoResult<i64> {
    match v {
        Bson::DateTime(d) => Ok(d.timestamp_millis()),
        Bson::Timestamp(t) => Ok(t.time as i64 * 1000),
        Bson::ObjectId(o) => Ok(o.timestamp().timestamp_millis()),
        x => Err(err(
            16006,
            format!(
                "can't convert from BSON type {} to Date",
                type_name_or_missing(x)
            ),
        )),
    }
}

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn format_date(fmt: &str, ms: i64, off: i64) -> MongoResult<String> {
    let p = Parts::of(ms.saturating_add(off));
    let mut out = String::with_capacity(fmt.len() + 8);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            return Err(err(18535, "Unmatched '%' at end of format string"));
        };
        let needs_year = matches!(spec, 'Y' | 'G');
        if needs_year && !(0..=9999).contains(&p.year) {
            return Err(err(
                18537,
                format!(
                    "$dateToString is only defined on year 0-9999, tried to use year {}",
                    p.year
                ),
            ));
        }
        match spec {
            'd' => write!(out, "{:02}", p.day),
            'G' => write!(out, "{:04}", p.iso_week().0),
            'H' => write!(out, "{:02}", p.hour),
            'j' => write!(out, "{:03}", p.doy),
            'L' => write!(out, "{:03}", p.ms),
            'm' => write!(out, "{:02}", p.month),
            'M' => write!(out, "{:02}", p.minute),
            'S' => write!(out, "{:02}", p.second),
            'w' => write!(out, "{}", p.dow + 1),
            'u' => write!(out, "{}", p.iso_dow()),
            'U' => write!(out, "{:02}", p.week_sunday()),
            'V' => write!(out, "{:02}", p.iso_week().1),
            'Y' => write!(out, "{:04}", p.year),
            'b' => write!(out, "{}", &MONTH_NAMES[p.month as usize - 1][..3]),
            'B' => write!(out, "{}", MONTH_NAMES[p.month as usize - 1]),
            'z' => {
                let m = off / 60_000;
                write!(
                    out,
                    "{}{:02}{:02}",
                    if m < 0 { '-' } else { '+' },
                    m.abs() / 60,
                    m.abs() % 60
                )
            }
            'Z' => {
                let m = off / 60_000;
                write!(out, "{}{}", if m < 0 { '-' } else { '+' }, m.abs())
            }
            '%' => write!(out, "%"),
            other => {
                return Err(err(
                    18536,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
        .expect("writing to a String cannot fail");
    }
    Ok(out)
}

/// Parses a date string: ISO 8601-like forms by default, or a `%`-format.
fn parse_date_string(s: &str, format: Option<&str>, default_off: i64) -> Result<DateTime, String> {
    let bad = |why: &str| format!("Error parsing date string '{s}'; {why}");
    let mut f = Fields::default();
    match format {
        Some(fmt) => parse_with_format(s, fmt, &mut f).map_err(|w| bad(&w))?,
        None => parse_iso(s, &mut f).map_err(|w| bad(&w))?,
    }
    if !(1..=12).contains(&f.month) || f.day < 1 || f.day > days_in_month(f.year, f.month) {
        return Err(bad("The parsed date was invalid"));
    }
    if f.hour > 23 || f.minute > 59 || f.second > 59 {
        return Err(bad("The parsed time was invalid"));
    }
    let days = days_from_civil(f.year, f.month, f.day);
    let local = days * MS_PER_DAY
        + f.hour as i64 * 3_600_000
        + f.minute as i64 * 60_000
        + f.second as i64 * 1000
        + f.ms as i64;
    Ok(DateTime::from_millis(
        local - f.offset.unwrap_or(default_off),
    ))
}

struct Fields {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    ms: u32,
    offset: Option<i64>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            year: 1970,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
            ms: 0,
            offset: None,
        }
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn num(&mut self, min: usize, max: usize) -> Result<u32, String> {
        let start = self.i;
        while self.i < self.b.len() && self.i - start < max && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i - start < min {
            return Err("expected a number".into());
        }
        std::str::from_utf8(&self.b[start..self.i])
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| "bad number".into())
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn done(&self) -> bool {
        self.i >= self.b.len()
    }
    fn offset(&mut self) -> Result<Option<i64>, String> {
        match self.peek() {
            Some(b'Z') => {
                self.i += 1;
                Ok(Some(0))
            }
            Some(b'+') | Some(b'-') => {
                // Candidates are cut by bytes, which may fall inside a multi-byte
                // character of the client's string: such a cut is simply no offset.
                for l in [6usize, 5, 3] {
                    let Some(cand) = self.b.get(self.i..self.i + l) else {
                        continue;
                    };
                    let Ok(cand) = std::str::from_utf8(cand) else {
                        continue;
                    };
                    if let Some(o) = parse_offset(cand) {
                        self.i += l;
                        return Ok(Some(o));
                    }
                }
                Err("invalid time zone offset".into())
            }
            _ => {
                let rest = self.b.get(self.i..).unwrap_or_default();
                let rest = std::str::from_utf8(rest)
                    .map_err(|_| "invalid time zone".to_string())?
                    .trim();
                if rest == "UTC" || rest == "GMT" {
                    self.i = self.b.len();
                    return Ok(Some(0));
                }
                Ok(None)
            }
        }
    }
}

fn parse_iso(s: &str, f: &mut Fields) -> Result<(), String> {
    let mut sc = Scan {
        b: s.trim().as_bytes(),
        i: 0,
    };
    f.year = sc.num(4, 4)? as i64;
    let sep = if sc.eat(b'-') {
        b'-'
    } else if sc.eat(b'/') {
        b'/'
    } else {
        return Err("expected '-'".into());
    };
    f.month = sc.num(1, 2)?;
    if !sc.eat(sep) {
        return Err("expected day".into());
    }
    f.day = sc.num(1, 2)?;
    if sc.eat(b'T') || sc.eat(b' ') || sc.eat(b't') {
        f.hour = sc.num(2, 2)?;
        if !sc.eat(b':') {
            return Err("expected ':'".into());
        }
        f.minute = sc.num(2, 2)?;
        if sc.eat(b':') {
            f.second = sc.num(2, 2)?;
            if sc.eat(b'.') {
                let start = sc.i;
                let frac = sc.num(1, 9)?;
                let len = sc.i - start;
                f.ms = if len >= 3 {
                    frac / 10u32.pow(len as u32 - 3)
                } else {
                    frac * 10u32.pow(3 - len as u32)
                };
            }
        }
        sc.eat(b' ');
        f.offset = sc.offset()?;
    }
    if !sc.done() {
        return Err("trailing data".into());
    }
    Ok(())
}

fn parse_with_format(s: &str, fmt: &str, f: &mut Fields) -> Result<(), String> {
    let mut sc = Scan {
        b: s.as_bytes(),
        i: 0,
    };
    let mut it = fmt.bytes();
    while let Some(c) = it.next() {
        if c != b'%' {
            if !sc.eat(c) {
                return Err(format!("expected '{}'", c as char));
            }
            continue;
        }
        match it.next() {
            Some(b'Y') => f.year = sc.num(4, 4)? as i64,
            Some(b'm') => f.month = sc.num(1, 2)?,
            Some(b'd') => f.day = sc.num(1, 2)?,
            Some(b'H') => f.hour = sc.num(1, 2)?,
            Some(b'M') => f.minute = sc.num(1, 2)?,
            Some(b'S') => f.second = sc.num(1, 2)?,
            Some(b'L') => {
                let start = sc.i;
                let v = sc.num(1, 3)?;
                f.ms = v * 10u32.pow(3 - (sc.i - start) as u32);
            }
            Some(b'j') => {
                let doy = sc.num(1, 3)?;
                let (_, m, d) = civil_from_days(days_from_civil(f.year, 1, 1) + doy as i64 - 1);
                f.month = m;
                f.day = d;
            }
            Some(b'z') | Some(b'Z') => f.offset = sc.offset()?,
            Some(b'%') => {
                if !sc.eat(b'%') {
                    return Err("expected '%'".into());
                }
            }
            Some(other) => {
                return Err(format!("unsupported format character '%{}'", other as char))
            }
            None => return Err("unmatched '%' at end of format string".into()),
        }
    }
    if !sc.done() {
        return Err("trailing data".into());
    }
    Ok(())
}

#[inline(never)]
fn date_from_parts<'e>(slots: &'e [Option<Expr>], cx: &mut Cx<'_, 'e>) -> MongoResult<Bson> {
    const NAMES: [&str; 10] = [
        "year",
        "month",
        "day",
        "hour",
        "minute",
        "second",
        "millisecond",
        "isoWeekYear",
        "isoWeek",
        "isoDayOfWeek",
    ];
    let mut vals: [Option<i64>; 10] = [None; 10];
    for i in 0..10 {
        if let Some(e) = &slots[i] {
            let v = e.ev(cx)?;
            if is_nullish(&v) {
                return Ok(Bson::Null);
            }
            match as_int_exact(&v) {
                Some(n) => vals[i] = Some(n),
                None => {
                    return Err(err(
                        40515,
                        format!(
                            "'{}' must evaluate to an integer, found {} with value {v}",
                            NAMES[i],
                            type_name(&v)
                        ),
                    ))
                }
            }
        }
    }
    let tz = match &slots[10] {
        Some(e) => {
            let v = e.ev(cx)?;
            match timezone_arg(Some(v))? {
                Some(tz) => tz,
                None => return Ok(Bson::Null),
            }
        }
        None => Tz {
            offset_ms: 0,
            named_utc: true,
        },
    };
    let natural = vals[..7].iter().any(Option::is_some) && vals[0].is_some();
    let iso = vals[7..].iter().any(Option::is_some);
    if vals[0].is_some() && iso {
        return Err(err(
            40489,
            "$dateFromParts does not allow mixing natural dates with ISO dates",
        ));
    }
    if vals[0].is_none() && vals[7].is_none() {
        return Err(err(
            40516,
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present",
        ));
    }
    let year = vals[0].or(vals[7]).unwrap();
    if !(1..=9999).contains(&year) {
        let n = if natural { "year" } else { "isoWeekYear" };
        return Err(err(
            40523,
            format!("'{n}' must evaluate to an integer in the range 1 to 9999, found {year}"),
        ));
    }
    for (i, v) in vals.iter().enumerate().skip(1) {
        if let Some(v) = v {
            if !(-32768..=32767).contains(v) {
                return Err(err(31034, format!("'{}' must evaluate to a value in the range [-32768, 32767]; value {v} is not in range", NAMES[i])));
            }
        }
    }
    let time = vals[3].unwrap_or(0) * 3_600_000
        + vals[4].unwrap_or(0) * 60_000
        + vals[5].unwrap_or(0) * 1000
        + vals[6].unwrap_or(0);
    let days = if iso {
        let jan4 = days_from_civil(year, 1, 4);
        let jan4_iso_dow = ((jan4 + 4).rem_euclid(7) + 6) % 7 + 1;
        let monday = jan4 - (jan4_iso_dow - 1);
        monday + (vals[8].unwrap_or(1) - 1) * 7 + vals[9].unwrap_or(1) - 1
    } else {
        let months = year * 12 + vals[1].unwrap_or(1) - 1;
        let (y, m) = (months.div_euclid(12), months.rem_euclid(12) as u32 + 1);
        days_from_civil(y, m, 1) + vals[2].unwrap_or(1) - 1
    };
    Ok(Bson::DateTime(DateTime::from_millis(
        days * MS_PER_DAY + time - tz.fixed_offset(),
    )))
}

#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

fn time_unit(name: &str, v: &Bson) -> MongoResult<Unit> {
    let Bson::String(s) = v else {
        return Err(err(
            5439013,
            format!(
                "{name} requires 'unit' to be a string, but got {}",
                type_name(v)
            ),
        ));
    };
    Ok(match s.as_str() {
        "year" => Unit::Year,
        "quarter" => Unit::Quarter,
        "month" => Unit::Month,
        "week" => Unit::Week,
        "day" => Unit::Day,
        "hour" => Unit::Hour,
        "minute" => Unit::Minute,
        "second" => Unit::Second,
        "millisecond" => Unit::Millisecond,
        other => {
            return Err(err(
                5439014,
                format!(
                    "{name} parameter 'unit' value cannot be recognized as a time unit: {other}"
                ),
            ))
        }
    })
}

fn start_of_week(v: Option<Bson>) -> MongoResult<i64> {
    let Some(v) = v else { return Ok(0) };
    let Bson::String(s) = &v else {
        return Err(err(
            5439015,
            format!(
                "startOfWeek must be a string, found {}",
                type_name_or_missing(&v)
            ),
        ));
    };
    let days = [
        "sunday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
    ];
    let l = s.to_ascii_lowercase();
    days.iter()
        .position(|d| *d == l || d[..3] == l)
        .map(|p| p as i64)
        .ok_or_else(|| err(5439016, format!("unknown day of week: {s}")))
}

fn fixed_unit_ms(u: Unit) -> Option<i64> {
    Some(match u {
        Unit::Week => 7 * MS_PER_DAY,
        Unit::Day => MS_PER_DAY,
        Unit::Hour => 3_600_000,
        Unit::Minute => 60_000,
        Unit::Second => 1000,
        Unit::Millisecond => 1,
        _ => return None,
    })
}

fn months_of(u: Unit) -> i64 {
    match u {
        Unit::Year => 12,
        Unit::Quarter => 3,
        _ => 1,
    }
}

fn date_add(ms: i64, unit: Unit, amount: i64, tz: &Tz) -> MongoResult<i64> {
    let overflow = || err(5166406, "$dateAdd overflowed");
    if let Some(u) = fixed_unit_ms(unit) {
        return amount
            .checked_mul(u)
            .and_then(|d| ms.checked_add(d))
            .ok_or_else(overflow);
    }
    let off = tz.offset_at(ms);
    let local = tz.local(ms);
    let p = Parts::of(local);
    let months = amount.checked_mul(months_of(unit)).ok_or_else(overflow)?;
    let total = (p.year * 12 + p.month as i64 - 1)
        .checked_add(months)
        .ok_or_else(overflow)?;
    let (y, m) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
    if !(-300_000..=300_000).contains(&y) {
        return Err(overflow());
    }
    let d = p.day.min(days_in_month(y, m));
    let time = local.rem_euclid(MS_PER_DAY);
    Ok(days_from_civil(y, m, d) * MS_PER_DAY + time - off)
}

fn date_diff(s: i64, e: i64, unit: Unit, tz: &Tz, sow: i64) -> MongoResult<i64> {
    let (ls, le) = (tz.local(s), tz.local(e));
    Ok(match unit {
        Unit::Millisecond => le
            .checked_sub(ls)
            .ok_or_else(|| err(5166308, "dateDiff overflowed"))?,
        Unit::Week => {
            let w = |l: i64| (l.div_euclid(MS_PER_DAY) + 4 - sow).div_euclid(7);
            w(le) - w(ls)
        }
        u if fixed_unit_ms(u).is_some() => {
            let k = fixed_unit_ms(u).unwrap();
            le.div_euclid(k) - ls.div_euclid(k)
        }
        _ => {
            let (a, b) = (Parts::of(ls), Parts::of(le));
            let (ma, mb) = (
                a.year * 12 + a.month as i64 - 1,
                b.year * 12 + b.month as i64 - 1,
            );
            match unit {
                Unit::Month => mb - ma,
                Unit::Quarter => mb.div_euclid(3) - ma.div_euclid(3),
                _ => b.year - a.year,
            }
        }
    })
}

fn date_trunc(ms: i64, unit: Unit, bin: i64, tz: &Tz, sow: i64) -> MongoResult<i64> {
    // In i128: a huge binSize or a date near the ends of the range must not overflow.
    let off = tz.offset_at(ms) as i128;
    let local = ms as i128 + off;
    let bin = bin as i128;
    const REF_2000: i128 = 946_684_800_000;
    let day = MS_PER_DAY as i128;
    let truncated = match unit {
        Unit::Week => {
            // The first `startOfWeek` day on or after 2000-01-01 (a Saturday).
            let reference = REF_2000 + (sow as i128 - 6).rem_euclid(7) * day;
            let size = 7 * day * bin;
            reference + (local - reference).div_euclid(size) * size
        }
        u if fixed_unit_ms(u).is_some() => {
            let size = fixed_unit_ms(u).unwrap_or(1) as i128 * bin;
            REF_2000 + (local - REF_2000).div_euclid(size) * size
        }
        _ => {
            let p = Parts::of(tz.local(ms));
            let months = (p.year as i128 - 2000) * 12 + p.month as i128 - 1;
            let step = months_of(unit) as i128 * bin;
            let t = months.div_euclid(step) * step + 2000 * 12;
            let year = t.div_euclid(12);
            if !(-300_000_000..=300_000_000).contains(&year) {
                return Err(date_trunc_overflow());
            }
            days_from_civil(year as i64, t.rem_euclid(12) as u32 + 1, 1) as i128 * day
        }
    };
    i64::try_from(truncated - off).map_err(|_| date_trunc_overflow())
}

fn date_trunc_overflow() -> MongoError {
    MongoError::new(ErrorCode::Overflow, "$dateTrunc overflowed")
}

/// `$divide` on two evaluated values (shared with `$avg` on decimals).
pub(crate) fn eval_divide(a: &Bson, b: &Bson) -> MongoResult<Bson> {
    arith_divide(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn sample() -> Document {
        doc! {
            "_id": 1, "a": 5, "b": 2.5, "l": 10i64, "s": "Hello World", "n": null,
            "arr": [1, 2, 3], "docs": [{"x": 1, "y": "p"}, {"x": 2}, {"y": "q"}, 7],
            "nested": {"k": {"v": 42}}, "d": DateTime::from_millis(1_700_000_000_123),
            "big": i32::MAX, "t": true, "e": [],
        }
    }

    fn ev(spec: Bson) -> MongoResult<Bson> {
        Expr::parse(&spec)?.eval(&sample(), &Variables::default())
    }

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(s.parse().unwrap())
    }

    #[track_caller]
    fn check(cases: Vec<(Bson, Bson)>) {
        for (spec, want) in cases {
            let got = ev(spec.clone()).unwrap_or_else(|e| panic!("{spec}: unexpected error {e}"));
            assert_eq!(got, want, "spec {spec}");
        }
    }

    #[track_caller]
    fn check_err(cases: Vec<(Bson, i32)>) {
        for (spec, code) in cases {
            match ev(spec.clone()) {
                Ok(v) => panic!("{spec}: expected error {code}, got {v}"),
                Err(e) => assert_eq!(e.code, code, "spec {spec}: {e}"),
            }
        }
    }

    #[test]
    fn paths_literals_and_variables() {
        check(vec![
            (bson!("$a"), bson!(5)),
            (bson!("$nested.k.v"), bson!(42)),
            (bson!("$docs.x"), bson!([1, 2])),
            (bson!("$docs.y"), bson!(["p", "q"])),
            (bson!("$missing"), Bson::Undefined),
            (bson!("$a.b"), Bson::Undefined),
            (bson!("$$CURRENT.a"), bson!(5)),
            (bson!("$$ROOT.nested.k"), bson!({"v": 42})),
            (bson!("$$REMOVE"), Bson::Undefined),
            (bson!({"$literal": "$a"}), bson!("$a")),
            (bson!(7), bson!(7)),
            (
                bson!({"x": "$a", "y": {"z": "$missing"}, "w": "$$REMOVE"}),
                bson!({"x": 5, "y": {}}),
            ),
            (bson!(["$a", "$missing", 1]), bson!([5, null, 1])),
            (
                bson!({"$let": {"vars": {"x": "$a", "y": 2}, "in": {"$multiply": ["$$x", "$$y"]}}}),
                bson!(10),
            ),
            (
                bson!({"$let": {"vars": {"o": "$nested"}, "in": "$$o.k.v"}}),
                bson!(42),
            ),
        ]);
        let vars = Variables::new()
            .with("who", bson!("me"))
            .with_now(DateTime::from_millis(5));
        let e = Expr::parse(&bson!(["$$who", "$$NOW"])).unwrap();
        assert_eq!(
            e.eval(&doc! {}, &vars).unwrap(),
            bson!(["me", DateTime::from_millis(5)])
        );
        assert_eq!(
            Expr::parse(&bson!("$$ROOT"))
                .unwrap()
                .eval(&doc! {"q": 1}, &vars)
                .unwrap(),
            bson!({"q": 1})
        );
        assert_eq!(
            Expr::parse(&bson!("$missing"))
                .unwrap()
                .eval_opt(&doc! {}, &vars)
                .unwrap(),
            None
        );
        check_err(vec![
            (bson!("$$nope"), 17276),
            (bson!({"$foo": 1}), 168),
            (bson!({"$add": 1, "$sub": 2}), 15983),
            (bson!("$"), 16872),
            (bson!("$a..b"), 15998),
            (bson!({"$let": {"vars": {"Bad": 1}, "in": 1}}), 16867),
            (bson!({"$let": {"in": 1}}), 16876),
        ]);
        let e = ev(bson!({"$foo": 1})).unwrap_err();
        assert_eq!(e.message, "Unrecognized expression '$foo'");
        assert_eq!(e.code_name, "InvalidPipelineOperator");
    }

    #[test]
    fn arithmetic() {
        check(vec![
            (bson!({"$add": [1, 2]}), bson!(3)),
            (bson!({"$add": [1, 2i64]}), bson!(3i64)),
            (bson!({"$add": [1, 2.5]}), bson!(3.5)),
            (
                bson!({"$add": ["$big", 1]}),
                Bson::Int64(i32::MAX as i64 + 1),
            ),
            (
                bson!({"$add": [i64::MAX, 1i64]}),
                Bson::Double(i64::MAX as f64 + 1.0),
            ),
            (bson!({"$add": [1, "$n"]}), Bson::Null),
            (bson!({"$add": [1, "$missing"]}), Bson::Null),
            (
                bson!({"$add": ["$d", 1000]}),
                Bson::DateTime(DateTime::from_millis(1_700_000_001_123)),
            ),
            (bson!({"$add": [dec("1.5"), 1]}), dec("2.5")),
            (bson!({"$subtract": [5, 7]}), bson!(-2)),
            (
                bson!({"$subtract": ["$d", DateTime::from_millis(1_700_000_000_000)]}),
                bson!(123i64),
            ),
            (
                bson!({"$subtract": ["$d", 123]}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_000)),
            ),
            (bson!({"$multiply": [3, 4, 0.5]}), bson!(6.0)),
            (
                bson!({"$multiply": ["$big", 2]}),
                Bson::Int64(i32::MAX as i64 * 2),
            ),
            (bson!({"$divide": [7, 2]}), bson!(3.5)),
            (
                bson!({"$divide": [dec("1"), dec("3")]}),
                dec("0.3333333333333333333333333333333333"),
            ),
            (bson!({"$divide": [dec("10"), 4]}), dec("2.5")),
            (bson!({"$mod": [7, 3]}), bson!(1)),
            (bson!({"$mod": [-7, 3]}), bson!(-1)),
            (bson!({"$mod": [7.5, 2]}), bson!(1.5)),
            (bson!({"$mod": [7i64, 3]}), bson!(1i64)),
            (bson!({"$abs": -3}), bson!(3)),
            (bson!({"$abs": i32::MIN}), Bson::Int64(2147483648)),
            (bson!({"$abs": null}), Bson::Null),
            (bson!({"$ceil": 1.2}), bson!(2.0)),
            (bson!({"$floor": -1.2}), bson!(-2.0)),
            (bson!({"$floor": 3}), bson!(3)),
            (bson!({"$ceil": dec("1.2")}), dec("2")),
            (bson!({"$round": 2.5}), bson!(2.0)),
            (bson!({"$round": 3.5}), bson!(4.0)),
            (bson!({"$round": [1.2345, 2]}), bson!(1.23)),
            (bson!({"$round": [1234, -2]}), bson!(1200)),
            (bson!({"$round": [dec("1.25"), 1]}), dec("1.2")),
            (bson!({"$trunc": [-1.789, 1]}), bson!(-1.7)),
            (bson!({"$trunc": 7.9}), bson!(7.0)),
            (bson!({"$sqrt": 16}), bson!(4.0)),
            (bson!({"$pow": [2, 10]}), bson!(1024)),
            (bson!({"$pow": [2, 40]}), bson!(1099511627776i64)),
            (bson!({"$pow": [2, -1]}), bson!(0.5)),
            (bson!({"$pow": [2.0, 2]}), bson!(4.0)),
            (bson!({"$exp": 0}), bson!(1.0)),
            (bson!({"$ln": 1}), bson!(0.0)),
            (bson!({"$log10": 1000}), bson!(3.0)),
            (bson!({"$log": [8, 2]}), bson!(3.0)),
        ]);
        check_err(vec![
            (bson!({"$divide": [1, 0]}), 2),
            (bson!({"$divide": [1, 0.0]}), 2),
            (bson!({"$divide": ["x", 1]}), 16609),
            (bson!({"$mod": [1, 0]}), 16610),
            (bson!({"$add": ["x", 1]}), 16554),
            (bson!({"$add": ["$d", "$d"]}), 16612),
            (bson!({"$subtract": [1, "$d"]}), 16556),
            (bson!({"$multiply": [1, "x"]}), 16555),
            (bson!({"$subtract": [1]}), 16020),
            (bson!({"$abs": i64::MIN}), 28680),
            (bson!({"$sqrt": -1}), 28714),
            (bson!({"$ln": 0}), 28766),
            (bson!({"$log10": -1}), 28761),
            (bson!({"$log": [8, 1]}), 28759),
            (bson!({"$pow": [0, -1]}), 28764),
            (bson!({"$round": [1, 101]}), 51083),
            (bson!({"$abs": "x"}), 28765),
        ]);
        assert_eq!(
            ev(bson!({"$divide": [1, 0]})).unwrap_err().message,
            "can't $divide by zero"
        );
    }

    #[test]
    fn comparison_boolean_conditional() {
        check(vec![
            (bson!({"$eq": [1, 1.0]}), bson!(true)),
            (bson!({"$eq": ["$missing", null]}), bson!(false)),
            (bson!({"$ne": [1, 2]}), bson!(true)),
            (bson!({"$gt": ["a", 1]}), bson!(true)),
            (bson!({"$gte": [2, 2]}), bson!(true)),
            (bson!({"$lt": [null, 0]}), bson!(true)),
            (bson!({"$lte": [3, 2]}), bson!(false)),
            (bson!({"$cmp": [1, 2]}), bson!(-1)),
            (bson!({"$cmp": ["b", "a"]}), bson!(1)),
            (bson!({"$and": [1, "x", true]}), bson!(true)),
            (bson!({"$and": [1, 0]}), bson!(false)),
            (bson!({"$and": []}), bson!(true)),
            (bson!({"$or": [null, "$missing", 0]}), bson!(false)),
            (bson!({"$or": [false, []]}), bson!(true)),
            (bson!({"$not": [0]}), bson!(true)),
            (bson!({"$not": "$t"}), bson!(false)),
            (bson!({"$cond": [true, 1, 2]}), bson!(1)),
            (
                bson!({"$cond": {"if": {"$gt": ["$a", 10]}, "then": "big", "else": "small"}}),
                bson!("small"),
            ),
            (
                bson!({"$ifNull": ["$missing", "$n", "dflt"]}),
                bson!("dflt"),
            ),
            (bson!({"$ifNull": ["$a", 0]}), bson!(5)),
            (
                bson!({"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": "one"}, {"case": {"$eq": ["$a", 5]}, "then": "five"}], "default": "?"}}),
                bson!("five"),
            ),
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}], "default": 2}}),
                bson!(2),
            ),
            // $and short-circuits: the division by zero is never evaluated
            (bson!({"$and": [false, {"$divide": [1, 0]}]}), bson!(false)),
            (bson!({"$cond": [false, {"$divide": [1, 0]}, 3]}), bson!(3)),
        ]);
        check_err(vec![
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}]}}),
                40066,
            ),
            (bson!({"$switch": {"branches": []}}), 40068),
            (bson!({"$cond": {"then": 1, "else": 2}}), 17080),
            (bson!({"$cond": [1, 2]}), 16020),
            (bson!({"$eq": [1]}), 16020),
        ]);
    }

    #[test]
    fn strings() {
        check(vec![
            (bson!({"$concat": ["a", "-", "$s"]}), bson!("a-Hello World")),
            (bson!({"$concat": ["a", "$missing"]}), Bson::Null),
            (bson!({"$substr": ["$s", 0, 5]}), bson!("Hello")),
            (bson!({"$substrBytes": ["$s", 6, -1]}), bson!("World")),
            (bson!({"$substrCP": ["héllo", 1, 3]}), bson!("éll")),
            (bson!({"$toLower": "$s"}), bson!("hello world")),
            (bson!({"$toUpper": "$s"}), bson!("HELLO WORLD")),
            (bson!({"$toUpper": "$missing"}), bson!("")),
            (bson!({"$toLower": 12}), bson!("12")),
            (bson!({"$strLenBytes": "héllo"}), bson!(6)),
            (bson!({"$strLenCP": "héllo"}), bson!(5)),
            (
                bson!({"$split": ["a,b,,c", ","]}),
                bson!(["a", "b", "", "c"]),
            ),
            (bson!({"$split": [null, ","]}), Bson::Null),
            (bson!({"$trim": {"input": "  x y  "}}), bson!("x y")),
            (
                bson!({"$ltrim": {"input": "xxaxx", "chars": "x"}}),
                bson!("axx"),
            ),
            (
                bson!({"$rtrim": {"input": "xxaxx", "chars": "x"}}),
                bson!("xxa"),
            ),
            (bson!({"$indexOfBytes": ["$s", "o"]}), bson!(4)),
            (bson!({"$indexOfBytes": ["$s", "o", 5]}), bson!(7)),
            (bson!({"$indexOfBytes": ["$s", "z"]}), bson!(-1)),
            (bson!({"$indexOfCP": ["héllo", "l"]}), bson!(2)),
            (bson!({"$indexOfCP": [null, "l"]}), Bson::Null),
            (
                bson!({"$regexMatch": {"input": "$s", "regex": "^hello", "options": "i"}}),
                bson!(true),
            ),
            (
                bson!({"$regexMatch": {"input": "$s", "regex": Bson::RegularExpression(bson::Regex { pattern: "world$".into(), options: "".into() })}}),
                bson!(false),
            ),
            (
                bson!({"$regexMatch": {"input": "$missing", "regex": "a"}}),
                bson!(false),
            ),
            (
                bson!({"$regexFind": {"input": "héllo 42 and 7", "regex": "(\\d)(\\d)?"}}),
                bson!({"match": "42", "idx": 6, "captures": ["4", "2"]}),
            ),
            (
                bson!({"$regexFind": {"input": "abc", "regex": "z"}}),
                Bson::Null,
            ),
            (
                bson!({"$regexFindAll": {"input": "a1b2", "regex": "[0-9]"}}),
                bson!([{"match": "1", "idx": 1, "captures": []}, {"match": "2", "idx": 3, "captures": []}]),
            ),
            (
                bson!({"$replaceOne": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
                bson!("a-bXc"),
            ),
            (
                bson!({"$replaceAll": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
                bson!("a-b-c"),
            ),
            (
                bson!({"$replaceAll": {"input": "$n", "find": "X", "replacement": "-"}}),
                Bson::Null,
            ),
            (bson!({"$strcasecmp": ["abc", "ABC"]}), bson!(0)),
            (bson!({"$strcasecmp": ["abd", "ABC"]}), bson!(1)),
        ]);
        check_err(vec![
            (bson!({"$concat": ["a", 1]}), 16702),
            (bson!({"$strLenBytes": 1}), 34473),
            (bson!({"$strLenCP": "$missing"}), 34471),
            (bson!({"$split": ["a", ""]}), 40087),
            (bson!({"$split": [1, ","]}), 40085),
            (bson!({"$trim": {"input": 1}}), 50699),
            (bson!({"$trim": {"chars": "x"}}), 50695),
            (bson!({"$trim": {"input": "x", "bad": 1}}), 50694),
            (bson!({"$indexOfBytes": [1, "a"]}), 40091),
            (bson!({"$indexOfBytes": ["a", "a", -1]}), 40097),
            (bson!({"$regexMatch": {"input": 1, "regex": "a"}}), 51104),
            (bson!({"$regexMatch": {"input": "a", "regex": 1}}), 51105),
            (bson!({"$regexMatch": {"input": "a", "regex": "("}}), 51111),
            (
                bson!({"$replaceOne": {"input": 1, "find": "a", "replacement": "b"}}),
                51746,
            ),
            (bson!({"$substrBytes": ["héllo", 2, 1]}), 28656),
            (bson!({"$toUpper": [[1]]}), 16007),
        ]);
    }

    #[test]
    fn arrays() {
        check(vec![
            (bson!({"$arrayElemAt": ["$arr", 0]}), bson!(1)),
            (bson!({"$arrayElemAt": ["$arr", -1]}), bson!(3)),
            (bson!({"$arrayElemAt": ["$arr", 5]}), Bson::Undefined),
            (bson!({"$first": "$arr"}), bson!(1)),
            (bson!({"$last": "$arr"}), bson!(3)),
            (bson!({"$first": "$e"}), Bson::Undefined),
            (bson!({"$size": "$arr"}), bson!(3)),
            (bson!({"$slice": ["$arr", 2]}), bson!([1, 2])),
            (bson!({"$slice": ["$arr", -2]}), bson!([2, 3])),
            (bson!({"$slice": ["$arr", 1, 1]}), bson!([2])),
            (bson!({"$slice": ["$arr", -5, 2]}), bson!([1, 2])),
            (
                bson!({"$concatArrays": ["$arr", [4], []]}),
                bson!([1, 2, 3, 4]),
            ),
            (bson!({"$concatArrays": ["$arr", "$missing"]}), Bson::Null),
            (bson!({"$in": [2.0, "$arr"]}), bson!(true)),
            (bson!({"$in": [9, "$arr"]}), bson!(false)),
            (bson!({"$indexOfArray": ["$arr", 2]}), bson!(1)),
            (bson!({"$indexOfArray": ["$arr", 2, 2]}), bson!(-1)),
            (bson!({"$isArray": "$arr"}), bson!(true)),
            (bson!({"$isArray": ["$a"]}), bson!(false)),
            (
                bson!({"$filter": {"input": "$arr", "as": "x", "cond": {"$gte": ["$$x", 2]}}}),
                bson!([2, 3]),
            ),
            (
                bson!({"$filter": {"input": "$arr", "cond": {"$gte": ["$$this", 2]}, "limit": 1}}),
                bson!([2]),
            ),
            (
                bson!({"$filter": {"input": "$missing", "cond": true}}),
                Bson::Null,
            ),
            (
                bson!({"$map": {"input": "$arr", "as": "x", "in": {"$add": ["$$x", "$a"]}}}),
                bson!([6, 7, 8]),
            ),
            (
                bson!({"$map": {"input": "$arr", "in": {"$multiply": ["$$this", 2]}}}),
                bson!([2, 4, 6]),
            ),
            (
                bson!({"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}}),
                bson!(6),
            ),
            (
                bson!({"$reduce": {"input": [[1], [2, 3]], "initialValue": [], "in": {"$concatArrays": ["$$value", "$$this"]}}}),
                bson!([1, 2, 3]),
            ),
            (bson!({"$range": [0, 5, 2]}), bson!([0, 2, 4])),
            (bson!({"$range": [5, 0, -2]}), bson!([5, 3, 1])),
            (bson!({"$range": [0, 3]}), bson!([0, 1, 2])),
            (bson!({"$reverseArray": "$arr"}), bson!([3, 2, 1])),
            (
                bson!({"$zip": {"inputs": [[1, 2, 3], ["a", "b"]]}}),
                bson!([[1, "a"], [2, "b"]]),
            ),
            (
                bson!({"$zip": {"inputs": [[1, 2, 3], ["a"]], "useLongestLength": true, "defaults": [0, "z"]}}),
                bson!([[1, "a"], [2, "z"], [3, "z"]]),
            ),
            (
                bson!({"$arrayToObject": [[["a", 1], ["b", 2]]]}),
                bson!({"a": 1, "b": 2}),
            ),
            (
                bson!({"$arrayToObject": [[{"k": "a", "v": 1}, {"k": "a", "v": 3}]]}),
                bson!({"a": 3}),
            ),
            (
                bson!({"$objectToArray": "$nested.k"}),
                bson!([{"k": "v", "v": 42}]),
            ),
            (
                bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": 1}}),
                bson!([1, 2, 3]),
            ),
            (
                bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": -1}}),
                bson!([3, 2, 1]),
            ),
            (
                bson!({"$sortArray": {"input": [{"v": 2}, {"v": 1}], "sortBy": {"v": 1}}}),
                bson!([{"v": 1}, {"v": 2}]),
            ),
            (
                bson!({"$firstN": {"input": [1, 2, 3], "n": 2}}),
                bson!([1, 2]),
            ),
            (
                bson!({"$lastN": {"input": [1, 2, 3], "n": 2}}),
                bson!([2, 3]),
            ),
            (
                bson!({"$maxN": {"input": [1, null, 3, 2], "n": 2}}),
                bson!([3, 2]),
            ),
            (
                bson!({"$minN": {"input": [4, 1, 3], "n": 2}}),
                bson!([1, 3]),
            ),
        ]);
        check_err(vec![
            (bson!({"$size": "$a"}), 17124),
            (bson!({"$size": "$missing"}), 17124),
            (bson!({"$arrayElemAt": ["$a", 0]}), 28689),
            (bson!({"$arrayElemAt": ["$arr", 1.5]}), 28691),
            (bson!({"$concatArrays": ["$arr", 1]}), 28664),
            (bson!({"$in": [1, "$a"]}), 40081),
            (bson!({"$filter": {"input": 1, "cond": true}}), 28651),
            (bson!({"$filter": {"input": []}}), 28650),
            (bson!({"$map": {"input": 1, "in": 1}}), 16883),
            (
                bson!({"$reduce": {"input": 1, "initialValue": 0, "in": 1}}),
                40080,
            ),
            (bson!({"$range": [0, 5, 0]}), 34449),
            (bson!({"$range": ["a", 5]}), 34443),
            (bson!({"$reverseArray": 1}), 34435),
            (bson!({"$zip": {"inputs": [1]}}), 34468),
            (bson!({"$arrayToObject": [[["a", 1, 2]]]}), 40397),
            (bson!({"$arrayToObject": [[[1, 1]]]}), 40395),
            (bson!({"$arrayToObject": 1}), 40386),
            (bson!({"$objectToArray": 1}), 40390),
            (bson!({"$slice": ["$arr", 1, 0]}), 28729),
            (bson!({"$slice": [1, 1]}), 28724),
            (bson!({"$firstN": {"input": [1], "n": 0}}), 5787908),
            (bson!({"$sortArray": {"input": [1], "sortBy": 2}}), 2942503),
        ]);
    }

    #[test]
    fn sets() {
        check(vec![
            (bson!({"$setUnion": [[1, 2], [2.0, 3]]}), bson!([1, 2, 3])),
            (
                bson!({"$setIntersection": [[1, 2, 3, 3], [3, 2]]}),
                bson!([2, 3]),
            ),
            (bson!({"$setDifference": [[1, 2, 3], [2]]}), bson!([1, 3])),
            (bson!({"$setEquals": [[1, 2], [2, 1, 1]]}), bson!(true)),
            (bson!({"$setEquals": [[1, 2], [2]]}), bson!(false)),
            (bson!({"$setIsSubset": [[1], [1, 2]]}), bson!(true)),
            (bson!({"$setIsSubset": [[3], [1, 2]]}), bson!(false)),
            (bson!({"$allElementsTrue": [[1, true, "x"]]}), bson!(true)),
            (bson!({"$allElementsTrue": [[1, 0]]}), bson!(false)),
            (bson!({"$anyElementTrue": [[0, null, 2]]}), bson!(true)),
            (bson!({"$anyElementTrue": [[]]}), bson!(false)),
            (bson!({"$setUnion": [[1], null]}), Bson::Null),
        ]);
        check_err(vec![
            (bson!({"$setUnion": [[1], 1]}), 17043),
            (bson!({"$setIntersection": [[1], "x"]}), 17047),
            (bson!({"$setDifference": [1, [1]]}), 17048),
            (bson!({"$setDifference": [[1], 1]}), 17049),
            (bson!({"$setEquals": [[1], 1]}), 17044),
            (bson!({"$setIsSubset": [1, [1]]}), 17046),
            (bson!({"$allElementsTrue": 1}), 17040),
        ]);
    }

    #[test]
    fn types_and_conversion() {
        let oid = ObjectId::parse_str("5f1d7f9b8e1b2c3d4e5f6a7b").unwrap();
        check(vec![
            (bson!({"$type": "$a"}), bson!("int")),
            (bson!({"$type": "$l"}), bson!("long")),
            (bson!({"$type": "$b"}), bson!("double")),
            (bson!({"$type": "$missing"}), bson!("missing")),
            (bson!({"$type": "$n"}), bson!("null")),
            (bson!({"$type": "$arr"}), bson!("array")),
            (bson!({"$type": "$nested"}), bson!("object")),
            (bson!({"$type": "$d"}), bson!("date")),
            (bson!({"$isNumber": "$b"}), bson!(true)),
            (bson!({"$isNumber": "$s"}), bson!(false)),
            (bson!({"$toString": 1.5}), bson!("1.5")),
            (bson!({"$toString": 2.0}), bson!("2")),
            (bson!({"$toString": 12i64}), bson!("12")),
            (bson!({"$toString": true}), bson!("true")),
            (
                bson!({"$toString": "$d"}),
                bson!("2023-11-14T22:13:20.123Z"),
            ),
            (bson!({"$toString": oid}), bson!("5f1d7f9b8e1b2c3d4e5f6a7b")),
            (bson!({"$toString": dec("1.50")}), bson!("1.50")),
            (bson!({"$toString": "$missing"}), Bson::Null),
            (bson!({"$toInt": "42"}), bson!(42)),
            (bson!({"$toInt": 4.9}), bson!(4)),
            (bson!({"$toInt": true}), bson!(1)),
            (bson!({"$toLong": "$d"}), bson!(1_700_000_000_123i64)),
            (bson!({"$toLong": "-7"}), bson!(-7i64)),
            (bson!({"$toDouble": "2.5"}), bson!(2.5)),
            (bson!({"$toDouble": 3}), bson!(3.0)),
            (bson!({"$toDouble": dec("0.25")}), bson!(0.25)),
            (bson!({"$toDecimal": 3}), dec("3")),
            (bson!({"$toDecimal": "1.25"}), dec("1.25")),
            (bson!({"$toDecimal": 2.5}), dec("2.50000000000000")),
            (bson!({"$toBool": 0}), bson!(false)),
            (bson!({"$toBool": ""}), bson!(true)),
            (
                bson!({"$toObjectId": "5f1d7f9b8e1b2c3d4e5f6a7b"}),
                Bson::ObjectId(oid),
            ),
            (
                bson!({"$toDate": 86_400_000i64}),
                Bson::DateTime(DateTime::from_millis(86_400_000)),
            ),
            (
                bson!({"$toDate": "1970-01-02T00:00:00Z"}),
                Bson::DateTime(DateTime::from_millis(86_400_000)),
            ),
            (bson!({"$toDate": oid}), Bson::DateTime(oid.timestamp())),
            (
                bson!({"$convert": {"input": "x", "to": "int", "onError": -1}}),
                bson!(-1),
            ),
            (
                bson!({"$convert": {"input": null, "to": "int", "onNull": 0}}),
                bson!(0),
            ),
            (bson!({"$convert": {"input": "5", "to": 16}}), bson!(5)),
            (
                bson!({"$convert": {"input": 5, "to": "string"}}),
                bson!("5"),
            ),
            (bson!({"$convert": {"input": 1, "to": "bool"}}), bson!(true)),
        ]);
        check_err(vec![
            (bson!({"$toInt": "x"}), 241),
            (bson!({"$toInt": "1.5"}), 241),
            (bson!({"$toInt": 3e10}), 241),
            (bson!({"$toInt": f64::NAN}), 241),
            (bson!({"$toObjectId": "zz"}), 241),
            (bson!({"$toDate": true}), 241),
            (bson!({"$convert": {"input": 1, "to": "nope"}}), 2),
            (bson!({"$convert": {"input": 1}}), 34469),
            (bson!({"$convert": {"input": [1], "to": "int"}}), 241),
        ]);
        assert_eq!(
            ev(bson!({"$toInt": "x"})).unwrap_err().code_name,
            "ConversionFailure"
        );
    }

    #[test]
    fn dates() {
        // 2023-11-14T22:13:20.123Z is a Tuesday, day 318 of the year.
        check(vec![
            (bson!({"$year": "$d"}), bson!(2023)),
            (bson!({"$month": "$d"}), bson!(11)),
            (bson!({"$dayOfMonth": "$d"}), bson!(14)),
            (bson!({"$hour": "$d"}), bson!(22)),
            (bson!({"$minute": "$d"}), bson!(13)),
            (bson!({"$second": "$d"}), bson!(20)),
            (bson!({"$millisecond": "$d"}), bson!(123)),
            (bson!({"$dayOfWeek": "$d"}), bson!(3)),
            (bson!({"$dayOfYear": "$d"}), bson!(318)),
            (bson!({"$isoDayOfWeek": "$d"}), bson!(2)),
            (bson!({"$isoWeek": "$d"}), bson!(46)),
            (bson!({"$week": "$d"}), bson!(46)),
            (
                bson!({"$hour": {"date": "$d", "timezone": "+02:00"}}),
                bson!(0),
            ),
            (
                bson!({"$dayOfMonth": {"date": "$d", "timezone": "-0300"}}),
                bson!(14),
            ),
            (bson!({"$year": ["$d"]}), bson!(2023)),
            (bson!({"$year": "$missing"}), Bson::Null),
            (
                bson!({"$dateToString": {"date": "$d"}}),
                bson!("2023-11-14T22:13:20.123Z"),
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M %j %%"}}),
                bson!("2023/11/14 22:13 318 %"),
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%H:%M%z", "timezone": "+05:30"}}),
                bson!("03:43+0530"),
            ),
            (
                bson!({"$dateToString": {"date": "$missing", "onNull": "none"}}),
                bson!("none"),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2023-11-14"}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2023-11-14T22:13:20.123Z"}}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2023-11-15T00:13:20.123+02:00"}}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "14/11/2023", "format": "%d/%m/%Y"}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "garbage", "onError": "bad"}}),
                bson!("bad"),
            ),
            (
                bson!({"$dateFromString": {"dateString": null, "onNull": 0}}),
                bson!(0),
            ),
            (
                bson!({"$dateFromParts": {"year": 2023, "month": 11, "day": 14}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateFromParts": {"year": 2023, "month": 14, "day": 1}}),
                Bson::DateTime(DateTime::from_millis(
                    days_from_civil(2024, 2, 1) * MS_PER_DAY,
                )),
            ),
            (
                bson!({"$dateToParts": {"date": "$d"}}),
                bson!({"year": 2023, "month": 11, "day": 14, "hour": 22, "minute": 13, "second": 20, "millisecond": 123}),
            ),
            (
                bson!({"$dateAdd": {"startDate": DateTime::from_millis(days_from_civil(2023, 1, 31) * MS_PER_DAY), "unit": "month", "amount": 1}}),
                Bson::DateTime(DateTime::from_millis(
                    days_from_civil(2023, 2, 28) * MS_PER_DAY,
                )),
            ),
            (
                bson!({"$dateSubtract": {"startDate": "$d", "unit": "hour", "amount": 22}}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123 - 22 * 3_600_000)),
            ),
            (
                bson!({"$dateDiff": {"startDate": DateTime::from_millis(days_from_civil(2022, 12, 31) * MS_PER_DAY), "endDate": "$d", "unit": "year"}}),
                bson!(1i64),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "day"}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "month"}}),
                Bson::DateTime(DateTime::from_millis(
                    days_from_civil(2023, 11, 1) * MS_PER_DAY,
                )),
            ),
        ]);
        check_err(vec![
            (bson!({"$year": "$s"}), 16006),
            (
                bson!({"$year": {"date": "$d", "timezone": "Mars/Base"}}),
                40485,
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%Q"}}),
                18536,
            ),
            (bson!({"$dateFromString": {"dateString": "garbage"}}), 241),
            (bson!({"$dateFromParts": {"month": 1}}), 40516),
        ]);
        // civil conversions round-trip over a wide range
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        // ISO week-year edge: 2021-01-01 is in week 53 of 2020
        let p = Parts::of(days_from_civil(2021, 1, 1) * MS_PER_DAY);
        assert_eq!(p.iso_week(), (2020, 53));
    }

    #[test]
    fn objects_and_accumulators() {
        check(vec![
            (
                bson!({"$mergeObjects": [{"a": 1, "b": 1}, "$missing", {"b": 2}]}),
                bson!({"a": 1, "b": 2}),
            ),
            (bson!({"$getField": "a"}), bson!(5)),
            (
                bson!({"$getField": {"field": "k", "input": "$nested"}}),
                bson!({"v": 42}),
            ),
            (
                bson!({"$getField": {"field": "a.b", "input": {"$literal": {"a.b": 3}}}}),
                bson!(3),
            ),
            (
                bson!({"$setField": {"field": "z", "input": {"a": 1}, "value": 2}}),
                bson!({"a": 1, "z": 2}),
            ),
            (
                bson!({"$setField": {"field": "a", "input": {"a": 1}, "value": "$$REMOVE"}}),
                bson!({}),
            ),
            (
                bson!({"$unsetField": {"field": "a", "input": {"a": 1, "b": 2}}}),
                bson!({"b": 2}),
            ),
            (bson!({"$sum": "$arr"}), bson!(6)),
            (bson!({"$sum": [1, 2.5, "x"]}), bson!(3.5)),
            (bson!({"$sum": "$missing"}), bson!(0)),
            (bson!({"$avg": "$arr"}), bson!(2.0)),
            (bson!({"$avg": [[]]}), Bson::Null),
            (bson!({"$min": "$arr"}), bson!(1)),
            (bson!({"$max": [1, "$a", null]}), bson!(5)),
            (bson!({"$stdDevPop": [[1, 3]]}), bson!(1.0)),
            (bson!({"$stdDevSamp": [[1]]}), Bson::Null),
        ]);
        check_err(vec![
            (bson!({"$mergeObjects": [1]}), 40400),
            (bson!({"$getField": {"field": 1}}), 3041704),
        ]);
    }

    #[test]
    fn decimal_bits_decode_like_their_text() {
        for text in [
            "0",
            "-0",
            "1.0",
            "123.4500",
            "-9.999999999999999999999999999999999E+6144",
            "1E-6176",
            "NaN",
            "Infinity",
            "-Infinity",
            "42",
        ] {
            let d: bson::Decimal128 = text.parse().unwrap();
            let from_bits = Dec::from_d128(&d);
            let from_text = Dec::parse(&d.to_string()).unwrap();
            assert_eq!(
                from_bits.to_d128().to_string(),
                from_text.to_d128().to_string(),
                "{text}"
            );
        }
    }

    #[test]
    fn decimal_arithmetic() {
        let d = |s: &str| Dec::parse(s).unwrap();
        assert_eq!(d("1.1").add(&d("2.2")).to_d128().to_string(), "3.3");
        assert_eq!(d("1E+3").add(&d("1")).to_d128().to_string(), "1001");
        assert_eq!(d("0.1").mul(&d("0.2")).to_d128().to_string(), "0.02");
        assert_eq!(d("7").rem(&d("3")).to_d128().to_string(), "1");
        assert_eq!(
            d("-7.5").round(0, Rounding::HalfEven).to_d128().to_string(),
            "-8"
        );
        assert_eq!(d("2").sub(&d("2")).to_d128().to_string(), "0");
        assert_eq!(d("123.4500").to_i64_exact(), None);
        assert_eq!(d("1.2E+2").to_i64_exact(), Some(120));
        assert_eq!(
            Dec::from_f64(0.1).to_d128().to_string(),
            "0.100000000000000"
        );
    }

    #[test]
    fn truthiness_and_helpers() {
        assert!(!truthy(&Bson::Undefined));
        assert!(!truthy(&dec("0")));
        assert!(truthy(&bson!([])));
        assert!(truthy(&bson!("")));
        assert_eq!(fmt_double(1e21), "1e+21");
        assert_eq!(fmt_double(0.000001), "1e-06");
        assert_eq!(fmt_double(-2.5), "-2.5");
        let e = Expr::parse(&bson!({"$gt": ["$a", 1]})).unwrap();
        assert!(e.eval_bool(&doc! {"a": 2}, &Variables::default()).unwrap());
        assert_eq!(
            Expr::parse(&bson!("$a.b"))
                .unwrap()
                .as_field_path()
                .as_deref(),
            Some("a.b")
        );
        // constant folding keeps literal object/array expressions cheap
        assert!(Expr::parse(&bson!({"x": [1, 2], "y": "lit"}))
            .unwrap()
            .as_constant()
            .is_some());
    }
}
