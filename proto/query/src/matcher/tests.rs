//! Filter matching tests (the `$jsonSchema` ones are in `json_schema.rs`).

use super::*;
use bson::{bson, doc, spec::BinarySubtype, Binary, Decimal128, Regex};
use std::str::FromStr;

fn m(filter: Document, d: Document) -> bool {
    Matcher::new(&filter)
        .unwrap_or_else(|e| panic!("{filter}: {e}"))
        .matches(&d)
}

fn re(p: &str, o: &str) -> Bson {
    Bson::RegularExpression(Regex {
        pattern: p.into(),
        options: o.into(),
    })
}

#[test]
fn equality_and_arrays() {
    let cases: Vec<(Document, Document, bool)> = vec![
        (doc! {}, doc! {"a": 1}, true),
        (doc! {"a": 5}, doc! {"a": 5}, true),
        (doc! {"a": 5}, doc! {"a": 5.0}, true),
        (doc! {"a": 5}, doc! {"a": Bson::Int64(5)}, true),
        (doc! {"a": 5}, doc! {"a": "5"}, false),
        (doc! {"a": 5}, doc! {"a": [1, 5]}, true),
        (doc! {"a": 5}, doc! {"a": [1, 6]}, false),
        (doc! {"a": 5}, doc! {"a": [[5]]}, false),
        (doc! {"a": [1, 5]}, doc! {"a": [1, 5]}, true),
        (doc! {"a": [1, 5]}, doc! {"a": [5, 1]}, false),
        (doc! {"a": [1, 5]}, doc! {"a": [[1, 5], 2]}, true),
        (doc! {"a": []}, doc! {"a": []}, true),
        (doc! {"a": []}, doc! {"a": [[]]}, true),
        (doc! {"a": {"b": 1}}, doc! {"a": {"b": 1}}, true),
        (doc! {"a": {"b": 1}}, doc! {"a": {"b": 1, "c": 2}}, false),
        (
            doc! {"a": {"b": 1, "c": 2}},
            doc! {"a": {"c": 2, "b": 1}},
            false,
        ),
        (doc! {"a": {"b": 1}}, doc! {"a": [{"b": 1}]}, true),
        (doc! {"a.b": 1}, doc! {"a": {"b": 1}}, true),
        (doc! {"a.b": 1}, doc! {"a": [{"b": 2}, {"b": 1}]}, true),
        (doc! {"a.b": 1}, doc! {"a": [{"b": [0, 1]}]}, true),
        (doc! {"a.b.c": 1}, doc! {"a": [{"b": [{"c": 1}]}]}, true),
        (doc! {"a.1": 5}, doc! {"a": [4, 5]}, true),
        (doc! {"a.0": 5}, doc! {"a": [4, 5]}, false),
        (doc! {"a.0": 5}, doc! {"a": [{"0": 5}]}, true),
        (doc! {"a.1.b": 2}, doc! {"a": [{"b": 1}, {"b": 2}]}, true),
        (doc! {"a.0": 1}, doc! {"a": [[1, 2]]}, true),
        (doc! {"a": null}, doc! {}, true),
        (doc! {"a": null}, doc! {"a": null}, true),
        (doc! {"a": null}, doc! {"a": Bson::Undefined}, false),
        (doc! {"a": null}, doc! {"a": 0}, false),
        (doc! {"a": null}, doc! {"a": [1, null]}, true),
        (doc! {"a": null}, doc! {"a": []}, false),
        (doc! {"a.b": null}, doc! {"a": 1}, true),
        (doc! {"a.b": null}, doc! {"a": [{"b": 1}, {"c": 1}]}, true),
        (doc! {"a.b": null}, doc! {"a": [{"b": 1}]}, false),
        (doc! {"a.b": null}, doc! {"a": [1, 2]}, false),
        (doc! {"field.0": null}, doc! {"field": []}, false),
        (doc! {"a": 1, "b": 2}, doc! {"a": 1, "b": 2}, true),
        (doc! {"a": 1, "b": 2}, doc! {"a": 1, "b": 3}, false),
        (doc! {"a": re("^x", "")}, doc! {"a": "xyz"}, true),
        (doc! {"a": re("^x", "")}, doc! {"a": ["q", "xz"]}, true),
        (doc! {"a": re("^X", "i")}, doc! {"a": "xyz"}, true),
        (doc! {"a": re("^x", "")}, doc! {"a": 1}, false),
        (doc! {"a": re("^x", "")}, doc! {"a": re("^x", "")}, true),
        (doc! {"a": {"$eq": re("^x", "")}}, doc! {"a": "xyz"}, false),
        (
            doc! {"a": {"$eq": re("^x", "")}},
            doc! {"a": re("^x", "")},
            true,
        ),
        (doc! {"a": Bson::Symbol("s".into())}, doc! {"a": "s"}, true),
        (
            doc! {"a": Bson::Decimal128(Decimal128::from_str("2.50").unwrap())},
            doc! {"a": 2.5},
            true,
        ),
        (doc! {"a": f64::NAN}, doc! {"a": f64::NAN}, true),
        (doc! {"$comment": "hi", "a": 1}, doc! {"a": 1}, true),
    ];
    for (f, d, want) in cases {
        assert_eq!(m(f.clone(), d.clone()), want, "filter {f} doc {d}");
    }
}

#[test]
fn comparison_operators() {
    let cases: Vec<(Document, Document, bool)> = vec![
        (doc! {"a": {"$gt": 5}}, doc! {"a": 6}, true),
        (doc! {"a": {"$gt": 5}}, doc! {"a": 5}, false),
        (doc! {"a": {"$gte": 5}}, doc! {"a": 5.0}, true),
        (doc! {"a": {"$lt": 5}}, doc! {"a": "a"}, false),
        (doc! {"a": {"$gt": 5}}, doc! {"a": "z"}, false),
        (doc! {"a": {"$lt": "b"}}, doc! {"a": "a"}, true),
        (doc! {"a": {"$gt": 5}}, doc! {"a": [1, 7]}, true),
        (doc! {"a": {"$gt": 5, "$lt": 7}}, doc! {"a": [4, 8]}, true),
        (
            doc! {"a": {"$elemMatch": {"$gt": 5, "$lt": 7}}},
            doc! {"a": [4, 8]},
            false,
        ),
        (
            doc! {"a": {"$elemMatch": {"$gt": 5, "$lt": 7}}},
            doc! {"a": [4, 6]},
            true,
        ),
        (doc! {"a": {"$gt": 5}}, doc! {}, false),
        (doc! {"a": {"$gte": null}}, doc! {}, true),
        (doc! {"a": {"$lte": null}}, doc! {"a": null}, true),
        (doc! {"a": {"$gt": null}}, doc! {"a": null}, false),
        (doc! {"a": {"$lt": null}}, doc! {}, false),
        (doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"}, true),
        (
            doc! {"a": {"$lt": Bson::MaxKey}},
            doc! {"a": {"x": 1}},
            true,
        ),
        (doc! {"a": {"$gt": [1]}}, doc! {"a": [2]}, true),
        (doc! {"a": {"$gt": {"x": 1}}}, doc! {"a": {"x": 2}}, true),
        (doc! {"a": {"$lt": 0}}, doc! {"a": f64::NAN}, false),
        (doc! {"a": {"$gt": f64::NAN}}, doc! {"a": 1}, false),
        (doc! {"a": {"$gte": f64::NAN}}, doc! {"a": f64::NAN}, true),
        (
            doc! {"a": {"$lt": 9_007_199_254_740_993i64}},
            doc! {"a": 9_007_199_254_740_992.0},
            true,
        ),
        (doc! {"a": {"$ne": 5}}, doc! {"a": 6}, true),
        (doc! {"a": {"$ne": 5}}, doc! {"a": [1, 5]}, false),
        (doc! {"a": {"$ne": 5}}, doc! {}, true),
        (doc! {"a": {"$ne": null}}, doc! {}, false),
        (doc! {"a": {"$ne": null}}, doc! {"a": 0}, true),
        (doc! {"a": {"$ne": [1, 2]}}, doc! {"a": [1, 2]}, false),
        (
            doc! {"a.b": {"$ne": 1}},
            doc! {"a": [{"b": 1}, {"b": 2}]},
            false,
        ),
        (doc! {"a": {"$eq": 5}}, doc! {"a": [5]}, true),
    ];
    for (f, d, want) in cases {
        assert_eq!(m(f.clone(), d.clone()), want, "filter {f} doc {d}");
    }
}

#[test]
fn set_and_logical_operators() {
    let cases: Vec<(Document, Document, bool)> = vec![
        (doc! {"a": {"$in": [1, 2]}}, doc! {"a": 2}, true),
        (doc! {"a": {"$in": [1, 2]}}, doc! {"a": [3, 2]}, true),
        (doc! {"a": {"$in": [1, 2]}}, doc! {"a": 3}, false),
        (doc! {"a": {"$in": []}}, doc! {"a": 3}, false),
        (doc! {"a": {"$in": [null]}}, doc! {}, true),
        (doc! {"a": {"$in": [re("^b", "")]}}, doc! {"a": "bob"}, true),
        (doc! {"a": {"$in": [[1, 2]]}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {"a": 3}, true),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {"a": [3, 1]}, false),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {}, true),
        (doc! {"a": {"$nin": [null]}}, doc! {}, false),
        (
            doc! {"$and": [{"a": 1}, {"b": 2}]},
            doc! {"a": 1, "b": 2},
            true,
        ),
        (doc! {"$and": [{"a": 1}, {"b": 2}]}, doc! {"a": 1}, false),
        (doc! {"$or": [{"a": 1}, {"b": 2}]}, doc! {"b": 2}, true),
        (doc! {"$or": [{"a": 1}, {"b": 2}]}, doc! {"b": 3}, false),
        (doc! {"$nor": [{"a": 1}, {"b": 2}]}, doc! {"b": 3}, true),
        (doc! {"$nor": [{"a": 1}, {"b": 2}]}, doc! {"a": 1}, false),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3}, true),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {}, true),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": [3, 6]}, false),
        (doc! {"a": {"$not": re("^x", "")}}, doc! {"a": "yx"}, true),
        (
            doc! {"a": {"$not": {"$regex": "^x"}}},
            doc! {"a": "xy"},
            false,
        ),
        (doc! {"$alwaysTrue": 1}, doc! {}, true),
        (doc! {"$alwaysFalse": 1}, doc! {}, false),
    ];
    for (f, d, want) in cases {
        assert_eq!(m(f.clone(), d.clone()), want, "filter {f} doc {d}");
    }
}

#[test]
fn element_and_evaluation_operators() {
    let cases: Vec<(Document, Document, bool)> = vec![
        (doc! {"a": {"$exists": true}}, doc! {"a": null}, true),
        (doc! {"a": {"$exists": true}}, doc! {}, false),
        (doc! {"a": {"$exists": false}}, doc! {}, true),
        (doc! {"a": {"$exists": 0}}, doc! {"a": 1}, false),
        (
            doc! {"a.b": {"$exists": true}},
            doc! {"a": [{"c": 1}, {"b": 1}]},
            true,
        ),
        (doc! {"a.b": {"$exists": true}}, doc! {"a": [1, 2]}, false),
        (
            doc! {"a.b": {"$exists": false}},
            doc! {"a": [{"c": 1}]},
            true,
        ),
        (doc! {"a.1": {"$exists": true}}, doc! {"a": [1, 2]}, true),
        (doc! {"a.2": {"$exists": true}}, doc! {"a": [1, 2]}, false),
        (doc! {"a": {"$type": "string"}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$type": 2}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$type": 2.0}}, doc! {"a": 1}, false),
        (
            doc! {"a": {"$type": "number"}},
            doc! {"a": Bson::Int64(1)},
            true,
        ),
        (
            doc! {"a": {"$type": ["string", "int"]}},
            doc! {"a": 1},
            true,
        ),
        (doc! {"a": {"$type": "int"}}, doc! {"a": [1.5, 2]}, true),
        (doc! {"a": {"$type": "array"}}, doc! {"a": []}, true),
        (doc! {"a": {"$type": "array"}}, doc! {"a": 1}, false),
        (doc! {"a": {"$type": "null"}}, doc! {}, false),
        (doc! {"a": {"$type": "null"}}, doc! {"a": null}, true),
        (
            doc! {"a": {"$type": "minKey"}},
            doc! {"a": Bson::MinKey},
            true,
        ),
        (doc! {"a": {"$type": "object"}}, doc! {"a": {}}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.7}, true),
        (doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": [2, 9]}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"}, false),
        (
            doc! {"a": {"$regex": "^a.c$", "$options": "s"}},
            doc! {"a": "a\nc"},
            true,
        ),
        (doc! {"a": {"$regex": "^a.c$"}}, doc! {"a": "a\nc"}, false),
        (
            doc! {"a": {"$options": "m", "$regex": "^c"}},
            doc! {"a": "a\nc"},
            true,
        ),
        (
            doc! {"a": {"$regex": "a  b # comment", "$options": "x"}},
            doc! {"a": "ab"},
            true,
        ),
        (
            doc! {"a": {"$regex": re("B", "")}},
            doc! {"a": "abc"},
            false,
        ),
        (
            doc! {"a": {"$regex": re("B", ""), "$options": "i"}},
            doc! {"a": "abc"},
            true,
        ),
    ];
    for (f, d, want) in cases {
        assert_eq!(m(f.clone(), d.clone()), want, "filter {f} doc {d}");
    }
}

#[test]
fn array_and_bitwise_operators() {
    let bin = |bytes: Vec<u8>| {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes,
        })
    };
    let cases: Vec<(Document, Document, bool)> = vec![
        (doc! {"a": {"$size": 2}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": {"$size": 1}}, doc! {"a": [[1, 2]]}, true),
        (doc! {"a": {"$size": 2}}, doc! {"a": [[1, 2]]}, false),
        (doc! {"a": {"$size": 0}}, doc! {"a": []}, true),
        (doc! {"a": {"$size": 0}}, doc! {}, false),
        (
            doc! {"a.b": {"$size": 2}},
            doc! {"a": [{"b": [1, 2]}]},
            true,
        ),
        (doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]}, true),
        (doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3]}, false),
        (doc! {"a": {"$all": [1]}}, doc! {"a": 1}, true),
        (doc! {"a": {"$all": []}}, doc! {"a": []}, false),
        (doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [1, 2]}, true),
        (
            doc! {"a": {"$all": [re("^x", "")]}},
            doc! {"a": ["xa", "b"]},
            true,
        ),
        (
            doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"b": 2}}]}},
            doc! {"a": [{"b": 1}, {"b": 2}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}},
            doc! {"a": [{"b": 1}, {"c": 2}]},
            false,
        ),
        (
            doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}},
            doc! {"a": [{"b": 1, "c": 2}]},
            true,
        ),
        (
            doc! {"a.b": 1, "a.c": 2},
            doc! {"a": [{"b": 1}, {"c": 2}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"b": {"$gt": 1}}}},
            doc! {"a": {"b": 2}},
            false,
        ),
        (
            doc! {"a": {"$elemMatch": {"$in": [3]}}},
            doc! {"a": [1, 3]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"$or": [{"b": 1}, {"b": 2}]}}},
            doc! {"a": [{"b": 2}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"0": 1}}},
            doc! {"a": [[1, 2]]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"$size": 2}}},
            doc! {"a": [[1, 2]]},
            true,
        ),
        (doc! {"a": {"$bitsAllSet": 5}}, doc! {"a": 7}, true),
        (doc! {"a": {"$bitsAllSet": [0, 2]}}, doc! {"a": 6}, false),
        (doc! {"a": {"$bitsAnySet": [0, 2]}}, doc! {"a": 6}, true),
        (doc! {"a": {"$bitsAllClear": [0, 3]}}, doc! {"a": 6}, true),
        (doc! {"a": {"$bitsAnyClear": 6}}, doc! {"a": 6}, false),
        (doc! {"a": {"$bitsAllSet": [70]}}, doc! {"a": -1}, true),
        (doc! {"a": {"$bitsAllSet": 1}}, doc! {"a": 1.5}, false),
        (
            doc! {"a": {"$bitsAllSet": bin(vec![0b101])}},
            doc! {"a": bin(vec![0b111, 0])},
            true,
        ),
        (
            doc! {"a": {"$bitsAnySet": [9]}},
            doc! {"a": bin(vec![0, 2])},
            true,
        ),
        (doc! {"a": {"$bitsAllSet": [1]}}, doc! {"a": "x"}, false),
    ];
    for (f, d, want) in cases {
        assert_eq!(m(f.clone(), d.clone()), want, "filter {f} doc {d}");
    }
}

#[test]
fn parse_errors() {
    let cases: Vec<(Document, i32, &str)> = vec![
        (doc! {"a": {"$foo": 1}}, 2, "unknown operator: $foo"),
        (doc! {"$foo": 1}, 2, "unknown top level operator: $foo"),
        (doc! {"a": {"$gt": 1, "b": 2}}, 2, "unknown operator: b"),
        (doc! {"a": {"$in": 1}}, 2, "$in needs an array"),
        (doc! {"a": {"$nin": {}}}, 2, "$nin needs an array"),
        (
            doc! {"a": {"$in": [{"$gt": 1}]}},
            2,
            "cannot nest $ under $in",
        ),
        (
            doc! {"$and": []},
            2,
            "$and/$or/$nor must be a nonempty array",
        ),
        (doc! {"$or": {}}, 2, "$or must be an array"),
        (doc! {"$nor": [1]}, 2, "entries need to be full objects"),
        (
            doc! {"a": {"$mod": 4}},
            2,
            "malformed mod, needs to be an array",
        ),
        (
            doc! {"a": {"$mod": [4]}},
            2,
            "malformed mod, not enough elements",
        ),
        (
            doc! {"a": {"$mod": [4, 1, 2]}},
            2,
            "malformed mod, too many elements",
        ),
        (doc! {"a": {"$mod": [0, 1]}}, 2, "divisor cannot be 0"),
        (doc! {"a": {"$mod": ["x", 1]}}, 2, "divisor not a number"),
        (doc! {"a": {"$size": "x"}}, 2, "$size needs a number"),
        (
            doc! {"a": {"$size": 1.5}},
            2,
            "$size must be a whole number",
        ),
        (doc! {"a": {"$size": -1}}, 2, "$size may not be negative"),
        (doc! {"a": {"$all": 1}}, 2, "$all needs an array"),
        (
            doc! {"a": {"$all": [{"$gt": 1}]}},
            2,
            "no $ expressions in $all",
        ),
        (
            doc! {"a": {"$elemMatch": 1}},
            2,
            "$elemMatch needs an Object",
        ),
        (
            doc! {"a": {"$not": 1}},
            2,
            "$not needs a regex or a document",
        ),
        (doc! {"a": {"$not": {}}}, 2, "$not cannot be empty"),
        (
            doc! {"a": {"$ne": re("x", "")}},
            2,
            "Can't have regex as arg to $ne.",
        ),
        (doc! {"a": {"$options": "i"}}, 2, "$options needs a $regex"),
        (doc! {"a": {"$regex": 1}}, 2, "$regex has to be a string"),
        (
            doc! {"a": {"$regex": "x", "$options": "z"}},
            51108,
            "invalid flag in regex options: z",
        ),
        (
            doc! {"a": {"$regex": "("}},
            51091,
            "Regular expression is invalid",
        ),
        (
            doc! {"a": {"$regex": re("x", "i"), "$options": "m"}},
            51075,
            "options set in both",
        ),
        (
            doc! {"a": {"$type": "foo"}},
            2,
            "Unknown type name alias: foo",
        ),
        (
            doc! {"a": {"$type": 99}},
            2,
            "Invalid numerical type code: 99",
        ),
        (doc! {"a": {"$type": true}}, 14, "type must be represented"),
        (doc! {"a": {"$bitsAllSet": -1}}, 2, "non-negative"),
        (
            doc! {"a": {"$bitsAllSet": [-1]}},
            2,
            "bit positions must be >= 0",
        ),
        (
            doc! {"a": {"$bitsAllSet": "x"}},
            2,
            "takes an Array, a number, or a BinData",
        ),
        (doc! {"$where": "this.a == 1"}, 2, "$where is not allowed"),
        (doc! {"$text": {"$search": "x"}}, 27, "text index required"),
        (doc! {"a": {"$near": [0, 0]}}, 2, "geospatial"),
        (doc! {"a": {"$geoWithin": {}}}, 2, "geospatial"),
        (doc! {"$jsonSchema": 1}, 14, "$jsonSchema must be an object"),
        (
            doc! {"$jsonSchema": {"foo": 1}},
            9,
            "Unknown $jsonSchema keyword: foo",
        ),
        (doc! {"$alwaysTrue": 0}, 9, "must be an integer value of 1"),
        (
            doc! {"a": {"$elemMatch": {"$expr": {"$eq": [1, 1]}}}},
            224,
            "$expr can only be applied to the top-level document",
        ),
    ];
    for (f, code, msg) in cases {
        let err = Matcher::new(&f).expect_err(&format!("{f} should fail"));
        assert_eq!(err.code, code, "{f}: {err}");
        assert!(
            err.message.contains(msg),
            "{f}: {} does not contain {msg}",
            err.message
        );
    }
}

#[test]
fn positional_index() {
    let cases: Vec<(Document, Document, Option<Option<usize>>)> = vec![
        (doc! {"a": 5}, doc! {"a": [1, 5, 5]}, Some(Some(1))),
        (doc! {"a": 5}, doc! {"a": 5}, Some(None)),
        (doc! {"a": 7}, doc! {"a": [1, 5]}, None),
        (doc! {"a": [1, 5]}, doc! {"a": [1, 5]}, Some(None)),
        (
            doc! {"a.b": {"$gt": 1}},
            doc! {"a": [{"b": 1}, {"b": 2}]},
            Some(Some(1)),
        ),
        (
            doc! {"a": {"$elemMatch": {"b": 2}}},
            doc! {"a": [{"b": 1}, {"b": 2}]},
            Some(Some(1)),
        ),
        (
            doc! {"x": 1, "a": {"$gte": 3}},
            doc! {"x": 1, "a": [1, 2, 3]},
            Some(Some(2)),
        ),
        (
            doc! {"$or": [{"a": 9}, {"a": 2}]},
            doc! {"a": [1, 2]},
            Some(Some(1)),
        ),
        (
            doc! {"a.b": 3},
            doc! {"a": [{"b": [1]}, {"b": [2, 3]}]},
            Some(Some(1)),
        ),
    ];
    for (f, d, want) in cases {
        assert_eq!(
            Matcher::new(&f).unwrap().matches_with_position(&d),
            want,
            "{f} {d}"
        );
    }
}

#[test]
fn value_matchers() {
    let cases: Vec<(Bson, Bson, bool)> = vec![
        (bson!({"$gte": 3}), bson!(3), true),
        (bson!({"$gte": 3}), bson!(2), false),
        (bson!({"$gte": 3}), bson!([5]), false),
        (bson!({"$in": [1, 2]}), bson!(2), true),
        (bson!({"$ne": 1}), bson!(2), true),
        (bson!({"$exists": true}), bson!(2), true),
        (bson!({"$size": 1}), bson!([1]), true),
        (bson!({"$elemMatch": {"$gt": 1}}), bson!([0, 2]), true),
        (bson!({"score": 8}), bson!({"score": 8, "item": "b"}), true),
        (bson!({"score": 8}), bson!({"score": 7}), false),
        (bson!({"score": 8}), bson!(8), false),
        (bson!({"a": {"$gt": 1}}), bson!({"a": [0, 2]}), true),
        (bson!({"$or": [{"a": 1}, {"b": 1}]}), bson!({"b": 1}), true),
        (bson!(5), bson!(5.0), true),
        (bson!(5), bson!([5]), false),
        (bson!([1, 2]), bson!([1, 2]), true),
        (bson!("x"), bson!("y"), false),
        (re("^a", ""), bson!("abc"), true),
        (bson!({"$regex": "^a"}), bson!("abc"), true),
        (bson!(null), Bson::Null, true),
    ];
    for (cond, v, want) in cases {
        assert_eq!(
            Matcher::new_for_value(&cond).unwrap().matches_value(&v),
            want,
            "{cond} vs {v}"
        );
    }
    assert!(Matcher::new_for_value(&bson!({"$foo": 1})).is_err());
    assert!(Matcher::new(&doc! {}).unwrap().is_match_all());
    assert!(!Matcher::new(&doc! {"a": 1}).unwrap().is_match_all());
}

#[test]
fn expr_operator() {
    let f = doc! {"$expr": {"$gt": ["$a", "$b"]}};
    let cases: Vec<(Document, bool)> = vec![
        (doc! {"a": 2, "b": 1}, true),
        (doc! {"a": 1, "b": 2}, false),
        (doc! {"a": 1}, true),
    ];
    for (d, want) in cases {
        assert_eq!(m(f.clone(), d.clone()), want, "{d}");
    }
    assert!(m(doc! {"x": 1, "$expr": {"$eq": ["$x", 1]}}, doc! {"x": 1}));
    assert!(!m(doc! {"$expr": "$missing"}, doc! {"x": 1}));
    assert!(m(
        doc! {"$or": [{"$expr": {"$eq": [1, 2]}}, {"x": 1}]},
        doc! {"x": 1}
    ));
    assert!(Matcher::new(&doc! {"$expr": {"$noSuchOp": 1}}).is_err());
    let bad = Matcher::new(&doc! {"$expr": {"$toInt": "$s"}}).unwrap();
    assert!(bad.matches_checked(&doc! {"s": "not a number"}).is_err());
    assert!(!bad.matches(&doc! {"s": "not a number"}));
    assert!(bad.matches_checked(&doc! {"s": "5"}).unwrap());
}

#[test]
fn type_helpers() {
    assert_eq!(crate::bson_types::type_name(&bson!(1)), "int");
    assert_eq!(crate::bson_types::type_name(&bson!({})), "object");
    assert_eq!(crate::bson_types::of(&Bson::MaxKey).number, 127);
    for (v, want) in [
        (bson!(0), false),
        (bson!(0.0), false),
        (bson!(null), false),
        (bson!(""), true),
        (bson!([]), true),
        (bson!(2), true),
    ] {
        assert_eq!(is_truthy(&v), want, "{v}");
    }
}
