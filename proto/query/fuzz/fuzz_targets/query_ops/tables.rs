//! The grammar's vocabularies: names a client could send (operators, stages, type names,
//! variables) and odd or boundary text. Indices from the input pick from them modulo
//! their length, so any byte picks something.

#[rustfmt::skip]
pub const ODD: &[&str] = &[
    "a", "b", "x", "é", "ß", "ǅ", "\u{301}", "e\u{301}", "\u{200b}", "\u{feff}", "€", "😀",
    "👩\u{200d}💻", "中", "\u{10ffff}", " ", "\t", "\n", "$", ".", "0", "1", "-", "+", "%", ":",
    "T", "Z", "Y", "m", "d", "\u{a0}", "\u{2028}", "İ", "ﬀ", "\\", "[", "(", "*", "^", "\0",
    "\u{7f}", "\u{fffd}", "\u{d7ff}", "\u{e000}", "Σ", "ς", "ﬃ", "ΐ", "\u{1f1e6}\u{1f1e8}",
];

#[rustfmt::skip]
pub const SPECIAL: &[&str] = &[
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
pub const FIELDS: &[&str] = &[
    "a", "b", "c", "_id", "0", "1", "é", "arr", "s", "x", "y", "deep", "", "$a", "a b", "i",
    "elem", "10", "-1", "01", "$", "n", "d",
];

/// Array-filter identifiers (`$[x]`) and `$let`/`$map` variable names.
#[rustfmt::skip]
pub const IDENTS: &[&str] = &["x", "y", "elem", "i", "e", "X", "é", "", "0", "ROOT", "this", "value"];

#[rustfmt::skip]
pub const VARS: &[&str] = &[
    "$$ROOT", "$$CURRENT", "$$NOW", "$$REMOVE", "$$DESCEND", "$$PRUNE", "$$KEEP",
    "$$CLUSTER_TIME", "$$this", "$$value", "$$x", "$$y", "$$v", "$$", "$$USER_ROLES",
    "$$SEARCH_META", "$$e", "$$elem", "$$i", "$$MISSING",
];

#[rustfmt::skip]
pub const CMP_OPS: &[&str] = &["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"];
#[rustfmt::skip]
pub const BIT_OPS: &[&str] = &["$bitsAllSet", "$bitsAnySet", "$bitsAllClear", "$bitsAnyClear"];
#[rustfmt::skip]
pub const QUERY_OPS: &[&str] = &[
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$type", "$mod",
    "$regex", "$options", "$size", "$all", "$elemMatch", "$not", "$bitsAllSet", "$bitsAnySet",
    "$bitsAllClear", "$bitsAnyClear", "$comment", "$geoWithin", "$geoIntersects", "$near",
    "$nearSphere", "$within", "$box", "$center", "$centerSphere", "$polygon", "$geometry",
    "$maxDistance", "$minDistance", "$where", "$text", "$search", "$jsonSchema", "$expr",
    "$alwaysTrue", "$alwaysFalse", "$and", "$or", "$nor", "$ref", "$id", "$db",
];
#[rustfmt::skip]
pub const TYPE_NAMES: &[&str] = &[
    "double", "string", "object", "array", "binData", "undefined", "objectId", "bool", "date",
    "null", "regex", "dbPointer", "javascript", "symbol", "javascriptWithScope", "int",
    "timestamp", "long", "decimal", "minKey", "maxKey", "number", "x", "",
];
#[rustfmt::skip]
pub const UPDATE_OPS: &[&str] = &[
    "$set", "$unset", "$inc", "$mul", "$min", "$max", "$rename", "$setOnInsert",
    "$currentDate", "$push", "$addToSet", "$pop", "$pull", "$pullAll", "$bit", "$each",
    "$foo", "$isolated",
];

/// Expression operators: positional ones take an argument array (or one argument), named
/// ones a document of the arguments in `NAMED_ARGS`.
#[rustfmt::skip]
pub const EXPR_OPS: &[&str] = &[
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
pub const NAMED_OPS: &[&str] = &[
    "$trim", "$ltrim", "$rtrim", "$replaceOne", "$replaceAll", "$zip", "$sortArray", "$firstN",
    "$lastN", "$maxN", "$minN", "$convert", "$dateToString", "$dateFromString", "$dateToParts",
    "$dateFromParts", "$dateAdd", "$dateSubtract", "$dateDiff", "$dateTrunc", "$setField",
    "$unsetField", "$regexMatch", "$regexFind", "$regexFindAll", "$cond", "$let", "$map",
    "$filter", "$reduce", "$getField", "$switch", "$round", "$year", "$week", "$dayOfWeek",
    "$hour", "$isoWeek", "$millisecond", "$median", "$percentile",
];
#[rustfmt::skip]
pub const ARG_NAMES: &[&str] = &[
    "input", "chars", "find", "replacement", "inputs", "useLongestLength", "defaults", "sortBy",
    "n", "to", "onError", "onNull", "date", "format", "timezone", "dateString", "iso8601",
    "year", "month", "day", "hour", "minute", "second", "millisecond", "isoWeekYear", "isoWeek",
    "isoDayOfWeek", "startDate", "endDate", "unit", "amount", "binSize", "startOfWeek", "field",
    "value", "regex", "options", "if", "then", "else", "vars", "in", "as", "cond", "limit",
    "initialValue", "branches", "default", "p", "method", "type", "subtype", "place", "x",
];

pub fn named_args(op: &str) -> &'static [&'static str] {
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
pub const STAGES: &[&str] = &[
    "$addFields", "$bucket", "$bucketAuto", "$changeStream", "$collStats", "$count",
    "$currentOp", "$densify", "$documents", "$facet", "$fill", "$geoNear", "$graphLookup",
    "$group", "$indexStats", "$limit", "$listLocalSessions", "$listSessions", "$lookup",
    "$match", "$merge", "$out", "$planCacheStats", "$project", "$redact", "$replaceRoot",
    "$replaceWith", "$sample", "$search", "$searchMeta", "$set", "$setWindowFields", "$skip",
    "$sort", "$sortByCount", "$unionWith", "$unset", "$unwind", "$foo",
];
#[rustfmt::skip]
pub const ACCUMULATORS: &[&str] = &[
    "$accumulator", "$addToSet", "$avg", "$bottom", "$bottomN", "$count", "$first", "$firstN",
    "$last", "$lastN", "$max", "$maxN", "$median", "$mergeObjects", "$min", "$minN",
    "$percentile", "$push", "$stdDevPop", "$stdDevSamp", "$sum", "$top", "$topN", "$foo",
];
#[rustfmt::skip]
pub const STAGE_KEYS: &[&str] = &[
    "from", "localField", "foreignField", "as", "let", "pipeline", "coll", "db",
    "startWith", "connectFromField", "connectToField", "maxDepth", "depthField",
    "restrictSearchWithMatch", "into", "on", "whenMatched", "whenNotMatched", "path",
    "includeArrayIndex", "preserveNullAndEmptyArrays", "groupBy", "boundaries", "default",
    "output", "buckets", "granularity", "size", "newRoot", "field", "range", "step",
    "partitionBy", "sortBy", "bounds", "unit",
];
#[rustfmt::skip]
pub const SCHEMA_KEYS: &[&str] = &[
    "additionalItems", "additionalProperties", "allOf", "anyOf", "bsonType", "description",
    "enum", "exclusiveMaximum", "exclusiveMinimum", "items", "maxItems", "maxLength",
    "maxProperties", "maximum", "minItems", "minLength", "minProperties", "minimum",
    "multipleOf", "not", "oneOf", "pattern", "patternProperties", "properties", "required",
    "title", "type", "uniqueItems", "dependencies", "$ref",
];
#[rustfmt::skip]
pub const SCHEMA_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string", "int", "long",
    "double", "decimal", "date", "objectId", "x",
];
#[rustfmt::skip]
pub const DECIMALS: &[&str] = &[
    "NaN", "-NaN", "Infinity", "-Infinity", "0", "-0", "1E-6176", "-1E+6111",
    "9999999999999999999999999999999999E+6111", "1.5", "-2.5", "1E+40", "9223372036854775807",
    "-9223372036854775809", "0.1", "1E-40", "2147483648", "-2147483649", "0E+6111", "1E+6144",
    "0.5", "-0.5", "1E+308", "1E-324",
];
#[rustfmt::skip]
pub const REGEX_OPTS: &[&str] = &["", "i", "m", "s", "x", "u", "l", "imsx", "q", "ii", "é"];
#[rustfmt::skip]
pub const UNITS: &[&str] = &[
    "year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond", "x",
];
#[rustfmt::skip]
pub const TIMEZONES: &[&str] = &[
    "UTC", "+05:30", "-14", "+9999", "Europe/Paris", "+0é", "GMT", "-00:00", "+24:00", "Z",
    "America/St_Johns", "+1", "", "Asia/Kathmandu",
];
#[rustfmt::skip]
pub const META: &[&str] = &["textScore", "indexKey", "searchScore", "randVal", "sortKey", "x"];

pub fn pick<'a>(xs: &[&'a str], i: impl Into<u64>) -> &'a str {
    xs[(i.into() % xs.len() as u64) as usize]
}
