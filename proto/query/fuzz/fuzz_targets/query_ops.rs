//! Structure-aware fuzzing of the `query` crate: filters (`Matcher`), updates
//! (`UpdateSpec`), projections, sorts (and their key-string encoding), aggregation
//! expressions and pipelines, each run against generated documents.
//!
//! The input is a small grammar deriving `Arbitrary` (BSON values of every type, odd UTF-8,
//! extreme numbers, Decimal128, nesting up to the 100-level limit, dotted, numeric,
//! positional and long field paths, operator documents). It is converted to BSON the way a
//! client would send it; anything the server would refuse before calling the query crate
//! (a command nested deeper than `wire::MAX_NESTING_DEPTH`, a document over 16 MiB) is
//! skipped. Errors are fine; a panic, a hang or unbounded memory is a finding.
//!
//! `QUERY_FUZZ_PRINT=1` prints each input as BSON (extended JSON) before running it, for
//! reporting a crash. `QUERY_FUZZ_STACK=<bytes>` runs each input on a thread with that
//! stack (2097152: tokio's blocking threads) instead of the fuzzer's main thread.
#![no_main]

use std::sync::OnceLock;

use bson::{spec::BinarySubtype, Binary, Bson, DateTime, Decimal128, Document};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

use query::agg::{AggContext, Pipeline};
use query::expr::{Expr, Variables};
use query::matcher::Matcher;
use query::projection::Projection;
use query::sort::SortSpec;
use query::update::{UpdateContext, UpdateSpec};
use query::MongoResult;

const MAX_DEPTH: usize = wire::MAX_NESTING_DEPTH;

// ------------------------------------------------------------------------------ tables

#[rustfmt::skip]
const ODD: &[&str] = &[
    "a", "b", "x", "é", "ß", "ǅ", "\u{301}", "e\u{301}", "\u{200b}", "\u{feff}", "€", "😀",
    "👩\u{200d}💻", "中", "\u{10ffff}", " ", "\t", "\n", "$", ".", "0", "1", "-", "+", "%", ":",
    "T", "Z", "Y", "m", "d", "\u{a0}", "\u{2028}", "İ", "ﬀ", "\\", "[", "(", "*", "^", "\0",
    "\u{7f}", "\u{fffd}", "\u{d7ff}", "\u{e000}", "Σ", "ς", "ﬃ", "ΐ", "\u{1f1e6}\u{1f1e8}",
];

#[rustfmt::skip]
const SPECIAL: &[&str] = &[
    "2020-01-01T00:00+0000", "2020-01-01T00:00:00.000Z", "2020-02-30", "1970-01-01", "+0530",
    "-14:00", "+99", "UTC", "GMT", "%Y-%m-%dT%H:%M:%S.%LZ", "%z", "%Z", "%j", "%G-%V-%u", "%",
    "%%", "%d/%m/%Y", "%U", "%w", "%b", "123", "-9223372036854775808", "9223372036854775808",
    "1e400", "-0", "NaN", "-Infinity", "Infinity", "0x10", "1.5", "5f0c8e5e8f1d2a0001a1b2c3",
    "objectId", "int", "long", "decimal", "double", "string", "bool", "date", "null", "day",
    "week", "month", "quarter", "year", "hour", "minute", "second", "millisecond", "monday",
    "sun", "9999-12-31", "0000-01-01T00:00:00", "2020-01-01 00:00:00 UTC", "2020/01/01",
    "1.0E6144", "-1.0E-6176", "9.999999999999999999999999999999999E6144", "Europe/Paris",
    "America/New_York", "+05:30", "-23:59", "Z", "2021-W01-1", "2020-366", "1e-400", "  12  ",
    "textScore", "indexKey", "searchScore", "randVal", "missing", "undefined", "minKey",
    "regex", "javascript", "timestamp", "binData", "object", "array", "number", "maxKey",
];

#[rustfmt::skip]
const FIELDS: &[&str] = &[
    "a", "b", "c", "_id", "0", "1", "é", "arr", "s", "x", "y", "deep", "", "$a", "a b", "i",
    "elem", "10", "-1", "01", "$", "n", "d",
];

/// Array-filter identifiers (`$[x]`) and `$let`/`$map` variable names.
#[rustfmt::skip]
const IDENTS: &[&str] = &["x", "y", "elem", "i", "e", "X", "é", "", "0", "ROOT", "this", "value"];

#[rustfmt::skip]
const VARS: &[&str] = &[
    "$$ROOT", "$$CURRENT", "$$NOW", "$$REMOVE", "$$DESCEND", "$$PRUNE", "$$KEEP",
    "$$CLUSTER_TIME", "$$this", "$$value", "$$x", "$$y", "$$v", "$$", "$$USER_ROLES",
    "$$SEARCH_META", "$$e", "$$elem", "$$i", "$$MISSING",
];

#[rustfmt::skip]
const CMP_OPS: &[&str] = &["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"];
#[rustfmt::skip]
const BIT_OPS: &[&str] = &["$bitsAllSet", "$bitsAnySet", "$bitsAllClear", "$bitsAnyClear"];
#[rustfmt::skip]
const QUERY_OPS: &[&str] = &[
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$type", "$mod",
    "$regex", "$options", "$size", "$all", "$elemMatch", "$not", "$bitsAllSet", "$bitsAnySet",
    "$bitsAllClear", "$bitsAnyClear", "$comment", "$geoWithin", "$geoIntersects", "$near",
    "$nearSphere", "$within", "$box", "$center", "$centerSphere", "$polygon", "$geometry",
    "$maxDistance", "$minDistance", "$where", "$text", "$search", "$jsonSchema", "$expr",
    "$alwaysTrue", "$alwaysFalse", "$and", "$or", "$nor", "$ref", "$id", "$db",
];
#[rustfmt::skip]
const TYPE_NAMES: &[&str] = &[
    "double", "string", "object", "array", "binData", "undefined", "objectId", "bool", "date",
    "null", "regex", "dbPointer", "javascript", "symbol", "javascriptWithScope", "int",
    "timestamp", "long", "decimal", "minKey", "maxKey", "number", "x", "",
];
#[rustfmt::skip]
const UPDATE_OPS: &[&str] = &[
    "$set", "$unset", "$inc", "$mul", "$min", "$max", "$rename", "$setOnInsert",
    "$currentDate", "$push", "$addToSet", "$pop", "$pull", "$pullAll", "$bit", "$each",
    "$foo", "$isolated",
];

/// Expression operators: positional ones take an argument array (or one argument), named
/// ones a document of the arguments in `NAMED_ARGS`.
#[rustfmt::skip]
const EXPR_OPS: &[&str] = &[
    "$abs", "$add", "$allElementsTrue", "$and", "$anyElementTrue", "$arrayElemAt",
    "$arrayToObject", "$avg", "$binarySize", "$bsonSize", "$ceil", "$cmp", "$concat",
    "$concatArrays", "$cond", "$dayOfMonth", "$dayOfWeek", "$dayOfYear", "$divide", "$eq",
    "$exp", "$first", "$floor", "$getField", "$gt", "$gte", "$hour", "$ifNull", "$in",
    "$indexOfArray", "$indexOfBytes", "$indexOfCP", "$isArray", "$isNumber", "$isoDayOfWeek",
    "$isoWeek", "$isoWeekYear", "$last", "$literal", "$ln", "$log", "$log10", "$lt", "$lte",
    "$max", "$mergeObjects", "$millisecond", "$min", "$minute", "$mod", "$month", "$multiply",
    "$ne", "$not", "$objectToArray", "$or", "$pow", "$rand", "$range", "$reverseArray",
    "$round", "$second", "$setDifference", "$setEquals", "$setIntersection", "$setIsSubset",
    "$setUnion", "$size", "$slice", "$split", "$sqrt", "$stdDevPop", "$stdDevSamp",
    "$strLenBytes", "$strLenCP", "$strcasecmp", "$substr", "$substrBytes", "$substrCP",
    "$subtract", "$sum", "$toBool", "$toDate", "$toDecimal", "$toDouble", "$toInt", "$toLong",
    "$toLower", "$toObjectId", "$toString", "$toUpper", "$trunc", "$type", "$week", "$year",
    "$expr", "$foo", "$meta", "$top", "$median",
];
#[rustfmt::skip]
const NAMED_OPS: &[&str] = &[
    "$trim", "$ltrim", "$rtrim", "$replaceOne", "$replaceAll", "$zip", "$sortArray", "$firstN",
    "$lastN", "$maxN", "$minN", "$convert", "$dateToString", "$dateFromString", "$dateToParts",
    "$dateFromParts", "$dateAdd", "$dateSubtract", "$dateDiff", "$dateTrunc", "$setField",
    "$unsetField", "$regexMatch", "$regexFind", "$regexFindAll", "$cond", "$let", "$map",
    "$filter", "$reduce", "$getField", "$switch", "$round", "$year", "$week", "$dayOfWeek",
    "$hour", "$isoWeek", "$millisecond", "$median", "$percentile",
];
#[rustfmt::skip]
const ARG_NAMES: &[&str] = &[
    "input", "chars", "find", "replacement", "inputs", "useLongestLength", "defaults", "sortBy",
    "n", "to", "onError", "onNull", "date", "format", "timezone", "dateString", "iso8601",
    "year", "month", "day", "hour", "minute", "second", "millisecond", "isoWeekYear", "isoWeek",
    "isoDayOfWeek", "startDate", "endDate", "unit", "amount", "binSize", "startOfWeek", "field",
    "value", "regex", "options", "if", "then", "else", "vars", "in", "as", "cond", "limit",
    "initialValue", "branches", "default", "p", "method", "type", "subtype", "place", "x",
];

fn named_args(op: &str) -> &'static [&'static str] {
    match op {
        "$trim" | "$ltrim" | "$rtrim" => &["input", "chars"],
        "$replaceOne" | "$replaceAll" => &["input", "find", "replacement"],
        "$zip" => &["inputs", "useLongestLength", "defaults"],
        "$sortArray" => &["input", "sortBy"],
        "$firstN" | "$lastN" | "$maxN" | "$minN" => &["input", "n"],
        "$convert" => &["input", "to", "onError", "onNull"],
        "$dateToString" => &["date", "format", "timezone", "onNull"],
        "$dateFromString" => &["dateString", "format", "timezone", "onError", "onNull"],
        "$dateToParts" => &["date", "timezone", "iso8601"],
        "$dateFromParts" => &[
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
        "$dateAdd" | "$dateSubtract" => &["startDate", "unit", "amount", "timezone"],
        "$dateDiff" => &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
        "$dateTrunc" => &["date", "unit", "binSize", "timezone", "startOfWeek"],
        "$setField" => &["field", "input", "value"],
        "$unsetField" | "$getField" => &["field", "input"],
        "$regexMatch" | "$regexFind" | "$regexFindAll" => &["input", "regex", "options"],
        "$cond" => &["if", "then", "else"],
        "$let" => &["vars", "in"],
        "$map" => &["input", "as", "in"],
        "$filter" => &["input", "as", "cond", "limit"],
        "$reduce" => &["input", "initialValue", "in"],
        "$switch" => &["branches", "default"],
        "$year" | "$week" | "$dayOfWeek" | "$hour" | "$isoWeek" | "$millisecond" => {
            &["date", "timezone"]
        }
        "$median" | "$percentile" => &["input", "p", "method"],
        _ => ARG_NAMES,
    }
}

#[rustfmt::skip]
const STAGES: &[&str] = &[
    "$addFields", "$bucket", "$bucketAuto", "$changeStream", "$collStats", "$count",
    "$currentOp", "$densify", "$documents", "$facet", "$fill", "$geoNear", "$graphLookup",
    "$group", "$indexStats", "$limit", "$listLocalSessions", "$listSessions", "$lookup",
    "$match", "$merge", "$out", "$planCacheStats", "$project", "$redact", "$replaceRoot",
    "$replaceWith", "$sample", "$search", "$searchMeta", "$set", "$setWindowFields", "$skip",
    "$sort", "$sortByCount", "$unionWith", "$unset", "$unwind", "$foo",
];
#[rustfmt::skip]
const ACCUMULATORS: &[&str] = &[
    "$accumulator", "$addToSet", "$avg", "$bottom", "$bottomN", "$count", "$first", "$firstN",
    "$last", "$lastN", "$max", "$maxN", "$median", "$mergeObjects", "$min", "$minN",
    "$percentile", "$push", "$stdDevPop", "$stdDevSamp", "$sum", "$top", "$topN", "$foo",
];
#[rustfmt::skip]
const STAGE_KEYS: &[&str] = &[
    "from", "localField", "foreignField", "as", "let", "pipeline", "coll", "db",
    "startWith", "connectFromField", "connectToField", "maxDepth", "depthField",
    "restrictSearchWithMatch", "into", "on", "whenMatched", "whenNotMatched", "path",
    "includeArrayIndex", "preserveNullAndEmptyArrays", "groupBy", "boundaries", "default",
    "output", "buckets", "granularity", "size", "newRoot", "field", "range", "step",
    "partitionBy", "sortBy", "bounds", "unit",
];
#[rustfmt::skip]
const SCHEMA_KEYS: &[&str] = &[
    "additionalItems", "additionalProperties", "allOf", "anyOf", "bsonType", "description",
    "enum", "exclusiveMaximum", "exclusiveMinimum", "items", "maxItems", "maxLength",
    "maxProperties", "maximum", "minItems", "minLength", "minProperties", "minimum",
    "multipleOf", "not", "oneOf", "pattern", "patternProperties", "properties", "required",
    "title", "type", "uniqueItems", "dependencies", "$ref",
];
#[rustfmt::skip]
const SCHEMA_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string", "int", "long",
    "double", "decimal", "date", "objectId", "x",
];
#[rustfmt::skip]
const DECIMALS: &[&str] = &[
    "NaN", "-NaN", "Infinity", "-Infinity", "0", "-0", "1E-6176", "-1E+6111",
    "9999999999999999999999999999999999E+6111", "1.5", "-2.5", "1E+40", "9223372036854775807",
    "-9223372036854775809", "0.1", "1E-40", "2147483648", "-2147483649", "0E+6111", "1E+6144",
    "0.5", "-0.5", "1E+308", "1E-324",
];
#[rustfmt::skip]
const REGEX_OPTS: &[&str] = &["", "i", "m", "s", "x", "u", "l", "imsx", "q", "ii", "é"];
#[rustfmt::skip]
const UNITS: &[&str] = &[
    "year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond", "x",
];
#[rustfmt::skip]
const TIMEZONES: &[&str] = &[
    "UTC", "+05:30", "-14", "+9999", "Europe/Paris", "+0é", "GMT", "-00:00", "+24:00", "Z",
    "America/St_Johns", "+1", "", "Asia/Kathmandu",
];
#[rustfmt::skip]
const META: &[&str] = &["textScore", "indexKey", "searchScore", "randVal", "sortKey", "x"];

fn pick<'a>(xs: &[&'a str], i: impl Into<u64>) -> &'a str {
    xs[(i.into() % xs.len() as u64) as usize]
}

fn no_nul(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "")
    } else {
        s
    }
}

// ----------------------------------------------------------------------------- grammar
// Every enum's first variant is a leaf: when the input runs out, `arbitrary` picks it.

#[derive(Arbitrary, Debug)]
enum Str {
    Special(u8),
    Odd(Vec<u8>),
    Raw(String),
    SpecialWith(u8, u16, Box<Str>),
    Repeat(u8, u16),
    Chars(Vec<u32>),
}

impl Str {
    fn build(&self) -> String {
        match self {
            Str::Special(i) => pick(SPECIAL, *i).to_string(),
            Str::Odd(bytes) => bytes.iter().map(|b| pick(ODD, *b)).collect(),
            Str::Raw(s) => s.clone(),
            Str::SpecialWith(i, pos, extra) => {
                let mut s = pick(SPECIAL, *i).to_string();
                let mut p = (*pos as usize) % (s.len() + 1);
                while !s.is_char_boundary(p) {
                    p -= 1;
                }
                s.insert_str(p, &extra.build());
                s
            }
            Str::Repeat(i, n) => pick(ODD, *i).repeat(*n as usize % 4096),
            Str::Chars(cs) => cs
                .iter()
                .map(|c| char::from_u32(c % 0x11_0000).unwrap_or('\u{fffd}'))
                .collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Num {
    Small(i8),
    Extreme(u8),
    I32(i32),
    I64(i64),
    F64(f64),
    Dec(Dec),
}

#[derive(Arbitrary, Debug)]
enum Dec {
    Named(u8),
    Bytes([u8; 16]),
}

impl Dec {
    fn build(&self) -> Decimal128 {
        match self {
            Dec::Named(i) => pick(DECIMALS, *i).parse().expect("valid decimal"),
            Dec::Bytes(b) => Decimal128::from_bytes(*b),
        }
    }
}

impl Num {
    fn build(&self) -> Bson {
        match self {
            Num::Small(i) => Bson::Int32(*i as i32),
            Num::Extreme(i) => match i % 24 {
                0 => Bson::Int32(i32::MIN),
                1 => Bson::Int32(i32::MAX),
                2 => Bson::Int64(i64::MIN),
                3 => Bson::Int64(i64::MAX),
                4 => Bson::Double(f64::NAN),
                5 => Bson::Double(f64::INFINITY),
                6 => Bson::Double(f64::NEG_INFINITY),
                7 => Bson::Double(-0.0),
                8 => Bson::Double(f64::MAX),
                9 => Bson::Double(f64::MIN_POSITIVE),
                10 => Bson::Double(f64::MIN),
                11 => Bson::Double(9.223372036854775807e18),
                12 => Bson::Double(-9.223372036854775808e18),
                13 => Bson::Double(2147483648.0),
                14 => Bson::Double(0.5),
                15 => Bson::Double(-0.5),
                16 => Bson::Double(4.9e-324),
                17 => Bson::Int64(-1),
                18 => Bson::Int64(2_147_483_648),
                19 => Bson::Int32(64),
                20 => Bson::Int32(63),
                21 => Bson::Double(1e300),
                22 => Bson::Int64(253_402_300_800_000),
                _ => Bson::Decimal128(Dec::Named(*i / 24).build()),
            },
            Num::I32(i) => Bson::Int32(*i),
            Num::I64(i) => Bson::Int64(*i),
            Num::F64(f) => Bson::Double(*f),
            Num::Dec(d) => Bson::Decimal128(d.build()),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum DateV {
    Extreme(u8),
    Ms(i64),
}

impl DateV {
    fn build(&self) -> DateTime {
        DateTime::from_millis(match self {
            DateV::Extreme(i) => [
                i64::MIN,
                i64::MAX,
                0,
                -1,
                -62_135_596_800_000,
                253_402_300_799_999,
                253_402_300_800_000,
                1_577_836_800_000,
                -62_167_219_200_001,
                951_782_400_000,
                i64::MIN + 1,
                1_700_000_000_000,
            ][*i as usize % 12],
            DateV::Ms(m) => *m,
        })
    }
}

#[derive(Arbitrary, Debug)]
enum Key {
    Field(u8),
    Op(u8),
    Raw(Str),
    Ident(u8),
}

impl Key {
    fn build(&self) -> String {
        match self {
            Key::Field(i) => pick(FIELDS, *i).to_string(),
            Key::Op(i) => {
                let all = [QUERY_OPS, UPDATE_OPS, EXPR_OPS, STAGES, ACCUMULATORS];
                let t = all[*i as usize % all.len()];
                pick(t, *i / 5).to_string()
            }
            Key::Raw(s) => no_nul(s.build()),
            Key::Ident(i) => pick(IDENTS, *i).to_string(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Val {
    Num(Num),
    Str(Str),
    Bool(bool),
    Null,
    Undefined,
    MinKey,
    MaxKey,
    Date(DateV),
    Oid([u8; 12]),
    Ts(u32, u32),
    Bin(u8, Vec<u8>),
    Regex(Str, u8),
    Symbol(Str),
    Code(Str),
    CodeScope(Str, Vec<(Key, Val)>),
    Doc(Vec<(Key, Val)>),
    Arr(Vec<Val>),
    /// `levels` of nesting (documents, arrays or a mix) around `leaf`, cut at the limit.
    Deep(u8, u8, Box<Val>),
    /// An array of `n` copies of a value.
    Wide(u16, Box<Val>),
}

/// Conversion state: nesting levels still available, and a budget of elements so that a
/// small input cannot expand into gigabytes (the server's 16 MiB limit is checked after).
struct Cx {
    elems: usize,
}

const MAX_ELEMS: usize = 20_000;

impl Cx {
    fn spend(&mut self, n: usize) -> bool {
        if self.elems + n > MAX_ELEMS {
            return false;
        }
        self.elems += n;
        true
    }

    /// `d` is the number of levels of nesting still allowed below this value.
    fn val(&mut self, v: &Val, d: usize) -> Bson {
        self.spend(1);
        match v {
            Val::Num(n) => n.build(),
            Val::Str(s) => Bson::String(self.text(s.build())),
            Val::Bool(b) => Bson::Boolean(*b),
            Val::Null => Bson::Null,
            Val::Undefined => Bson::Undefined,
            Val::MinKey => Bson::MinKey,
            Val::MaxKey => Bson::MaxKey,
            Val::Date(dt) => Bson::DateTime(dt.build()),
            Val::Oid(b) => Bson::ObjectId(bson::oid::ObjectId::from_bytes(*b)),
            Val::Ts(time, increment) => Bson::Timestamp(bson::Timestamp {
                time: *time,
                increment: *increment,
            }),
            Val::Bin(st, bytes) => Bson::Binary(Binary {
                subtype: BinarySubtype::from(*st),
                bytes: {
                    self.spend(bytes.len() / 64);
                    bytes.clone()
                },
            }),
            Val::Regex(p, o) => Bson::RegularExpression(bson::Regex {
                pattern: self.text(no_nul(p.build())),
                options: pick(REGEX_OPTS, *o).to_string(),
            }),
            Val::Symbol(s) => Bson::Symbol(self.text(s.build())),
            Val::Code(s) => Bson::JavaScriptCode(self.text(s.build())),
            Val::CodeScope(code, scope) => {
                let code = self.text(code.build());
                if d == 0 {
                    return Bson::JavaScriptCode(code);
                }
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                    code,
                    scope: self.doc(scope, d - 1),
                })
            }
            Val::Doc(fields) => {
                if d == 0 {
                    return Bson::Null;
                }
                Bson::Document(self.doc(fields, d - 1))
            }
            Val::Arr(items) => {
                if d == 0 {
                    return Bson::Null;
                }
                Bson::Array(items.iter().map(|i| self.val(i, d - 1)).collect())
            }
            Val::Deep(levels, shape, leaf) => {
                let n = (*levels as usize % (MAX_DEPTH + 8)).min(d);
                let mut cur = self.val(leaf, d - n);
                for i in 0..n {
                    let as_doc = match shape % 4 {
                        0 => true,
                        1 => false,
                        2 => i % 2 == 0,
                        _ => (i / 3) % 2 == 0,
                    };
                    cur = if as_doc {
                        let mut doc = Document::new();
                        doc.insert(pick(FIELDS, *shape / 4), cur);
                        Bson::Document(doc)
                    } else {
                        Bson::Array(vec![cur])
                    };
                }
                cur
            }
            Val::Wide(n, leaf) => {
                if d == 0 {
                    return Bson::Null;
                }
                let before = self.elems;
                let one = self.val(leaf, d - 1);
                let cost = (self.elems - before).max(1);
                let n = *n as usize % 5000;
                if !self.spend(n.saturating_mul(cost)) {
                    return Bson::Array(vec![one]);
                }
                Bson::Array(vec![one; n])
            }
        }
    }

    /// A document whose fields may nest `d` more levels.
    fn doc(&mut self, fields: &[(Key, Val)], d: usize) -> Document {
        let mut doc = Document::new();
        for (k, v) in fields {
            let v = self.val(v, d);
            let k = self.text(k.build());
            doc.insert(k, v);
        }
        doc
    }

    /// Charges a string's bytes to the budget (64 bytes cost one element).
    fn text(&mut self, s: String) -> String {
        self.spend(s.len() / 64);
        s
    }
}

#[derive(Arbitrary, Debug)]
enum Comp {
    Field(u8),
    Num(u32),
    Idx(u8),
    Dollar,
    AllPositional,
    Filtered(u8),
    Raw(Str),
    Empty,
}

impl Comp {
    fn build(&self) -> String {
        match self {
            Comp::Field(i) => pick(FIELDS, *i).to_string(),
            Comp::Num(n) => n.to_string(),
            Comp::Idx(i) => (i % 6).to_string(),
            Comp::Dollar => "$".into(),
            Comp::AllPositional => "$[]".into(),
            Comp::Filtered(i) => format!("$[{}]", pick(IDENTS, *i)),
            Comp::Raw(s) => no_nul(s.build()),
            Comp::Empty => String::new(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Path {
    Field(u8),
    Comps(Vec<Comp>),
    /// `n` components, cycling through the given ones: up to past the 200-component limit.
    Long(u16, Vec<Comp>),
    Raw(Str),
    Numeric(u64),
}

impl Path {
    fn build(&self) -> String {
        let s = match self {
            Path::Field(i) => pick(FIELDS, *i).to_string(),
            Path::Comps(cs) if cs.is_empty() => "a".into(),
            Path::Comps(cs) => cs.iter().map(Comp::build).collect::<Vec<_>>().join("."),
            Path::Long(n, cs) => {
                let n = 1 + *n as usize % 420;
                let parts: Vec<String> = if cs.is_empty() {
                    vec!["a".into()]
                } else {
                    cs.iter().map(Comp::build).collect()
                };
                (0..n)
                    .map(|i| parts[i % parts.len()].as_str())
                    .collect::<Vec<_>>()
                    .join(".")
            }
            Path::Raw(s) => s.build(),
            Path::Numeric(n) => format!("a.{n}"),
        };
        no_nul(s)
    }
}

// ----------------------------------------------------------------------------- filters

#[derive(Arbitrary, Debug)]
struct Filter(Vec<Clause>);

#[derive(Arbitrary, Debug)]
enum Clause {
    Field(Path, Pred),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Nor(Vec<Filter>),
    Expr(Ex),
    Comment(Val),
    Where(Str),
    Text(Str),
    JsonSchema(Schema),
    AlwaysTrue(bool),
    Raw(Key, Val),
}

#[derive(Arbitrary, Debug)]
enum Pred {
    Value(Val),
    Ops(Vec<QOp>),
    Regex(Str, u8),
}

#[derive(Arbitrary, Debug)]
enum QOp {
    Cmp(u8, Val),
    In(bool, Vec<Val>),
    Exists(Val),
    Type(TypeArg),
    Mod(Num, Num),
    ModRaw(Val),
    Regex(Str, Option<u8>),
    Size(Val),
    All(Vec<Val>),
    AllElemMatch(Vec<Filter>),
    ElemMatch(Filter),
    ElemMatchPred(Vec<QOp>),
    Not(Box<Pred>),
    Bits(u8, BitsArg),
    Raw(u8, Val),
    Unknown(Str, Val),
}

#[derive(Arbitrary, Debug)]
enum TypeArg {
    Name(u8),
    Num(Num),
    List(Vec<TypeArg>),
}

#[derive(Arbitrary, Debug)]
enum BitsArg {
    Num(Num),
    Positions(Vec<Num>),
    Bin(Vec<u8>),
    Raw(Val),
}

#[derive(Arbitrary, Debug)]
struct Schema(Vec<SchemaKw>);

#[derive(Arbitrary, Debug)]
enum SchemaKw {
    BsonType(u8),
    Type(u8),
    Num(u8, Num),
    Required(Vec<Key>),
    Properties(Vec<(Key, Schema)>),
    PatternProperties(Vec<(Str, Schema)>),
    Items(Box<Schema>),
    ItemsList(Vec<Schema>),
    Logic(u8, Vec<Schema>),
    Not(Box<Schema>),
    Enum(Vec<Val>),
    Pattern(Str),
    Additional(u8, bool),
    AdditionalSchema(u8, Box<Schema>),
    Raw(u8, Val),
}

fn sub_doc(d: &mut Document, k: &str, v: Bson) {
    d.insert(k.to_string(), v);
}

impl Cx {
    /// A filter document; `d` levels may nest below it.
    fn filter(&mut self, f: &Filter, d: usize) -> Document {
        let mut out = Document::new();
        for c in &f.0 {
            if !self.spend(1) {
                break;
            }
            match c {
                Clause::Field(p, pred) => {
                    let v = self.pred(pred, d);
                    out.insert(p.build(), v);
                }
                Clause::And(fs) | Clause::Or(fs) | Clause::Nor(fs) => {
                    let op = match c {
                        Clause::And(_) => "$and",
                        Clause::Or(_) => "$or",
                        _ => "$nor",
                    };
                    if d < 2 {
                        continue;
                    }
                    let list = fs
                        .iter()
                        .map(|f| Bson::Document(self.filter(f, d - 2)))
                        .collect::<Vec<_>>();
                    out.insert(op, list);
                }
                Clause::Expr(e) => {
                    let v = self.expr(e, d);
                    out.insert("$expr", v);
                }
                Clause::Comment(v) => {
                    let v = self.val(v, d);
                    out.insert("$comment", v);
                }
                Clause::Where(s) => {
                    out.insert("$where", s.build());
                }
                Clause::Text(s) => {
                    if d > 0 {
                        let mut t = Document::new();
                        t.insert("$search", s.build());
                        out.insert("$text", t);
                    }
                }
                Clause::JsonSchema(s) => {
                    if d > 0 {
                        let v = self.schema(s, d - 1);
                        out.insert("$jsonSchema", v);
                    }
                }
                Clause::AlwaysTrue(b) => {
                    out.insert(if *b { "$alwaysTrue" } else { "$alwaysFalse" }, 1);
                }
                Clause::Raw(k, v) => {
                    let v = self.val(v, d);
                    out.insert(k.build(), v);
                }
            }
        }
        out
    }

    /// The value of a field in a filter: `d` levels may nest below it.
    fn pred(&mut self, p: &Pred, d: usize) -> Bson {
        match p {
            Pred::Value(v) => self.val(v, d),
            Pred::Regex(s, o) => Bson::RegularExpression(bson::Regex {
                pattern: no_nul(s.build()),
                options: pick(REGEX_OPTS, *o).to_string(),
            }),
            Pred::Ops(ops) => {
                if d == 0 {
                    return Bson::Null;
                }
                Bson::Document(self.ops(ops, d - 1))
            }
        }
    }

    fn ops(&mut self, ops: &[QOp], d: usize) -> Document {
        let mut out = Document::new();
        for op in ops {
            if !self.spend(1) {
                break;
            }
            let (k, v): (String, Bson) = match op {
                QOp::Cmp(i, v) => (pick(CMP_OPS, *i).into(), self.val(v, d)),
                QOp::In(nin, vs) => {
                    if d == 0 {
                        continue;
                    }
                    let list = vs.iter().map(|v| self.val(v, d - 1)).collect();
                    (
                        (if *nin { "$nin" } else { "$in" }).into(),
                        Bson::Array(list),
                    )
                }
                QOp::Exists(v) => ("$exists".into(), self.val(v, d)),
                QOp::Type(t) => ("$type".into(), type_arg(t, d)),
                QOp::Mod(a, b) => {
                    if d == 0 {
                        continue;
                    }
                    ("$mod".into(), Bson::Array(vec![a.build(), b.build()]))
                }
                QOp::ModRaw(v) => ("$mod".into(), self.val(v, d)),
                QOp::Regex(s, o) => {
                    if let Some(o) = o {
                        out.insert("$options", pick(REGEX_OPTS, *o));
                    }
                    ("$regex".into(), Bson::String(s.build()))
                }
                QOp::Size(v) => ("$size".into(), self.val(v, d)),
                QOp::All(vs) => {
                    if d == 0 {
                        continue;
                    }
                    let list = vs.iter().map(|v| self.val(v, d - 1)).collect();
                    ("$all".into(), Bson::Array(list))
                }
                QOp::AllElemMatch(fs) => {
                    if d < 3 {
                        continue;
                    }
                    let list = fs
                        .iter()
                        .map(|f| {
                            let mut em = Document::new();
                            em.insert("$elemMatch", self.filter(f, d - 3));
                            Bson::Document(em)
                        })
                        .collect();
                    ("$all".into(), Bson::Array(list))
                }
                QOp::ElemMatch(f) => {
                    if d == 0 {
                        continue;
                    }
                    ("$elemMatch".into(), Bson::Document(self.filter(f, d - 1)))
                }
                QOp::ElemMatchPred(ops) => {
                    if d == 0 {
                        continue;
                    }
                    ("$elemMatch".into(), Bson::Document(self.ops(ops, d - 1)))
                }
                QOp::Not(p) => ("$not".into(), self.pred(p, d)),
                QOp::Bits(i, arg) => {
                    let v = match arg {
                        BitsArg::Num(n) => n.build(),
                        BitsArg::Positions(ns) if d > 0 => {
                            Bson::Array(ns.iter().map(Num::build).collect())
                        }
                        BitsArg::Positions(_) => Bson::Null,
                        BitsArg::Bin(b) => Bson::Binary(Binary {
                            subtype: BinarySubtype::Generic,
                            bytes: b.clone(),
                        }),
                        BitsArg::Raw(v) => self.val(v, d),
                    };
                    (pick(BIT_OPS, *i).into(), v)
                }
                QOp::Raw(i, v) => (pick(QUERY_OPS, *i).into(), self.val(v, d)),
                QOp::Unknown(s, v) => (no_nul(s.build()), self.val(v, d)),
            };
            out.insert(k, v);
        }
        out
    }

    /// A `$jsonSchema` document; `d` levels may nest below it.
    fn schema(&mut self, s: &Schema, d: usize) -> Document {
        let mut out = Document::new();
        for kw in &s.0 {
            if !self.spend(1) {
                break;
            }
            match kw {
                SchemaKw::BsonType(i) => sub_doc(&mut out, "bsonType", pick(TYPE_NAMES, *i).into()),
                SchemaKw::Type(i) => sub_doc(&mut out, "type", pick(SCHEMA_TYPES, *i).into()),
                SchemaKw::Num(i, n) => {
                    let k = [
                        "minimum",
                        "maximum",
                        "exclusiveMinimum",
                        "exclusiveMaximum",
                        "multipleOf",
                        "minLength",
                        "maxLength",
                        "minItems",
                        "maxItems",
                        "minProperties",
                        "maxProperties",
                        "uniqueItems",
                    ][*i as usize % 12];
                    sub_doc(&mut out, k, n.build());
                }
                SchemaKw::Required(ks) if d > 0 => sub_doc(
                    &mut out,
                    "required",
                    Bson::Array(ks.iter().map(|k| Bson::String(k.build())).collect()),
                ),
                SchemaKw::Properties(ps) if d > 1 => {
                    let mut props = Document::new();
                    for (k, sub) in ps {
                        props.insert(k.build(), self.schema(sub, d - 2));
                    }
                    sub_doc(&mut out, "properties", Bson::Document(props));
                }
                SchemaKw::PatternProperties(ps) if d > 1 => {
                    let mut props = Document::new();
                    for (k, sub) in ps {
                        props.insert(no_nul(k.build()), self.schema(sub, d - 2));
                    }
                    sub_doc(&mut out, "patternProperties", Bson::Document(props));
                }
                SchemaKw::Items(sub) if d > 0 => {
                    let v = self.schema(sub, d - 1);
                    sub_doc(&mut out, "items", Bson::Document(v));
                }
                SchemaKw::ItemsList(subs) if d > 1 => {
                    let v = subs
                        .iter()
                        .map(|s| Bson::Document(self.schema(s, d - 2)))
                        .collect();
                    sub_doc(&mut out, "items", Bson::Array(v));
                }
                SchemaKw::Logic(i, subs) if d > 1 => {
                    let k = ["allOf", "anyOf", "oneOf"][*i as usize % 3];
                    let v = subs
                        .iter()
                        .map(|s| Bson::Document(self.schema(s, d - 2)))
                        .collect();
                    sub_doc(&mut out, k, Bson::Array(v));
                }
                SchemaKw::Not(sub) if d > 0 => {
                    let v = self.schema(sub, d - 1);
                    sub_doc(&mut out, "not", Bson::Document(v));
                }
                SchemaKw::Enum(vs) if d > 0 => {
                    let v = vs.iter().map(|v| self.val(v, d - 1)).collect();
                    sub_doc(&mut out, "enum", Bson::Array(v));
                }
                SchemaKw::Pattern(p) => sub_doc(&mut out, "pattern", Bson::String(p.build())),
                SchemaKw::Additional(i, b) => sub_doc(
                    &mut out,
                    ["additionalProperties", "additionalItems"][*i as usize % 2],
                    Bson::Boolean(*b),
                ),
                SchemaKw::AdditionalSchema(i, sub) if d > 0 => {
                    let v = self.schema(sub, d - 1);
                    sub_doc(
                        &mut out,
                        ["additionalProperties", "additionalItems"][*i as usize % 2],
                        Bson::Document(v),
                    );
                }
                SchemaKw::Raw(i, v) => {
                    let v = self.val(v, d);
                    sub_doc(&mut out, pick(SCHEMA_KEYS, *i), v);
                }
                _ => {}
            }
        }
        out
    }
}

fn type_arg(t: &TypeArg, d: usize) -> Bson {
    match t {
        TypeArg::Name(i) => Bson::String(pick(TYPE_NAMES, *i).into()),
        TypeArg::Num(n) => n.build(),
        TypeArg::List(ts) if d > 0 => Bson::Array(ts.iter().map(|t| type_arg(t, d - 1)).collect()),
        TypeArg::List(_) => Bson::Null,
    }
}

// ------------------------------------------------------------------------- expressions

#[derive(Arbitrary, Debug)]
enum Ex {
    Field(Path),
    Var(u8),
    VarPath(u8, Path),
    Lit(Val),
    Literal(Val),
    Op(u8, Vec<Ex>),
    Op1(u8, Box<Ex>),
    Named(u8, Vec<(u8, NArg)>),
    Obj(Vec<(Key, Ex)>),
    Arr(Vec<Ex>),
    Switch(Vec<(Ex, Ex)>, Option<Box<Ex>>),
    Let(Vec<(u8, Ex)>, Box<Ex>),
}

#[derive(Arbitrary, Debug)]
enum NArg {
    Str(Str),
    E(Ex),
    N(Num),
    D(DateV),
    Unit(u8),
    Tz(u8),
    Ident(u8),
    Sort(Sort),
    List(Vec<Ex>),
}

impl Cx {
    /// An expression; `d` levels may nest below it.
    fn expr(&mut self, e: &Ex, d: usize) -> Bson {
        if !self.spend(1) {
            return Bson::Null;
        }
        match e {
            Ex::Field(p) => Bson::String(format!("${}", p.build())),
            Ex::Var(i) => Bson::String(pick(VARS, *i).into()),
            Ex::VarPath(i, p) => Bson::String(format!("{}.{}", pick(VARS, *i), p.build())),
            Ex::Lit(v) => {
                // A plain document would be an expression object: wrap documents in
                // $literal, one level up.
                let v = self.val(v, d.saturating_sub(1));
                match v {
                    Bson::Document(_) if d > 0 => {
                        let mut l = Document::new();
                        l.insert("$literal", v);
                        Bson::Document(l)
                    }
                    Bson::Document(_) => Bson::Null,
                    v => v,
                }
            }
            Ex::Literal(v) if d > 0 => {
                let mut l = Document::new();
                l.insert("$literal", self.val(v, d - 1));
                Bson::Document(l)
            }
            Ex::Op(i, args) if d > 1 => {
                let args = args.iter().map(|a| self.expr(a, d - 2)).collect::<Vec<_>>();
                let mut o = Document::new();
                o.insert(pick(EXPR_OPS, *i), args);
                Bson::Document(o)
            }
            Ex::Op1(i, arg) if d > 0 => {
                let mut o = Document::new();
                o.insert(pick(EXPR_OPS, *i), self.expr(arg, d - 1));
                Bson::Document(o)
            }
            Ex::Named(i, args) if d > 1 => {
                let op = pick(NAMED_OPS, *i);
                let names = named_args(op);
                let mut a = Document::new();
                for (n, arg) in args {
                    let name = if n & 0x80 != 0 {
                        pick(ARG_NAMES, *n)
                    } else {
                        pick(names, *n)
                    };
                    let v = self.narg(name, arg, d - 2);
                    a.insert(name, v);
                }
                let mut o = Document::new();
                o.insert(op, a);
                Bson::Document(o)
            }
            Ex::Obj(fields) if d > 0 => {
                let mut o = Document::new();
                for (k, v) in fields {
                    let v = self.expr(v, d - 1);
                    o.insert(k.build(), v);
                }
                Bson::Document(o)
            }
            Ex::Arr(items) if d > 0 => {
                Bson::Array(items.iter().map(|i| self.expr(i, d - 1)).collect())
            }
            Ex::Switch(branches, default) if d > 3 => {
                let bs = branches
                    .iter()
                    .map(|(c, t)| {
                        let mut b = Document::new();
                        b.insert("case", self.expr(c, d - 4));
                        b.insert("then", self.expr(t, d - 4));
                        Bson::Document(b)
                    })
                    .collect::<Vec<_>>();
                let mut s = Document::new();
                s.insert("branches", bs);
                if let Some(def) = default {
                    s.insert("default", self.expr(def, d - 2));
                }
                let mut o = Document::new();
                o.insert("$switch", s);
                Bson::Document(o)
            }
            Ex::Let(vars, body) if d > 2 => {
                let mut vs = Document::new();
                for (n, v) in vars {
                    let v = self.expr(v, d - 3);
                    vs.insert(pick(IDENTS, *n), v);
                }
                let mut l = Document::new();
                l.insert("vars", vs);
                l.insert("in", self.expr(body, d - 2));
                let mut o = Document::new();
                o.insert("$let", l);
                Bson::Document(o)
            }
            _ => Bson::Int32(1),
        }
    }

    fn narg(&mut self, name: &str, a: &NArg, d: usize) -> Bson {
        match a {
            NArg::Str(s) => Bson::String(s.build()),
            NArg::E(e) => self.expr(e, d),
            NArg::N(n) => n.build(),
            NArg::D(dt) => Bson::DateTime(dt.build()),
            NArg::Unit(i) => Bson::String(pick(UNITS, *i).into()),
            NArg::Tz(i) => Bson::String(pick(TIMEZONES, *i).into()),
            NArg::Ident(i) => Bson::String(pick(IDENTS, *i).into()),
            NArg::Sort(s) if d > 0 => Bson::Document(self.sort(s, d - 1)),
            NArg::List(es) if d > 0 => {
                let _ = name;
                Bson::Array(es.iter().map(|e| self.expr(e, d - 1)).collect())
            }
            _ => Bson::Null,
        }
    }
}

// ------------------------------------------------------- projections, sorts and updates

#[derive(Arbitrary, Debug)]
struct Proj(Vec<(Path, PV)>);

#[derive(Arbitrary, Debug)]
enum PV {
    Incl(bool),
    Num(Num),
    Slice(Num),
    Slice2(Num, Num),
    SliceRaw(Val),
    ElemMatch(Filter),
    Meta(u8),
    Expr(Ex),
    Nested(Vec<(Key, PV)>),
    Val(Val),
}

#[derive(Arbitrary, Debug)]
struct Sort(Vec<(Path, SV)>);

#[derive(Arbitrary, Debug)]
enum SV {
    Asc,
    Desc,
    Num(Num),
    Meta(u8),
    Natural(Num),
    Val(Val),
}

impl Cx {
    fn proj(&mut self, p: &Proj, d: usize) -> Document {
        let mut out = Document::new();
        for (path, v) in &p.0 {
            let v = self.pv(v, d);
            out.insert(path.build(), v);
        }
        out
    }

    fn pv(&mut self, v: &PV, d: usize) -> Bson {
        if !self.spend(1) {
            return Bson::Int32(1);
        }
        let one = |k: &str, v: Bson| {
            let mut o = Document::new();
            o.insert(k, v);
            Bson::Document(o)
        };
        match v {
            PV::Incl(b) => Bson::Boolean(*b),
            PV::Num(n) => n.build(),
            PV::Slice(n) if d > 0 => one("$slice", n.build()),
            PV::Slice2(a, b) if d > 1 => one("$slice", Bson::Array(vec![a.build(), b.build()])),
            PV::SliceRaw(v) if d > 0 => {
                let v = self.val(v, d - 1);
                one("$slice", v)
            }
            PV::ElemMatch(f) if d > 1 => {
                let f = self.filter(f, d - 2);
                one("$elemMatch", Bson::Document(f))
            }
            PV::Meta(i) if d > 0 => one("$meta", Bson::String(pick(META, *i).into())),
            PV::Expr(e) => self.expr(e, d),
            PV::Nested(fields) if d > 0 => {
                let mut o = Document::new();
                for (k, v) in fields {
                    let v = self.pv(v, d - 1);
                    o.insert(k.build(), v);
                }
                Bson::Document(o)
            }
            PV::Val(v) => self.val(v, d),
            _ => Bson::Int32(0),
        }
    }

    fn sort(&mut self, s: &Sort, d: usize) -> Document {
        let mut out = Document::new();
        for (p, v) in &s.0 {
            let (k, v) = match v {
                SV::Asc => (p.build(), Bson::Int32(1)),
                SV::Desc => (p.build(), Bson::Int32(-1)),
                SV::Num(n) => (p.build(), n.build()),
                SV::Meta(i) if d > 0 => {
                    let mut m = Document::new();
                    m.insert("$meta", pick(META, *i));
                    (p.build(), Bson::Document(m))
                }
                SV::Natural(n) => ("$natural".into(), n.build()),
                SV::Val(v) => (p.build(), self.val(v, d)),
                _ => (p.build(), Bson::Int32(1)),
            };
            out.insert(k, v);
        }
        out
    }
}

#[derive(Arbitrary, Debug)]
enum Update {
    Mods(Vec<(u8, Vec<(Path, UArg)>)>),
    Replace(Vec<(Key, Val)>),
    Pipeline(Vec<Stage>),
    Raw(Val),
}

#[derive(Arbitrary, Debug)]
enum UArg {
    N(Num),
    V(Val),
    Path(Path),
    Each {
        each: Vec<Val>,
        position: Option<Num>,
        slice: Option<Num>,
        sort: Option<SortArg>,
        extra: Option<(Key, Val)>,
    },
    Bit(u8, Num),
    Pull(Pred),
    PullFilter(Filter),
    CurrentDate(u8),
}

#[derive(Arbitrary, Debug)]
enum SortArg {
    Dir(Num),
    Spec(Sort),
}

#[derive(Arbitrary, Debug)]
enum ArrayFilter {
    Ident(u8, Option<Path>, Pred),
    Any(Filter),
}

#[derive(Arbitrary, Debug)]
struct UpdateCase {
    update: Update,
    array_filters: Option<Vec<ArrayFilter>>,
    upsert_filter: Filter,
    matched: Option<u8>,
    upsert_insert: bool,
}

impl Cx {
    /// The `u` of an update statement; `d` levels may nest below it.
    fn update(&mut self, u: &Update, d: usize) -> Bson {
        match u {
            Update::Mods(ops) => {
                let mut out = Document::new();
                for (op, fields) in ops {
                    if d == 0 {
                        break;
                    }
                    let mut f = Document::new();
                    for (p, a) in fields {
                        let v = self.uarg(a, d - 1);
                        f.insert(p.build(), v);
                    }
                    out.insert(pick(UPDATE_OPS, *op), f);
                }
                Bson::Document(out)
            }
            Update::Replace(fields) => Bson::Document(self.doc(fields, d)),
            Update::Pipeline(stages) => self.pipeline(stages, d),
            Update::Raw(v) => self.val(v, d),
        }
    }

    fn uarg(&mut self, a: &UArg, d: usize) -> Bson {
        if !self.spend(1) {
            return Bson::Int32(1);
        }
        match a {
            UArg::N(n) => n.build(),
            UArg::V(v) => self.val(v, d),
            UArg::Path(p) => Bson::String(p.build()),
            UArg::Each {
                each,
                position,
                slice,
                sort,
                extra,
            } if d > 1 => {
                let mut o = Document::new();
                o.insert(
                    "$each",
                    Bson::Array(each.iter().map(|v| self.val(v, d - 2)).collect()),
                );
                if let Some(n) = position {
                    o.insert("$position", n.build());
                }
                if let Some(n) = slice {
                    o.insert("$slice", n.build());
                }
                match sort {
                    Some(SortArg::Dir(n)) => {
                        o.insert("$sort", n.build());
                    }
                    Some(SortArg::Spec(s)) => {
                        let s = self.sort(s, d - 2);
                        o.insert("$sort", s);
                    }
                    None => {}
                }
                if let Some((k, v)) = extra {
                    let v = self.val(v, d - 1);
                    o.insert(k.build(), v);
                }
                Bson::Document(o)
            }
            UArg::Bit(i, n) if d > 0 => {
                let mut o = Document::new();
                o.insert(["and", "or", "xor", "nand"][*i as usize % 4], n.build());
                Bson::Document(o)
            }
            UArg::Pull(p) => self.pred(p, d),
            UArg::PullFilter(f) if d > 0 => Bson::Document(self.filter(f, d - 1)),
            UArg::CurrentDate(i) if d > 0 => {
                let mut o = Document::new();
                o.insert("$type", ["date", "timestamp", "x"][*i as usize % 3]);
                Bson::Document(o)
            }
            _ => Bson::Boolean(true),
        }
    }

    fn array_filter(&mut self, af: &ArrayFilter, d: usize) -> Document {
        match af {
            ArrayFilter::Ident(i, p, pred) => {
                let mut k = pick(IDENTS, *i).to_string();
                if let Some(p) = p {
                    k = format!("{k}.{}", p.build());
                }
                let v = self.pred(pred, d);
                let mut o = Document::new();
                o.insert(k, v);
                o
            }
            ArrayFilter::Any(f) => self.filter(f, d),
        }
    }
}

// ------------------------------------------------------------------------------ stages

#[derive(Arbitrary, Debug)]
enum Stage {
    Limit(Num),
    Skip(Num),
    Match(Filter),
    Project(Proj),
    AddFields(bool, Vec<(Path, Ex)>),
    Unset(Vec<Path>),
    UnsetOne(Path),
    ReplaceWith(Ex),
    ReplaceRoot(Ex),
    Group(Ex, Vec<(Key, u8, AccArg)>),
    Sort(Sort),
    Unwind {
        path: Path,
        index: Option<Str>,
        preserve: Option<Val>,
    },
    UnwindStr(Path),
    Count(Str),
    SortByCount(Ex),
    Bucket {
        group_by: Ex,
        boundaries: Vec<Val>,
        default: Option<Val>,
        output: Vec<(Key, u8, AccArg)>,
    },
    BucketAuto {
        group_by: Ex,
        buckets: Num,
        output: Vec<(Key, u8, AccArg)>,
    },
    Facet(Vec<(Key, Vec<Stage>)>),
    Redact(Ex),
    Sample(Num),
    Documents(Ex),
    Lookup {
        local: Path,
        foreign: Path,
        as_: Path,
        pipeline: Option<Vec<Stage>>,
    },
    UnionWith(Vec<Stage>),
    GraphLookup {
        start_with: Ex,
        from_field: Path,
        to_field: Path,
        as_: Path,
        max_depth: Option<Num>,
        depth_field: Option<Path>,
    },
    Raw(u8, Vec<(u8, Val)>),
    RawVal(u8, Val),
}

#[derive(Arbitrary, Debug)]
enum AccArg {
    E(Ex),
    N(Ex, Num),
    Sorted(Sort, Ex, Option<Num>),
    Percentile(Ex, Vec<Num>, u8),
    Raw(Val),
}

impl Cx {
    /// A pipeline array; `d` levels may nest below it.
    fn pipeline(&mut self, stages: &[Stage], d: usize) -> Bson {
        if d == 0 {
            return Bson::Array(vec![]);
        }
        Bson::Array(
            stages
                .iter()
                .map(|s| Bson::Document(self.stage(s, d - 1)))
                .collect(),
        )
    }

    fn stages(&mut self, stages: &[Stage], d: usize) -> Vec<Document> {
        stages.iter().map(|s| self.stage(s, d)).collect()
    }

    fn accs(&mut self, out: &mut Document, accs: &[(Key, u8, AccArg)], d: usize) {
        for (k, i, a) in accs {
            if d < 2 {
                break;
            }
            let v = match a {
                AccArg::E(e) => self.expr(e, d - 1),
                AccArg::N(e, n) => {
                    let mut o = Document::new();
                    o.insert("input", self.expr(e, d - 2));
                    o.insert("n", n.build());
                    Bson::Document(o)
                }
                AccArg::Sorted(s, e, n) => {
                    let mut o = Document::new();
                    o.insert("sortBy", self.sort(s, d - 2));
                    o.insert("output", self.expr(e, d - 2));
                    if let Some(n) = n {
                        o.insert("n", n.build());
                    }
                    Bson::Document(o)
                }
                AccArg::Percentile(e, ps, m) => {
                    let mut o = Document::new();
                    o.insert("input", self.expr(e, d - 2));
                    if d > 2 {
                        o.insert("p", Bson::Array(ps.iter().map(Num::build).collect()));
                    }
                    o.insert("method", ["approximate", "exact", "x"][*m as usize % 3]);
                    Bson::Document(o)
                }
                AccArg::Raw(v) => self.val(v, d - 1),
            };
            let mut acc = Document::new();
            acc.insert(pick(ACCUMULATORS, *i), v);
            out.insert(k.build(), acc);
        }
    }

    /// One stage document; `d` levels may nest below it.
    fn stage(&mut self, s: &Stage, d: usize) -> Document {
        let mut out = Document::new();
        if !self.spend(1) || d == 0 {
            out.insert("$limit", 1);
            return out;
        }
        let e = d - 1; // levels below the stage's argument
        match s {
            Stage::Limit(n) => {
                out.insert("$limit", n.build());
            }
            Stage::Skip(n) => {
                out.insert("$skip", n.build());
            }
            Stage::Match(f) => {
                let f = self.filter(f, e);
                out.insert("$match", f);
            }
            Stage::Project(p) => {
                let p = self.proj(p, e);
                out.insert("$project", p);
            }
            Stage::AddFields(set, fields) => {
                let mut o = Document::new();
                for (p, x) in fields {
                    let v = self.expr(x, e);
                    o.insert(p.build(), v);
                }
                out.insert(if *set { "$set" } else { "$addFields" }, o);
            }
            Stage::Unset(ps) => {
                out.insert(
                    "$unset",
                    ps.iter()
                        .map(|p| Bson::String(p.build()))
                        .collect::<Vec<_>>(),
                );
            }
            Stage::UnsetOne(p) => {
                out.insert("$unset", p.build());
            }
            Stage::ReplaceWith(x) => {
                let v = self.expr(x, e);
                out.insert("$replaceWith", v);
            }
            Stage::ReplaceRoot(x) => {
                if e > 0 {
                    let mut o = Document::new();
                    o.insert("newRoot", self.expr(x, e - 1));
                    out.insert("$replaceRoot", o);
                }
            }
            Stage::Group(id, accs) => {
                let mut o = Document::new();
                if e > 0 {
                    o.insert("_id", self.expr(id, e - 1));
                }
                self.accs(&mut o, accs, e);
                out.insert("$group", o);
            }
            Stage::Sort(s) => {
                let s = self.sort(s, e);
                out.insert("$sort", s);
            }
            Stage::Unwind {
                path,
                index,
                preserve,
            } => {
                let mut o = Document::new();
                o.insert("path", format!("${}", path.build()));
                if let Some(i) = index {
                    o.insert("includeArrayIndex", i.build());
                }
                if let Some(p) = preserve {
                    if e > 0 {
                        o.insert("preserveNullAndEmptyArrays", self.val(p, e - 1));
                    }
                }
                out.insert("$unwind", o);
            }
            Stage::UnwindStr(p) => {
                out.insert("$unwind", format!("${}", p.build()));
            }
            Stage::Count(s) => {
                out.insert("$count", s.build());
            }
            Stage::SortByCount(x) => {
                let v = self.expr(x, e);
                out.insert("$sortByCount", v);
            }
            Stage::Bucket {
                group_by,
                boundaries,
                default,
                output,
            } => {
                if e > 1 {
                    let mut o = Document::new();
                    o.insert("groupBy", self.expr(group_by, e - 1));
                    o.insert(
                        "boundaries",
                        boundaries
                            .iter()
                            .map(|v| self.val(v, e - 2))
                            .collect::<Vec<_>>(),
                    );
                    if let Some(v) = default {
                        o.insert("default", self.val(v, e - 1));
                    }
                    if !output.is_empty() {
                        let mut out_doc = Document::new();
                        self.accs(&mut out_doc, output, e - 1);
                        o.insert("output", out_doc);
                    }
                    out.insert("$bucket", o);
                }
            }
            Stage::BucketAuto {
                group_by,
                buckets,
                output,
            } => {
                if e > 1 {
                    let mut o = Document::new();
                    o.insert("groupBy", self.expr(group_by, e - 1));
                    o.insert("buckets", buckets.build());
                    if !output.is_empty() {
                        let mut out_doc = Document::new();
                        self.accs(&mut out_doc, output, e - 1);
                        o.insert("output", out_doc);
                    }
                    out.insert("$bucketAuto", o);
                }
            }
            Stage::Facet(facets) => {
                let mut o = Document::new();
                if e > 1 {
                    for (k, stages) in facets {
                        let p = self.pipeline(stages, e - 1);
                        o.insert(k.build(), p);
                    }
                }
                out.insert("$facet", o);
            }
            Stage::Redact(x) => {
                let v = self.expr(x, e);
                out.insert("$redact", v);
            }
            Stage::Sample(n) => {
                let mut o = Document::new();
                o.insert("size", n.build());
                out.insert("$sample", o);
            }
            Stage::Documents(x) => {
                let v = self.expr(x, e);
                out.insert("$documents", v);
            }
            Stage::Lookup {
                local,
                foreign,
                as_,
                pipeline,
            } => {
                let mut o = Document::new();
                o.insert("from", "c");
                o.insert("localField", local.build());
                o.insert("foreignField", foreign.build());
                o.insert("as", as_.build());
                if let Some(p) = pipeline {
                    if e > 0 {
                        let p = self.pipeline(p, e - 1);
                        o.insert("pipeline", p);
                    }
                }
                out.insert("$lookup", o);
            }
            Stage::UnionWith(stages) => {
                let mut o = Document::new();
                o.insert("coll", "c");
                if e > 0 {
                    let p = self.pipeline(stages, e - 1);
                    o.insert("pipeline", p);
                }
                out.insert("$unionWith", o);
            }
            Stage::GraphLookup {
                start_with,
                from_field,
                to_field,
                as_,
                max_depth,
                depth_field,
            } => {
                let mut o = Document::new();
                o.insert("from", "c");
                if e > 0 {
                    o.insert("startWith", self.expr(start_with, e - 1));
                }
                o.insert("connectFromField", from_field.build());
                o.insert("connectToField", to_field.build());
                o.insert("as", as_.build());
                if let Some(n) = max_depth {
                    o.insert("maxDepth", n.build());
                }
                if let Some(p) = depth_field {
                    o.insert("depthField", p.build());
                }
                out.insert("$graphLookup", o);
            }
            Stage::Raw(i, fields) => {
                let mut o = Document::new();
                for (k, v) in fields {
                    if e == 0 {
                        break;
                    }
                    let v = self.val(v, e - 1);
                    o.insert(pick(STAGE_KEYS, *k), v);
                }
                out.insert(pick(STAGES, *i), o);
            }
            Stage::RawVal(i, v) => {
                let v = self.val(v, e);
                out.insert(pick(STAGES, *i), v);
            }
        }
        out
    }
}

// ------------------------------------------------------------------------------- input

#[derive(Arbitrary, Debug)]
enum Case {
    Filter(Filter),
    FilterValue(Pred),
    Update(UpdateCase),
    Projection(Proj, Option<u8>),
    Sort(Sort),
    Expr(Ex),
    Pipeline(Vec<Stage>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    docs: Vec<Vec<(Key, Val)>>,
    vars: Vec<(u8, Val)>,
    now: DateV,
    case: Case,
}

/// What the server would check before handing a command to the query crate: at most
/// `MAX_NESTING_DEPTH` levels below the top, at most 16 MiB (+ the command slack).
fn acceptable(doc: &Document, max_size: usize) -> bool {
    if query::check_document_depth(doc).is_err() {
        return false;
    }
    match bson::to_vec(doc) {
        Ok(bytes) => bytes.len() <= max_size,
        Err(_) => false,
    }
}

fn cmd_ok(cmd: Document) -> bool {
    acceptable(&cmd, wire::MAX_BSON_SIZE + wire::BSON_SIZE_SLACK)
}

fn envelope(name: &str, v: Bson) -> Document {
    let mut d = Document::new();
    d.insert(name, v);
    d
}

/// `$lookup`, `$unionWith` and `$graphLookup` see the input documents as collection "c".
struct Coll(Vec<Document>, Variables);

impl AggContext for Coll {
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>> {
        Ok(if coll == "c" {
            self.0.clone()
        } else {
            Vec::new()
        })
    }
    fn variables(&self) -> Variables {
        self.1.clone()
    }
}

fn print_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| std::env::var_os("QUERY_FUZZ_PRINT").is_some())
}

fn show(what: &str, v: &Bson) {
    if print_enabled() {
        eprintln!("{what}: {}", v.clone().into_relaxed_extjson());
    }
}

fn run(input: &Input) {
    let mut cx = Cx { elems: 0 };
    // Stored documents: each has an _id, at most 100 levels, at most 16 MiB.
    let mut docs = Vec::new();
    for (i, fields) in input.docs.iter().take(6).enumerate() {
        let mut d = Document::new();
        d.insert("_id", i as i32);
        for (k, v) in fields {
            let v = cx.val(v, MAX_DEPTH);
            d.insert(k.build(), v);
        }
        if acceptable(&d, wire::MAX_BSON_SIZE) {
            docs.push(d);
        }
    }
    let mut vars = Variables::new().with_now(input.now.build());
    for (n, v) in &input.vars {
        // `let` variables arrive in a command: {let: {x: v}}.
        vars.set(pick(IDENTS, *n), cx.val(v, MAX_DEPTH - 1));
    }
    if print_enabled() {
        for (n, v) in &input.vars {
            show(
                &format!("let {}", pick(IDENTS, *n)),
                &cx.val(v, MAX_DEPTH - 1),
            );
        }
        for d in &docs {
            show("doc", &Bson::Document(d.clone()));
        }
    }
    // Each case builds the client's document at the depth it has in its command.
    match &input.case {
        Case::Filter(f) => {
            // {find: "c", filter: {...}}
            let f = cx.filter(f, MAX_DEPTH - 1);
            show("filter", &Bson::Document(f.clone()));
            if !cmd_ok(envelope("filter", Bson::Document(f.clone()))) {
                return;
            }
            if let Ok(m) = Matcher::new(&f) {
                let m = m.with_variables(vars.clone());
                let _ = m.is_match_all();
                for d in &docs {
                    let _ = m.matches_checked(d);
                    let _ = m.matches_with_position(d);
                }
            }
            let _ = query::update::upsert_seed(&f);
        }
        Case::FilterValue(p) => {
            // {$pull: {a: <cond>}} sits in {update, updates: [{u: {$pull: {a: <cond>}}}]}.
            let v = cx.pred(p, MAX_DEPTH - 4);
            show("cond", &v);
            if let Ok(m) = Matcher::new_for_value(&v) {
                for d in &docs {
                    for x in d.values() {
                        let _ = m.matches_value(x);
                    }
                }
            }
        }
        Case::Update(uc) => {
            // {update: "c", updates: [{q: {...}, u: ..., arrayFilters: [...]}]}
            let u = cx.update(&uc.update, MAX_DEPTH - 3);
            let q = cx.filter(&uc.upsert_filter, MAX_DEPTH - 3);
            let afs = uc.array_filters.as_ref().map(|afs| {
                afs.iter()
                    .map(|af| cx.array_filter(af, MAX_DEPTH - 4))
                    .collect::<Vec<_>>()
            });
            show("update", &u);
            show("q", &Bson::Document(q.clone()));
            if let Some(afs) = &afs {
                show(
                    "arrayFilters",
                    &Bson::Array(afs.iter().cloned().map(Bson::Document).collect()),
                );
            }
            let mut stmt = Document::new();
            stmt.insert("q", q.clone());
            stmt.insert("u", u.clone());
            if let Some(afs) = &afs {
                stmt.insert(
                    "arrayFilters",
                    afs.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
                );
            }
            if !cmd_ok(envelope("updates", Bson::Array(vec![Bson::Document(stmt)]))) {
                return;
            }
            if let Ok(spec) = UpdateSpec::parse(&u, afs.as_deref()) {
                let spec = spec.with_variables(vars.clone());
                let _ = spec.is_replacement();
                let _ = spec.is_pipeline();
                let now = input.now.build();
                for d in &docs {
                    let mut d = d.clone();
                    let mut ctx = UpdateContext::new(now);
                    ctx.matched_array_index = uc.matched.map(|m| m as usize % 8);
                    ctx.is_upsert_insert = uc.upsert_insert;
                    if spec.apply(&mut d, &ctx).is_ok() {
                        // The shard stores the result only if it passes its checks.
                        let _ = query::check_document_depth(&d);
                    }
                }
                let _ = spec.upsert_document(&q, now);
            }
        }
        Case::Projection(p, pos) => {
            // {find: "c", projection: {...}}
            let p = cx.proj(p, MAX_DEPTH - 1);
            show("projection", &Bson::Document(p.clone()));
            if !cmd_ok(envelope("projection", Bson::Document(p.clone()))) {
                return;
            }
            if let Ok(p) = Projection::new(&p) {
                let _ = (
                    p.is_inclusion(),
                    p.requires_match_position(),
                    p.is_identity(),
                );
                for d in &docs {
                    let _ = p.apply(d);
                    let _ = p.apply_with_position(d, pos.map(|x| x as usize % 8));
                }
            }
        }
        Case::Sort(s) => {
            // {find: "c", sort: {...}}
            let s = cx.sort(s, MAX_DEPTH - 1);
            show("sort", &Bson::Document(s.clone()));
            if !cmd_ok(envelope("sort", Bson::Document(s.clone()))) {
                return;
            }
            if let Ok(spec) = SortSpec::new(&s) {
                let mut sorted = docs.clone();
                sorted.sort_by(|a, b| spec.compare(a, b));
                let desc = spec.descending_flags();
                for d in &sorted {
                    let k = spec.sort_key(d);
                    let enc = query::keystring::encode_key(&k, &desc);
                    // The key string must decode back to the values that made it.
                    if let Ok(back) = query::keystring::decode_key(&enc, &desc, k.len()) {
                        assert_eq!(back.len(), k.len(), "decode_key returned another count");
                    }
                }
                // Key strings sort like the documents (ties are fine either way).
                for w in sorted.windows(2) {
                    let (a, b) = (spec.sort_key(&w[0]), spec.sort_key(&w[1]));
                    if spec.compare_keys(&a, &b) == std::cmp::Ordering::Less {
                        let (ea, eb) = (
                            query::keystring::encode_key(&a, &desc),
                            query::keystring::encode_key(&b, &desc),
                        );
                        assert!(ea <= eb, "key strings out of order: {a:?} {b:?}");
                    }
                }
            }
        }
        Case::Expr(x) => {
            // {aggregate: "c", pipeline: [{$project: {r: <expr>}}]}
            let e = cx.expr(x, MAX_DEPTH - 3);
            show("expr", &e);
            if !cmd_ok(envelope("expr", e.clone())) {
                return;
            }
            if let Ok(e) = Expr::parse(&e) {
                for d in &docs {
                    let _ = e.eval(d, &vars);
                    let _ = e.eval_bool(d, &vars);
                }
            }
        }
        Case::Pipeline(stages) => {
            // {aggregate: "c", pipeline: [...]}
            let stages = cx.stages(stages, MAX_DEPTH - 2);
            let arr = Bson::Array(stages.iter().cloned().map(Bson::Document).collect());
            show("pipeline", &arr);
            if !cmd_ok(envelope("pipeline", arr)) {
                return;
            }
            if let Ok(p) = Pipeline::parse(&stages) {
                let _ = (
                    p.leading_match(),
                    p.output_stage(),
                    p.referenced_collections(),
                );
                let ctx = Coll(docs.clone(), vars.clone());
                let _ = p.run_with(docs, &ctx, &vars);
            }
        }
    }
}

fn stack_size() -> Option<usize> {
    static S: OnceLock<Option<usize>> = OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("QUERY_FUZZ_STACK")
            .ok()
            .and_then(|s| s.parse().ok())
    })
}

fuzz_target!(|input: Input| {
    match stack_size() {
        None => run(&input),
        Some(size) => std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .stack_size(size)
                .spawn_scoped(s, || run(&input))
                .expect("spawn");
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }),
    }
});
