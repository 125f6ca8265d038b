//! A seeded, bounded fuzz test: random filters, updates, projections, sorts, expressions
//! and pipelines (odd UTF-8, every BSON type, extreme numbers, long, dotted and numeric
//! paths, deep nesting) run against random documents. Errors are fine; a panic is a bug.
//!
//! `QUERY_FUZZ_SEED` and `QUERY_FUZZ_ITERS` override the seed and the iteration count.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Decimal128, Document};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::agg::{NoCollections, Pipeline};
use crate::expr::{Expr, Variables};
use crate::matcher::Matcher;
use crate::projection::Projection;
use crate::sort::SortSpec;
use crate::update::{UpdateContext, UpdateSpec};

const DEFAULT_SEED: u64 = 0x5eed_b01d_face;
const DEFAULT_ITERS: usize = 20_000;

struct Gen {
    rng: StdRng,
}

const ODD_CHARS: &[&str] = &[
    "a",
    "b",
    "x",
    "é",
    "ß",
    "ǅ",
    "\u{301}",
    "e\u{301}",
    "\u{200b}",
    "\u{feff}",
    "€",
    "😀",
    "👩\u{200d}💻",
    "中",
    "\u{10ffff}",
    " ",
    "\t",
    "\n",
    "$",
    ".",
    "0",
    "1",
    "-",
    "+",
    "%",
    ":",
    "T",
    "Z",
    "Y",
    "m",
    "d",
    "\u{a0}",
    "\u{2028}",
    "İ",
    "ﬀ",
    "\\",
    "[",
    "(",
    "*",
    "^",
];

const FIELDS: &[&str] = &[
    "a", "b", "c", "_id", "0", "1", "é", "x.y", "a.b", "arr", "s",
];

const QUERY_OPS: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$mod",
    "$regex",
    "$size",
    "$all",
    "$elemMatch",
    "$not",
    "$bitsAllSet",
    "$bitsAnySet",
    "$bitsAllClear",
    "$bitsAnyClear",
    "$options",
    "$comment",
];

/// Every update operator the server knows.
const UPDATE_OPS: &[&str] = crate::update::MODIFIERS;

/// Expression operators with a typical positional argument count (None: named form).
const EXPR_OPS: &[(&str, Option<usize>)] = &[
    ("$add", Some(2)),
    ("$subtract", Some(2)),
    ("$multiply", Some(2)),
    ("$divide", Some(2)),
    ("$mod", Some(2)),
    ("$abs", Some(1)),
    ("$ceil", Some(1)),
    ("$floor", Some(1)),
    ("$round", Some(2)),
    ("$trunc", Some(2)),
    ("$sqrt", Some(1)),
    ("$pow", Some(2)),
    ("$exp", Some(1)),
    ("$ln", Some(1)),
    ("$log", Some(2)),
    ("$log10", Some(1)),
    ("$eq", Some(2)),
    ("$cmp", Some(2)),
    ("$lt", Some(2)),
    ("$and", Some(2)),
    ("$or", Some(2)),
    ("$not", Some(1)),
    ("$ifNull", Some(2)),
    ("$concat", Some(3)),
    ("$substr", Some(3)),
    ("$substrBytes", Some(3)),
    ("$substrCP", Some(3)),
    ("$toLower", Some(1)),
    ("$toUpper", Some(1)),
    ("$strLenBytes", Some(1)),
    ("$strLenCP", Some(1)),
    ("$split", Some(2)),
    ("$indexOfBytes", Some(4)),
    ("$indexOfCP", Some(4)),
    ("$strcasecmp", Some(2)),
    ("$arrayElemAt", Some(2)),
    ("$first", Some(1)),
    ("$last", Some(1)),
    ("$size", Some(1)),
    ("$slice", Some(3)),
    ("$concatArrays", Some(2)),
    ("$in", Some(2)),
    ("$indexOfArray", Some(4)),
    ("$isArray", Some(1)),
    ("$range", Some(3)),
    ("$reverseArray", Some(1)),
    ("$arrayToObject", Some(1)),
    ("$objectToArray", Some(1)),
    ("$setUnion", Some(2)),
    ("$setIntersection", Some(2)),
    ("$setDifference", Some(2)),
    ("$setEquals", Some(2)),
    ("$setIsSubset", Some(2)),
    ("$allElementsTrue", Some(1)),
    ("$anyElementTrue", Some(1)),
    ("$type", Some(1)),
    ("$toString", Some(1)),
    ("$toInt", Some(1)),
    ("$toLong", Some(1)),
    ("$toDouble", Some(1)),
    ("$toDecimal", Some(1)),
    ("$toBool", Some(1)),
    ("$toObjectId", Some(1)),
    ("$toDate", Some(1)),
    ("$isNumber", Some(1)),
    ("$year", Some(1)),
    ("$month", Some(1)),
    ("$dayOfMonth", Some(1)),
    ("$hour", Some(1)),
    ("$week", Some(1)),
    ("$isoWeek", Some(1)),
    ("$isoWeekYear", Some(1)),
    ("$dayOfYear", Some(1)),
    ("$mergeObjects", Some(2)),
    ("$sum", Some(2)),
    ("$avg", Some(2)),
    ("$min", Some(2)),
    ("$max", Some(2)),
    ("$stdDevPop", Some(2)),
    ("$bsonSize", Some(1)),
    ("$binarySize", Some(1)),
    ("$getField", Some(1)),
    ("$literal", Some(1)),
    ("$trim", None),
    ("$ltrim", None),
    ("$rtrim", None),
    ("$replaceOne", None),
    ("$replaceAll", None),
    ("$zip", None),
    ("$sortArray", None),
    ("$firstN", None),
    ("$lastN", None),
    ("$maxN", None),
    ("$minN", None),
    ("$convert", None),
    ("$dateToString", None),
    ("$dateFromString", None),
    ("$dateToParts", None),
    ("$dateFromParts", None),
    ("$dateAdd", None),
    ("$dateSubtract", None),
    ("$dateDiff", None),
    ("$dateTrunc", None),
    ("$setField", None),
    ("$unsetField", None),
    ("$regexMatch", None),
    ("$regexFind", None),
    ("$regexFindAll", None),
    ("$cond", None),
    ("$switch", None),
    ("$let", None),
    ("$map", None),
    ("$filter", None),
    ("$reduce", None),
];

/// Named arguments of the named-form operators above, as (name, kind) pairs; the kind
/// steers the value generated (any value, a string, a number, a unit, a format...).
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
        "$unsetField" => &["field", "input"],
        "$regexMatch" | "$regexFind" | "$regexFindAll" => &["input", "regex", "options"],
        "$cond" => &["if", "then", "else"],
        "$let" => &["vars", "in"],
        "$map" => &["input", "as", "in"],
        "$filter" => &["input", "as", "cond", "limit"],
        "$reduce" => &["input", "initialValue", "in"],
        _ => &[],
    }
}

impl Gen {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.rng.gen_range(0..xs.len())]
    }

    fn string(&mut self) -> String {
        let n = match self.rng.gen_range(0..10) {
            0 => 0,
            1..=7 => self.rng.gen_range(1..8),
            8 => self.rng.gen_range(8..40),
            _ => self.rng.gen_range(40..300),
        };
        let mut s = String::new();
        for _ in 0..n {
            if self.chance(0.15) {
                // Any scalar value but NUL.
                let c = loop {
                    let c = char::from_u32(self.rng.gen_range(1..0x11_0000));
                    if let Some(c) = c {
                        break c;
                    }
                };
                s.push(c);
            } else {
                let c = *self.pick(ODD_CHARS);
                s.push_str(c);
            }
        }
        s
    }

    /// Strings shaped like what date, number and type parsers look at.
    fn special_string(&mut self) -> String {
        let base = *self.pick(&[
            "2020-01-01T00:00+0000",
            "2020-01-01T00:00:00.000Z",
            "2020-02-30",
            "1970-01-01",
            "+0530",
            "-14:00",
            "+99",
            "UTC",
            "GMT",
            "%Y-%m-%dT%H:%M:%S.%LZ",
            "%z",
            "%Z",
            "%j",
            "%G-%V-%u",
            "%",
            "123",
            "-9223372036854775808",
            "9223372036854775808",
            "1e400",
            "-0",
            "NaN",
            "-Infinity",
            "0x10",
            "1.5",
            "5f0c8e5e8f1d2a0001a1b2c3",
            "objectId",
            "int",
            "long",
            "decimal",
            "double",
            "string",
            "bool",
            "date",
            "null",
            "day",
            "week",
            "month",
            "quarter",
            "year",
            "hour",
            "millisecond",
            "monday",
            "sun",
            "9999-12-31",
            "0000-01-01T00:00:00",
            "2020-01-01 00:00:00 UTC",
            "2020/01/01",
            "1.0E6144",
            "-1.0E-6176",
            "9.999999999999999999999999999999999E6144",
        ]);
        let mut s = base.to_string();
        if self.chance(0.5) {
            let pos = self.rng.gen_range(0..=s.len());
            if s.is_char_boundary(pos) {
                let extra = self.string();
                s.insert_str(pos, &extra);
            }
        }
        s
    }

    fn key(&mut self) -> String {
        if self.chance(0.7) {
            self.pick(FIELDS).to_string()
        } else {
            self.string().replace('\0', "")
        }
    }

    fn path(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => {
                let n = self.rng.gen_range(2..300);
                (0..n)
                    .map(|i| if i % 3 == 2 { "0" } else { "a" })
                    .collect::<Vec<_>>()
                    .join(".")
            }
            1 => vec!["a"; self.rng.gen_range(90..110)].join("."),
            2 => format!("a.{}", self.rng.gen::<u64>()),
            3 => format!("arr.{}.b", self.rng.gen_range(0..5)),
            4 => self.string(),
            5 => format!("a.{}", self.string()),
            6 => "a.$".to_string(),
            7 => "a.$[].b".to_string(),
            8 => format!("{}.{}", self.key(), self.key()),
            _ => self.pick(FIELDS).to_string(),
        }
    }

    /// Mostly paths an update accepts, sometimes anything.
    fn update_path(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0..=2 => self.path(),
            3 => format!("arr.{}.b", *self.pick(&["$", "$[]", "$[x]", "0", "7"])),
            4 => format!("a.{}", self.rng.gen_range(0..3_000_000)),
            5 => vec!["a"; self.rng.gen_range(95..105)].join("."),
            _ => {
                let k = self.key().replace(['.', '$'], "");
                if k.is_empty() {
                    "a".to_string()
                } else {
                    k
                }
            }
        }
    }

    fn number(&mut self) -> Bson {
        match self.rng.gen_range(0..22) {
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
            10 => Bson::Double(self.rng.gen_range(-1e20..1e20)),
            11 => Bson::Decimal128(self.decimal()),
            12 => Bson::Int64(-1),
            13 => Bson::Int32(0),
            14 => Bson::Double(9.2e18),
            15 => Bson::Double(-9.3e18),
            16 => Bson::Int32(self.rng.gen_range(-5..100)),
            17 => Bson::Int64(self.rng.gen::<i64>()),
            18 => Bson::Double(0.5),
            19 => Bson::Int32(self.rng.gen_range(-2_000_000_000..2_000_000_000)),
            _ => Bson::Int32(self.rng.gen_range(-3..4)),
        }
    }

    fn decimal(&mut self) -> Decimal128 {
        if self.chance(0.5) {
            let s = *self.pick(&[
                "NaN",
                "-NaN",
                "Infinity",
                "-Infinity",
                "0",
                "-0",
                "1E-6176",
                "-1E+6111",
                "9999999999999999999999999999999999E+6111",
                "1.5",
                "-2.5",
                "1E+40",
                "9223372036854775807",
                "-9223372036854775809",
                "0.1",
                "1E-40",
            ]);
            s.parse().expect("valid decimal")
        } else {
            let mut b = [0u8; 16];
            self.rng.fill(&mut b);
            Decimal128::from_bytes(b)
        }
    }

    fn scalar(&mut self) -> Bson {
        match self.rng.gen_range(0..20) {
            0..=4 => self.number(),
            5 | 6 => Bson::String(self.string()),
            7 => Bson::String(self.special_string()),
            8 => Bson::Boolean(self.chance(0.5)),
            9 => Bson::Null,
            10 => Bson::Undefined,
            11 => Bson::MinKey,
            12 => Bson::MaxKey,
            13 => Bson::DateTime(DateTime::from_millis(match self.rng.gen_range(0..4) {
                0 => i64::MIN,
                1 => i64::MAX,
                2 => self.rng.gen(),
                _ => self.rng.gen_range(-1_000_000_000_000..5_000_000_000_000),
            })),
            14 => Bson::ObjectId(ObjectId::from_bytes(self.rng.gen())),
            15 => Bson::Timestamp(bson::Timestamp {
                time: self.rng.gen(),
                increment: self.rng.gen(),
            }),
            16 => Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: (0..self.rng.gen_range(0..20))
                    .map(|_| self.rng.gen())
                    .collect(),
            }),
            17 => Bson::RegularExpression(bson::Regex {
                pattern: if self.chance(0.5) {
                    self.string()
                } else {
                    "^a.*".to_string()
                },
                options: self.pick(&["", "i", "ms", "x", "u", "q"]).to_string(),
            }),
            18 => Bson::Symbol(self.string()),
            _ => Bson::JavaScriptCode(self.string()),
        }
    }

    fn value(&mut self, depth: usize) -> Bson {
        if depth == 0 || self.chance(0.55) {
            return self.scalar();
        }
        if self.chance(0.05) {
            return self.deep_value();
        }
        if self.chance(0.5) {
            let n = self.rng.gen_range(0..5);
            Bson::Array((0..n).map(|_| self.value(depth - 1)).collect())
        } else {
            Bson::Document(self.document(depth - 1))
        }
    }

    fn deep_value(&mut self) -> Bson {
        let levels = self.rng.gen_range(50..100);
        let mut v = self.scalar();
        for i in 0..levels {
            v = if i % 2 == 0 {
                Bson::Array(vec![v])
            } else {
                Bson::Document(doc! {"a": v})
            };
        }
        v
    }

    fn document(&mut self, depth: usize) -> Document {
        let mut d = Document::new();
        for _ in 0..self.rng.gen_range(0..5) {
            let k = self.key();
            let v = self.value(depth);
            d.insert(k, v);
        }
        d
    }

    fn input_doc(&mut self) -> Document {
        let mut d = self.document(4);
        d.insert("_id", self.rng.gen_range(0..5));
        if self.chance(0.5) {
            d.insert("a", self.value(3));
        }
        if self.chance(0.3) {
            d.insert(
                "arr",
                Bson::Array(
                    (0..4)
                        .map(|i| Bson::Document(doc! {"b": i, "0": [i]}))
                        .collect(),
                ),
            );
        }
        if self.chance(0.4) {
            d.insert("s", Bson::String(self.special_string()));
        }
        if self.chance(0.2) {
            d.insert("deep", self.deep_value());
        }
        d
    }

    // ------------------------------------------------------------------ filters

    fn filter(&mut self, depth: usize) -> Document {
        let mut f = Document::new();
        for _ in 0..self.rng.gen_range(0..3) {
            if depth > 0 && self.chance(0.2) {
                let op = *self.pick(&["$and", "$or", "$nor"]);
                let n = self.rng.gen_range(0..3);
                let list: Vec<Bson> = (0..n)
                    .map(|_| Bson::Document(self.filter(depth - 1)))
                    .collect();
                f.insert(op, list);
            } else if self.chance(0.05) {
                f.insert("$expr", self.expr(depth.min(3)));
            } else {
                let p = self.path();
                let v = self.predicate(depth);
                f.insert(p, v);
            }
        }
        f
    }

    fn predicate(&mut self, depth: usize) -> Bson {
        if self.chance(0.3) {
            return self.value(2);
        }
        let mut d = Document::new();
        for _ in 0..self.rng.gen_range(1..3) {
            let op = *self.pick(QUERY_OPS);
            let arg = match op {
                "$in" | "$nin" | "$all" => Bson::Array(
                    (0..self.rng.gen_range(0..4))
                        .map(|_| self.value(1))
                        .collect(),
                ),
                "$mod" => Bson::Array(vec![self.number(), self.number()]),
                "$elemMatch" if depth > 0 => {
                    if self.chance(0.5) {
                        Bson::Document(self.filter(depth - 1))
                    } else {
                        self.predicate(depth - 1)
                    }
                }
                "$not" if depth > 0 => self.predicate(depth - 1),
                "$type" => {
                    if self.chance(0.5) {
                        self.number()
                    } else {
                        Bson::String(self.pick(&["number", "string", "int", "x"]).to_string())
                    }
                }
                "$regex" => Bson::String(self.string()),
                "$bitsAllSet" | "$bitsAnySet" | "$bitsAllClear" | "$bitsAnyClear" => {
                    if self.chance(0.5) {
                        self.number()
                    } else {
                        Bson::Array(vec![self.number(), Bson::Int32(63), Bson::Int32(64)])
                    }
                }
                _ => self.value(2),
            };
            d.insert(op, arg);
        }
        Bson::Document(d)
    }

    // ------------------------------------------------------------------ expressions

    fn expr(&mut self, depth: usize) -> Bson {
        if depth == 0 || self.chance(0.3) {
            return match self.rng.gen_range(0..6) {
                0 => Bson::String(format!("${}", self.path())),
                1 => Bson::String(
                    self.pick(&[
                        "$$ROOT",
                        "$$CURRENT.a",
                        "$$NOW",
                        "$$REMOVE",
                        "$$this",
                        "$$value",
                        "$$x",
                    ])
                    .to_string(),
                ),
                2 => Bson::String(format!("${}", self.pick(FIELDS))),
                _ => {
                    let v = self.value(2);
                    // Plain strings starting with '$' are paths; keep some literal.
                    if matches!(&v, Bson::Document(_)) {
                        Bson::Document(doc! {"$literal": v})
                    } else {
                        v
                    }
                }
            };
        }
        let (op, arity) = *self.pick(EXPR_OPS);
        match arity {
            Some(n) => {
                let n = if self.chance(0.2) {
                    self.rng.gen_range(0..5)
                } else {
                    n
                };
                let args: Vec<Bson> = (0..n).map(|_| self.arg(op, depth - 1)).collect();
                if n == 1 && self.chance(0.5) {
                    Bson::Document(doc! {op: args.into_iter().next().unwrap_or(Bson::Null)})
                } else {
                    Bson::Document(doc! {op: args})
                }
            }
            None => {
                let mut d = Document::new();
                for name in named_args(op) {
                    if self.chance(0.8) {
                        let v = self.named_arg(op, name, depth - 1);
                        d.insert(*name, v);
                    }
                }
                if op == "$switch" {
                    let branches: Vec<Bson> = (0..self.rng.gen_range(0..3))
                        .map(|_| {
                            Bson::Document(
                                doc! {"case": self.expr(depth - 1), "then": self.expr(depth - 1)},
                            )
                        })
                        .collect();
                    d.insert("branches", branches);
                    if self.chance(0.5) {
                        d.insert("default", self.expr(depth - 1));
                    }
                }
                Bson::Document(doc! {op: d})
            }
        }
    }

    fn arg(&mut self, op: &str, depth: usize) -> Bson {
        match (op, self.rng.gen_range(0..4)) {
            ("$range", 0) => Bson::Int32(self.rng.gen_range(-2_000_000_000..2_000_000_000)),
            (
                "$range" | "$slice" | "$substr" | "$substrCP" | "$substrBytes" | "$round"
                | "$trunc" | "$indexOfCP" | "$indexOfArray" | "$arrayElemAt",
                _,
            ) => self.number(),
            ("$toDate" | "$toInt" | "$toDecimal" | "$toObjectId", 0) => {
                Bson::String(self.special_string())
            }
            _ => self.expr(depth),
        }
    }

    fn named_arg(&mut self, op: &str, name: &str, depth: usize) -> Bson {
        let special = self.chance(0.6);
        match name {
            "unit" if special => Bson::String(
                self.pick(&[
                    "day",
                    "week",
                    "month",
                    "quarter",
                    "year",
                    "hour",
                    "millisecond",
                    "x",
                ])
                .to_string(),
            ),
            "timezone" if special => Bson::String(
                self.pick(&["UTC", "+05:30", "-14", "+9999", "Europe/Paris", "+0é"])
                    .to_string(),
            ),
            "format" | "dateString" | "startOfWeek" | "to" if special => {
                Bson::String(self.special_string())
            }
            "amount" | "binSize" | "n" | "limit" | "year" | "month" | "day" | "hour"
            | "millisecond" | "isoWeekYear" | "isoWeek" | "isoDayOfWeek" | "minute" | "second"
                if special =>
            {
                self.number()
            }
            "startDate" | "endDate" | "date" if special => {
                Bson::DateTime(DateTime::from_millis(*self.pick(&[
                    i64::MIN,
                    i64::MAX,
                    0,
                    -62_135_596_800_000,
                    253_402_300_799_999,
                ])))
            }
            "sortBy" => {
                if self.chance(0.5) {
                    Bson::Int32(*self.pick(&[1, -1, 2]))
                } else {
                    Bson::Document(doc! {self.path(): 1})
                }
            }
            "as" => Bson::String(self.pick(&["this", "x", "X", "é", ""]).to_string()),
            "vars" => Bson::Document(doc! {"x": self.expr(depth), "y": 1}),
            "find" | "replacement" | "chars" | "regex" | "options" if special => {
                Bson::String(self.string())
            }
            "inputs" | "defaults" => Bson::Array(
                (0..self.rng.gen_range(0..3))
                    .map(|_| self.expr(depth))
                    .collect(),
            ),
            "field" => Bson::String(self.key()),
            _ => {
                let _ = op;
                self.expr(depth)
            }
        }
    }

    // ------------------------------------------------------------------ updates etc.

    fn update(&mut self) -> Bson {
        if self.chance(0.15) {
            return Bson::Array(
                self.pipeline(true)
                    .into_iter()
                    .map(Bson::Document)
                    .collect(),
            );
        }
        if self.chance(0.1) {
            return Bson::Document(self.document(3));
        }
        let mut u = Document::new();
        for _ in 0..self.rng.gen_range(1..3) {
            let op = *self.pick(UPDATE_OPS);
            let mut fields = Document::new();
            for _ in 0..self.rng.gen_range(1..3) {
                let p = self.update_path();
                let v = match op {
                    "$rename" => Bson::String(self.update_path()),
                    "$push" | "$addToSet" if self.chance(0.5) => Bson::Document(doc! {
                        "$each": Bson::Array((0..3).map(|_| self.value(2)).collect()),
                        "$position": self.number(),
                        "$slice": self.number(),
                        "$sort": if self.chance(0.5) { Bson::Int32(-1) } else { Bson::Document(doc! {self.path(): 1}) },
                    }),
                    "$pull" => self.predicate(2),
                    "$bit" => {
                        Bson::Document(doc! {*self.pick(&["and", "or", "xor"]): self.number()})
                    }
                    "$inc" | "$mul" | "$pop" => self.number(),
                    _ => self.value(3),
                };
                fields.insert(p, v);
            }
            u.insert(op, fields);
        }
        Bson::Document(u)
    }

    fn projection(&mut self) -> Document {
        let mut p = Document::new();
        for _ in 0..self.rng.gen_range(1..4) {
            let v = match self.rng.gen_range(0..6) {
                0 => Bson::Int32(1),
                1 => Bson::Int32(0),
                2 => Bson::Document(
                    doc! {"$slice": if self.chance(0.5) { self.number() } else { Bson::Array(vec![self.number(), self.number()]) }},
                ),
                3 => Bson::Document(doc! {"$elemMatch": self.filter(1)}),
                4 => self.expr(2),
                _ => Bson::Document(doc! {self.key(): 1}),
            };
            p.insert(self.path(), v);
        }
        p
    }

    fn pipeline(&mut self, update_only: bool) -> Vec<Document> {
        let n = self.rng.gen_range(1..4);
        (0..n)
            .map(|_| {
                let k = if update_only { self.rng.gen_range(0..4) } else { self.rng.gen_range(0..14) };
                match k {
                    0 => doc! {"$set": {self.key(): self.expr(3)}},
                    1 => doc! {"$project": self.projection()},
                    2 => doc! {"$unset": self.path()},
                    3 => doc! {"$replaceWith": self.expr(2)},
                    4 => doc! {"$match": self.filter(2)},
                    5 => doc! {"$group": {"_id": self.expr(2), "n": {"$sum": 1}, "p": {"$push": self.expr(1)}, "m": {"$mergeObjects": self.expr(1)}}},
                    6 => doc! {"$sort": {self.path(): *self.pick(&[1, -1])}},
                    7 => doc! {"$limit": self.number()},
                    8 => doc! {"$skip": self.number()},
                    9 => doc! {"$unwind": {"path": format!("${}", self.path()), "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}},
                    10 => doc! {"$bucketAuto": {"groupBy": self.expr(1), "buckets": self.number()}},
                    11 => doc! {"$facet": {"f": [{"$count": "c"}]}},
                    12 => doc! {"$redact": {"$cond": [self.expr(1), "$$DESCEND", "$$PRUNE"]}},
                    _ => doc! {"$sortByCount": format!("${}", self.path())},
                }
            })
            .collect()
    }
}

fn run_case(g: &mut Gen) -> String {
    let docs: Vec<Document> = (0..g.rng.gen_range(1..4)).map(|_| g.input_doc()).collect();
    let vars = Variables::new().with("x", g.value(2));
    match g.rng.gen_range(0..7) {
        0 => {
            let f = g.filter(3);
            let desc = format!("filter {f}");
            if let Ok(m) = Matcher::new(&f) {
                for d in &docs {
                    let _ = m.matches_checked(d);
                    let _ = m.matches_with_position(d);
                }
            }
            let _ = crate::update::upsert_seed(&f);
            desc
        }
        1 => {
            let u = g.update();
            let desc = format!("update {u}");
            let filters = [doc! {"x": {"$gt": 0}}];
            let af = if g.chance(0.3) {
                Some(&filters[..])
            } else {
                None
            };
            if let Ok(spec) = UpdateSpec::parse(&u, af) {
                for d in &docs {
                    let mut d = d.clone();
                    let mut ctx = UpdateContext::new(DateTime::from_millis(0));
                    ctx.matched_array_index = Some(g.rng.gen_range(0..3));
                    let before = d.clone();
                    if let Ok(true) = spec.apply(&mut d, &ctx) {
                        // Describing the change must agree with applying and describing at
                        // once (pipelines may be random, so only their safety is checked).
                        let told = spec.describe(&before, &d, &ctx);
                        let mut again = before.clone();
                        let described = spec.apply_described(&mut again, &ctx);
                        if !spec.is_pipeline() {
                            // Compared as text: NaN values are not equal to themselves.
                            let described = format!("{:?}", described.ok().flatten());
                            assert_eq!(described, format!("{:?}", Some(told)), "{u} on {before}");
                        }
                    }
                }
                let _ = spec.upsert_document(&g.filter(1), DateTime::from_millis(0));
            }
            desc
        }
        2 => {
            let p = g.projection();
            let desc = format!("projection {p}");
            if let Ok(p) = Projection::new(&p) {
                for d in &docs {
                    let _ = p.apply_with_position(d, Some(g.rng.gen_range(0..3)));
                }
            }
            desc
        }
        3 => {
            let s = doc! {g.path(): *g.pick(&[1, -1]), g.path(): 1};
            let desc = format!("sort {s}");
            if let Ok(s) = SortSpec::new(&s) {
                let mut docs = docs.clone();
                docs.sort_by(|a, b| s.compare(a, b));
                for d in &docs {
                    let k = s.sort_key(d);
                    let _ = crate::keystring::encode_key(&k, &s.descending_flags());
                }
            }
            desc
        }
        4 | 5 => {
            let e = g.expr(4);
            let desc = format!("expr {e}");
            if let Ok(e) = Expr::parse(&e) {
                for d in &docs {
                    let _ = e.eval(d, &vars);
                }
            }
            desc
        }
        _ => {
            let p = g.pipeline(false);
            let desc = format!("pipeline {p:?}");
            if let Ok(p) = Pipeline::parse(&p) {
                let _ = p.run_with(docs.clone(), &NoCollections, &vars);
            }
            desc
        }
    }
}

#[test]
fn fuzz_no_panics() {
    let seed = std::env::var("QUERY_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let iters = std::env::var("QUERY_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_ITERS);
    println!("query fuzz: seed {seed}, {iters} iterations (QUERY_FUZZ_SEED / QUERY_FUZZ_ITERS)");
    // Panics are reported below with their input; keep the default hook's noise out.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    for i in 0..iters {
        let case_seed = seed.wrapping_add(i as u64);
        let mut g = Gen {
            rng: StdRng::seed_from_u64(case_seed),
        };
        let mut desc = String::new();
        let r = catch_unwind(AssertUnwindSafe(|| {
            desc = run_case(&mut g);
        }));
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            // Regenerate the input for the report (the closure may not have returned it).
            let mut g = Gen {
                rng: StdRng::seed_from_u64(case_seed),
            };
            let desc = catch_unwind(AssertUnwindSafe(|| describe(&mut g))).unwrap_or(desc);
            failures.push(format!(
                "case seed {case_seed} (iteration {i}): {msg}\n  input: {desc}"
            ));
        }
    }
    std::panic::set_hook(hook);
    assert!(
        failures.is_empty(),
        "{} panics (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The input `run_case` generates for a seed, without running it.
fn describe(g: &mut Gen) -> String {
    let docs: Vec<Document> = (0..g.rng.gen_range(1..4)).map(|_| g.input_doc()).collect();
    let _ = g.value(2);
    let what = match g.rng.gen_range(0..7) {
        0 => format!("filter {}", g.filter(3)),
        1 => format!("update {}", g.update()),
        2 => format!("projection {}", g.projection()),
        3 => format!("sort {}", doc! {g.path(): *g.pick(&[1, -1]), g.path(): 1}),
        4 | 5 => format!("expr {}", g.expr(4)),
        _ => format!("pipeline {:?}", g.pipeline(false)),
    };
    format!("{what}\n  docs: {docs:?}")
}
