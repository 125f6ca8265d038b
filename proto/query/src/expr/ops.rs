//! The operator table: every positional or named-argument operator listed once, with its
//! name (and aliases), its family (which file evaluates it), its positional arity, its
//! named parameters and the error codes of its argument object.
//!
//! `$literal`, `$cond`, `$switch`, `$let`, `$filter`, `$map`, `$reduce` and `$expr` have
//! their own grammar and are parsed in `control.rs`; the regex operators are parsed in
//! `regex.rs`.

use crate::ErrorCode;

/// Where an operator's evaluation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    /// `arith.rs`
    Arith,
    /// `compare.rs` (`$and`/`$or` short-circuit in `eval.rs`)
    Compare,
    /// `$ifNull` (short-circuits in `eval.rs`)
    Control,
    /// `string.rs`
    String,
    /// `regex.rs`
    Regex,
    /// `array.rs`
    Array,
    /// `set.rs`
    Set,
    /// `convert.rs`
    Convert,
    /// `date.rs`: operators over a whole date
    Date,
    /// `date.rs`: `$year`, `$month`, ... (one field of a date; `{date, timezone}` or a date)
    DatePart,
    /// `object.rs`
    Object,
    /// `accumulators.rs`
    Accumulator,
}

/// No upper bound on positional arguments.
const MANY: usize = usize::MAX;

/// Error codes of an argument object when the table gives none: (not an object,
/// unknown argument, missing required argument).
const DEFAULT_NAMED_CODES: (ErrorCode, ErrorCode, ErrorCode) = (
    ErrorCode::ArgumentsNotObject,
    ErrorCode::DateOperatorUnknownArgument,
    ErrorCode::DateOperatorMissingArgument,
);

/// Generates [`Op`] and its per-operator facts from one row per operator:
///
/// ```text
/// Variant "$name" [| "$alias"...] Family [args(min, max)] [named(all...; required...)]
///         [codes(not_an_object, unknown_argument, missing_argument)];
/// ```
///
/// `args` absent: the operator only takes an argument object. `named` absent: it only
/// takes positional arguments. `codes` absent: [`DEFAULT_NAMED_CODES`].
macro_rules! operators {
    (@arity) => { None };
    (@arity $min:expr, $max:expr) => { Some(($min, $max)) };
    (@params) => { (&[], &[]) };
    (@params [$($param:literal),*] [$($required:literal),*]) => {
        (&[$($param),*], &[$($required),*])
    };
    (@codes) => { DEFAULT_NAMED_CODES };
    (@codes $not_object:ident $unknown:ident $missing:ident) => {
        (ErrorCode::$not_object, ErrorCode::$unknown, ErrorCode::$missing)
    };
    ($(
        $op:ident $name:literal $(| $alias:literal)* $family:ident
            $(args($min:expr, $max:expr))?
            $(named($($param:literal),* ; $($required:literal),*))?
            $(codes($not_object:ident, $unknown:ident, $missing:ident))?
        ;
    )*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Op {
            $($op,)*
        }

        impl Op {
            pub(super) fn from_name(name: &str) -> Option<Op> {
                Some(match name {
                    $($name $(| $alias)* => Op::$op,)*
                    _ => return None,
                })
            }

            /// The canonical name (an alias parses to the same operator).
            pub(super) fn name(self) -> &'static str {
                match self {
                    $(Op::$op => $name,)*
                }
            }

            pub(super) fn family(self) -> Family {
                match self {
                    $(Op::$op => Family::$family,)*
                }
            }

            /// (min, max) positional arguments; `None` for operators taking named
            /// arguments only.
            pub(super) fn arity(self) -> Option<(usize, usize)> {
                match self {
                    $(Op::$op => operators!(@arity $($min, $max)?),)*
                }
            }

            /// Named parameters (all, required) for operators that take an argument
            /// object; the slots of `Node::Named` follow `all`.
            pub(super) fn named_params(self) -> (&'static [&'static str], &'static [&'static str]) {
                match self {
                    $(Op::$op => operators!(@params $([$($param),*] [$($required),*])?),)*
                }
            }

            /// Error codes for the argument object: (not an object, unknown argument,
            /// missing required argument).
            pub(super) fn named_arg_codes(self) -> (ErrorCode, ErrorCode, ErrorCode) {
                match self {
                    $(Op::$op => operators!(@codes $($not_object $unknown $missing)?),)*
                }
            }
        }
    };
}

operators! {
    // arithmetic
    Add "$add" Arith args(0, MANY);
    Subtract "$subtract" Arith args(2, 2);
    Multiply "$multiply" Arith args(0, MANY);
    Divide "$divide" Arith args(2, 2);
    Mod "$mod" Arith args(2, 2);
    Abs "$abs" Arith args(1, 1);
    Ceil "$ceil" Arith args(1, 1);
    Floor "$floor" Arith args(1, 1);
    Round "$round" Arith args(1, 2);
    Trunc "$trunc" Arith args(1, 2);
    Sqrt "$sqrt" Arith args(1, 1);
    Pow "$pow" Arith args(2, 2);
    Exp "$exp" Arith args(1, 1);
    Ln "$ln" Arith args(1, 1);
    Log "$log" Arith args(2, 2);
    Log10 "$log10" Arith args(1, 1);
    // comparison
    Eq "$eq" Compare args(2, 2);
    Ne "$ne" Compare args(2, 2);
    Gt "$gt" Compare args(2, 2);
    Gte "$gte" Compare args(2, 2);
    Lt "$lt" Compare args(2, 2);
    Lte "$lte" Compare args(2, 2);
    Cmp "$cmp" Compare args(2, 2);
    // boolean
    And "$and" Compare args(0, MANY);
    Or "$or" Compare args(0, MANY);
    Not "$not" Compare args(1, 1);
    IfNull "$ifNull" Control args(2, MANY);
    // string
    Concat "$concat" String args(0, MANY);
    SubstrBytes "$substrBytes" | "$substr" String args(3, 3);
    SubstrCP "$substrCP" String args(3, 3);
    ToLower "$toLower" String args(1, 1);
    ToUpper "$toUpper" String args(1, 1);
    StrLenBytes "$strLenBytes" String args(1, 1);
    StrLenCP "$strLenCP" String args(1, 1);
    Split "$split" String args(2, 2);
    Trim "$trim" String named("input", "chars"; "input")
        codes(TrimNotObject, TrimUnknownArgument, TrimMissingInput);
    LTrim "$ltrim" String named("input", "chars"; "input")
        codes(TrimNotObject, TrimUnknownArgument, TrimMissingInput);
    RTrim "$rtrim" String named("input", "chars"; "input")
        codes(TrimNotObject, TrimUnknownArgument, TrimMissingInput);
    IndexOfBytes "$indexOfBytes" String args(2, 4);
    IndexOfCP "$indexOfCP" String args(2, 4);
    RegexMatch "$regexMatch" Regex;
    RegexFind "$regexFind" Regex;
    RegexFindAll "$regexFindAll" Regex;
    ReplaceOne "$replaceOne" String
        named("input", "find", "replacement"; "input", "find", "replacement")
        codes(ReplaceNotObject, ReplaceUnknownArgument, ReplaceMissingArgument);
    ReplaceAll "$replaceAll" String
        named("input", "find", "replacement"; "input", "find", "replacement")
        codes(ReplaceNotObject, ReplaceUnknownArgument, ReplaceMissingArgument);
    Strcasecmp "$strcasecmp" String args(2, 2);
    // array
    ArrayElemAt "$arrayElemAt" Array args(2, 2);
    First "$first" Array args(1, 1);
    Last "$last" Array args(1, 1);
    Size "$size" Array args(1, 1);
    Slice "$slice" Array args(2, 3);
    ConcatArrays "$concatArrays" Array args(0, MANY);
    In "$in" Array args(2, 2);
    IndexOfArray "$indexOfArray" Array args(2, 4);
    IsArray "$isArray" Array args(1, 1);
    Range "$range" Array args(2, 3);
    ReverseArray "$reverseArray" Array args(1, 1);
    Zip "$zip" Array
        named("inputs", "useLongestLength", "defaults"; "inputs")
        codes(ZipNotObject, ZipUnknownArgument, ZipMissingInputs);
    ArrayToObject "$arrayToObject" Array args(1, 1);
    ObjectToArray "$objectToArray" Array args(1, 1);
    SortArray "$sortArray" Array named("input", "sortBy"; "input", "sortBy")
        codes(SortArrayNotObject, SortArrayUnknownArgument, SortArrayMissingArgument);
    FirstN "$firstN" Array named("input", "n"; "input", "n")
        codes(ArgumentsNotObject, NAccumulatorUnknownArgument, NAccumulatorMissingN);
    LastN "$lastN" Array named("input", "n"; "input", "n")
        codes(ArgumentsNotObject, NAccumulatorUnknownArgument, NAccumulatorMissingN);
    MaxN "$maxN" Array named("input", "n"; "input", "n")
        codes(ArgumentsNotObject, NAccumulatorUnknownArgument, NAccumulatorMissingN);
    MinN "$minN" Array named("input", "n"; "input", "n")
        codes(ArgumentsNotObject, NAccumulatorUnknownArgument, NAccumulatorMissingN);
    // set
    SetUnion "$setUnion" Set args(0, MANY);
    SetIntersection "$setIntersection" Set args(0, MANY);
    SetDifference "$setDifference" Set args(2, 2);
    SetEquals "$setEquals" Set args(2, MANY);
    SetIsSubset "$setIsSubset" Set args(2, 2);
    AllElementsTrue "$allElementsTrue" Set args(1, 1);
    AnyElementTrue "$anyElementTrue" Set args(1, 1);
    // type
    Type "$type" Convert args(1, 1);
    ToString "$toString" Convert args(1, 1);
    ToInt "$toInt" Convert args(1, 1);
    ToLong "$toLong" Convert args(1, 1);
    ToDouble "$toDouble" Convert args(1, 1);
    ToDecimal "$toDecimal" Convert args(1, 1);
    ToBool "$toBool" Convert args(1, 1);
    ToObjectId "$toObjectId" Convert args(1, 1);
    ToDate "$toDate" Convert args(1, 1);
    // MongoDB answers FailedToParse (9) for $convert's argument object; Bulwark has
    // answered $zip's codes and 34469, kept as they are.
    Convert "$convert" Convert named("input", "to", "onError", "onNull"; "input", "to")
        codes(ZipInputNotArray, ZipDefaultsLengthMismatch, ConvertMissingArgument);
    IsNumber "$isNumber" Convert args(1, 1);
    // date
    Year "$year" DatePart args(1, 1) named("date", "timezone"; "date");
    Month "$month" DatePart args(1, 1) named("date", "timezone"; "date");
    DayOfMonth "$dayOfMonth" DatePart args(1, 1) named("date", "timezone"; "date");
    Hour "$hour" DatePart args(1, 1) named("date", "timezone"; "date");
    Minute "$minute" DatePart args(1, 1) named("date", "timezone"; "date");
    Second "$second" DatePart args(1, 1) named("date", "timezone"; "date");
    Millisecond "$millisecond" DatePart args(1, 1) named("date", "timezone"; "date");
    DayOfWeek "$dayOfWeek" DatePart args(1, 1) named("date", "timezone"; "date");
    DayOfYear "$dayOfYear" DatePart args(1, 1) named("date", "timezone"; "date");
    Week "$week" DatePart args(1, 1) named("date", "timezone"; "date");
    IsoWeek "$isoWeek" DatePart args(1, 1) named("date", "timezone"; "date");
    IsoWeekYear "$isoWeekYear" DatePart args(1, 1) named("date", "timezone"; "date");
    IsoDayOfWeek "$isoDayOfWeek" DatePart args(1, 1) named("date", "timezone"; "date");
    DateToString "$dateToString" Date named("date", "format", "timezone", "onNull"; "date")
        codes(DateToStringNotObject, DateToStringUnknownArgument, DateToStringMissingDate);
    DateFromString "$dateFromString" Date
        named("dateString", "format", "timezone", "onError", "onNull"; "dateString")
        codes(DateFromStringNotObject, DateFromStringUnknownArgument, DateFromStringMissingDateString);
    DateToParts "$dateToParts" Date named("date", "timezone", "iso8601"; "date");
    DateFromParts "$dateFromParts" Date
        named(
            "year", "month", "day", "hour", "minute", "second", "millisecond",
            "isoWeekYear", "isoWeek", "isoDayOfWeek", "timezone";
        );
    DateAdd "$dateAdd" Date
        named("startDate", "unit", "amount", "timezone"; "startDate", "unit", "amount");
    DateSubtract "$dateSubtract" Date
        named("startDate", "unit", "amount", "timezone"; "startDate", "unit", "amount");
    DateDiff "$dateDiff" Date
        named("startDate", "endDate", "unit", "timezone", "startOfWeek";
            "startDate", "endDate", "unit");
    DateTrunc "$dateTrunc" Date
        named("date", "unit", "binSize", "timezone", "startOfWeek"; "date", "unit");
    // object
    MergeObjects "$mergeObjects" Object args(0, MANY);
    GetField "$getField" Object args(1, 1) named("field", "input"; "field")
        codes(ArgumentsNotObject, GetFieldUnknownArgument, GetFieldMissingField);
    SetField "$setField" Object named("field", "input", "value"; "field", "input", "value")
        codes(SetFieldNotObject, SetFieldUnknownArgument, SetFieldMissingArgument);
    UnsetField "$unsetField" Object named("field", "input"; "field", "input")
        codes(SetFieldNotObject, SetFieldUnknownArgument, SetFieldMissingArgument);
    // accumulators as expressions
    Sum "$sum" Accumulator args(0, MANY);
    Avg "$avg" Accumulator args(0, MANY);
    Min "$min" Accumulator args(0, MANY);
    Max "$max" Accumulator args(0, MANY);
    StdDevPop "$stdDevPop" Accumulator args(0, MANY);
    StdDevSamp "$stdDevSamp" Accumulator args(0, MANY);
    // misc
    Rand "$rand" Arith args(0, 0);
    BsonSize "$bsonSize" Object args(1, 1);
    BinarySize "$binarySize" Object args(1, 1);
}

impl Op {
    /// `$year`, `$month`, ...: `{$year: date}` means `{$year: {date: date}}`.
    pub(super) fn is_date_part(self) -> bool {
        self.family() == Family::DatePart
    }
}
