//! Update tests.

use bson::{bson, doc, Timestamp};

use super::values::identical_docs;
use super::*;

fn now() -> DateTime {
    DateTime::from_millis(1_700_000_000_123)
}

fn run_with(
    before: &Document,
    update: Bson,
    filters: Option<&[Document]>,
    matched: Option<usize>,
) -> MongoResult<(Document, bool)> {
    let spec = UpdateSpec::parse(&update, filters)?;
    let ctx = UpdateContext {
        is_upsert_insert: false,
        matched_array_index: matched,
        now: now(),
    };
    let mut d = before.clone();
    let changed = spec.apply(&mut d, &ctx)?;
    if !changed {
        assert!(
            identical_docs(&d, before),
            "unchanged doc was modified: {d}"
        );
    }
    Ok((d, changed))
}

fn check(
    cases: &[(Document, Bson, Document)],
    filters: Option<&[Document]>,
    matched: Option<usize>,
) {
    for (before, update, want) in cases {
        let (got, changed) = run_with(before, update.clone(), filters, matched)
            .unwrap_or_else(|e| panic!("{before} with {update}: unexpected error {e}"));
        assert!(
            identical_docs(&got, want),
            "{before} with {update}: got {got}, want {want}"
        );
        assert_eq!(
            changed,
            !identical_docs(before, want),
            "{before} with {update}: changed flag"
        );
    }
}

fn check_err(
    cases: &[(Document, Bson, i32, &str)],
    filters: Option<&[Document]>,
    matched: Option<usize>,
) {
    for (before, update, code, msg) in cases {
        match run_with(before, update.clone(), filters, matched) {
            Ok((d, _)) => panic!("{before} with {update}: expected error {code}, got {d}"),
            Err(e) => {
                assert_eq!(e.code, *code, "{before} with {update}: {e}");
                assert!(
                    e.message.contains(msg),
                    "{before} with {update}: message {:?} lacks {msg:?}",
                    e.message
                );
            }
        }
    }
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse().unwrap())
}

#[test]
fn set_and_unset() {
    check(
        &[
            (
                doc! {"_id": 1},
                bson!({"$set": {"a": 1}}),
                doc! {"_id": 1, "a": 1},
            ),
            (
                doc! {"_id": 1, "a": 1, "b": 2},
                bson!({"$set": {"a": 5}}),
                doc! {"_id": 1, "a": 5, "b": 2},
            ),
            // New fields of one update are created in lexicographic order, like mongod.
            (
                doc! {"_id": 1},
                bson!({"$set": {"b": 1, "a": 1}}),
                doc! {"_id": 1, "a": 1, "b": 1},
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"a.b.c": 1}}),
                doc! {"_id": 1, "a": {"b": {"c": 1}}},
            ),
            (
                doc! {"_id": 1, "a": [1]},
                bson!({"$set": {"a.2": 5}}),
                doc! {"_id": 1, "a": [1, null, 5]},
            ),
            (
                doc! {"_id": 1, "a": [1]},
                bson!({"$set": {"a.1.b": 5}}),
                doc! {"_id": 1, "a": [1, {"b": 5}]},
            ),
            (
                doc! {"_id": 1, "a": {"c": 1}},
                bson!({"$set": {"a.b": 1}}),
                doc! {"_id": 1, "a": {"c": 1, "b": 1}},
            ),
            (
                doc! {"_id": 1, "a": [{"b": 0}, {"b": 1}]},
                bson!({"$set": {"a.0.b": 1}}),
                doc! {"_id": 1, "a": [{"b": 1}, {"b": 1}]},
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"a.0": 1}}),
                doc! {"_id": 1, "a": {"0": 1}},
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"a.c": 2, "a.b": 1}}),
                doc! {"_id": 1, "a": {"b": 1, "c": 2}},
            ),
            (
                doc! {"_id": 1, "a": 1.0},
                bson!({"$set": {"a": 1}}),
                doc! {"_id": 1, "a": 1},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$set": {"a": 1}}),
                doc! {"_id": 1, "a": 1},
            ),
            (
                doc! {"_id": 1, "a": {"x": 1, "y": 2}},
                bson!({"$set": {"a": {"x": 1, "y": 2}}}),
                doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            ),
            (
                doc! {"_id": 1, "a": {"y": 2, "x": 1}},
                bson!({"$set": {"a": {"x": 1, "y": 2}}}),
                doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            ),
            (doc! {"_id": 1}, bson!({"$set": {}}), doc! {"_id": 1}),
            (
                doc! {"_id": 1},
                bson!({"$set": {"_id": 1}}),
                doc! {"_id": 1},
            ),
            (
                doc! {"_id": 1, "a": 1, "b": 2},
                bson!({"$unset": {"a": ""}}),
                doc! {"_id": 1, "b": 2},
            ),
            (
                doc! {"_id": 1, "a": [1, 2, 3]},
                bson!({"$unset": {"a.1": 1}}),
                doc! {"_id": 1, "a": [1, null, 3]},
            ),
            (
                doc! {"_id": 1},
                bson!({"$unset": {"a": 1}}),
                doc! {"_id": 1},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$unset": {"a.b": 1}}),
                doc! {"_id": 1, "a": 1},
            ),
            (
                doc! {"_id": 1, "a": {"b": 1, "c": 2}},
                bson!({"$unset": {"a.b": 1}}),
                doc! {"_id": 1, "a": {"c": 2}},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$set": {"c": 3}, "$unset": {"a": 1}, "$setOnInsert": {"z": 1}}),
                doc! {"_id": 1, "c": 3},
            ),
        ],
        None,
        None,
    );
}

#[test]
fn arithmetic() {
    check(
        &[
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$inc": {"a": 2}}),
                doc! {"_id": 1, "a": 3},
            ),
            (
                doc! {"_id": 1, "a": i32::MAX},
                bson!({"$inc": {"a": 1}}),
                doc! {"_id": 1, "a": i32::MAX as i64 + 1},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$inc": {"a": 2_i64}}),
                doc! {"_id": 1, "a": 3_i64},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$inc": {"a": 0.5}}),
                doc! {"_id": 1, "a": 1.5},
            ),
            (
                doc! {"_id": 1, "a": 1_i64},
                bson!({"$inc": {"a": 1}}),
                doc! {"_id": 1, "a": 2_i64},
            ),
            (
                doc! {"_id": 1},
                bson!({"$inc": {"a": 5_i64}}),
                doc! {"_id": 1, "a": 5_i64},
            ),
            (
                doc! {"_id": 1, "a": 7},
                bson!({"$inc": {"a": 0}}),
                doc! {"_id": 1, "a": 7},
            ),
            (
                doc! {"_id": 1, "a": 7},
                bson!({"$inc": {"a": 0_i64}}),
                doc! {"_id": 1, "a": 7_i64},
            ),
            (
                doc! {"_id": 1, "a": dec("1.5")},
                bson!({"$inc": {"a": 1}}),
                doc! {"_id": 1, "a": dec("2.5")},
            ),
            (
                doc! {"_id": 1, "a": 2},
                bson!({"$inc": {"a": dec("0.25")}}),
                doc! {"_id": 1, "a": dec("2.25")},
            ),
            (
                doc! {"_id": 1, "a": dec("1.10")},
                bson!({"$mul": {"a": dec("3")}}),
                doc! {"_id": 1, "a": dec("3.30")},
            ),
            (
                doc! {"_id": 1, "a": 3},
                bson!({"$mul": {"a": 2}}),
                doc! {"_id": 1, "a": 6},
            ),
            (
                doc! {"_id": 1, "a": 65536},
                bson!({"$mul": {"a": 65536}}),
                doc! {"_id": 1, "a": 4_294_967_296_i64},
            ),
            (
                doc! {"_id": 1, "a": 3},
                bson!({"$mul": {"a": 1.5}}),
                doc! {"_id": 1, "a": 4.5},
            ),
            (
                doc! {"_id": 1},
                bson!({"$mul": {"a": 5}}),
                doc! {"_id": 1, "a": 0},
            ),
            (
                doc! {"_id": 1},
                bson!({"$mul": {"a": 5_i64}}),
                doc! {"_id": 1, "a": 0_i64},
            ),
            (
                doc! {"_id": 1},
                bson!({"$mul": {"a": 2.5}}),
                doc! {"_id": 1, "a": 0.0},
            ),
        ],
        None,
        None,
    );
}

#[test]
fn min_max_and_bit() {
    check(
        &[
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$min": {"a": 3}}),
                doc! {"_id": 1, "a": 3},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$min": {"a": 7}}),
                doc! {"_id": 1, "a": 5},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$min": {"a": 5.0}}),
                doc! {"_id": 1, "a": 5},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$min": {"a": null}}),
                doc! {"_id": 1, "a": null},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$max": {"a": 7}}),
                doc! {"_id": 1, "a": 7},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$max": {"a": "x"}}),
                doc! {"_id": 1, "a": "x"},
            ),
            (
                doc! {"_id": 1},
                bson!({"$max": {"a.b": 1}}),
                doc! {"_id": 1, "a": {"b": 1}},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$bit": {"a": {"and": 3}}}),
                doc! {"_id": 1, "a": 1},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$bit": {"a": {"or": 2}}}),
                doc! {"_id": 1, "a": 7},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$bit": {"a": {"xor": 1}}}),
                doc! {"_id": 1, "a": 4},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$bit": {"a": {"or": 8_i64}}}),
                doc! {"_id": 1, "a": 13_i64},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!({"$bit": {"a": {"and": 7, "xor": 1}}}),
                doc! {"_id": 1, "a": 4},
            ),
            (
                doc! {"_id": 1},
                bson!({"$bit": {"a": {"or": 5}}}),
                doc! {"_id": 1, "a": 5},
            ),
            (
                doc! {"_id": 1},
                bson!({"$bit": {"a": {"and": 5}}}),
                doc! {"_id": 1, "a": 0},
            ),
        ],
        None,
        None,
    );
}

#[test]
fn arithmetic_errors() {
    check_err(
        &[
            (
                doc! {"_id": 1, "a": i64::MAX},
                bson!({"$inc": {"a": 1}}),
                2,
                "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}",
            ),
            (
                doc! {"_id": 1, "a": 42},
                bson!({"$inc": {"a": i64::MAX}}),
                2,
                "Failed to apply $inc operations to current value ((NumberInt)42) for document {_id: 1}",
            ),
            (doc! {"_id": 1, "a": i64::MAX}, bson!({"$mul": {"a": 2}}), 2, "Failed to apply $mul operations"),
            (
                doc! {"_id": 1, "a": "x"},
                bson!({"$inc": {"a": 1}}),
                14,
                "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string",
            ),
            (
                doc! {"_id": "k", "a": {"b": [true]}},
                bson!({"$mul": {"a.b.0": 1}}),
                14,
                "Cannot apply $mul to a value of non-numeric type. {_id: \"k\"} has the field '0' of non-numeric type bool",
            ),
            (doc! {"_id": 1}, bson!({"$inc": {"a": "x"}}), 14, "Cannot increment with non-numeric argument: {a: \"x\"}"),
            (doc! {"_id": 1}, bson!({"$mul": {"a": null}}), 14, "Cannot multiply with non-numeric argument: {a: null}"),
            (
                doc! {"_id": 1, "a": 1.5},
                bson!({"$bit": {"a": {"and": 1}}}),
                2,
                "Cannot apply $bit to a value of non-integral type._id: 1 has the field a of non-integer type double",
            ),
            (doc! {"_id": 1}, bson!({"$bit": {"a": {"and": 1.0}}}), 2, "The $bit modifier field must be an Integer(32/64 bit)"),
            (doc! {"_id": 1}, bson!({"$bit": {"a": {"nand": 1}}}), 2, "The $bit modifier only supports 'and', 'or', and 'xor'"),
            (doc! {"_id": 1}, bson!({"$bit": {"a": {}}}), 2, "You must pass in at least one bitwise operation"),
            (doc! {"_id": 1}, bson!({"$bit": {"a": 1}}), 2, "The $bit modifier is not compatible with a int"),
        ],
        None,
        None,
    );
}

#[test]
fn rename_set_on_insert_current_date() {
    check(
        &[
            (
                doc! {"_id": 1, "a": 1, "b": 2},
                bson!({"$rename": {"a": "z"}}),
                doc! {"_id": 1, "b": 2, "z": 1},
            ),
            (
                doc! {"_id": 1, "a": 1, "b": 2},
                bson!({"$rename": {"a": "b"}}),
                doc! {"_id": 1, "b": 1},
            ),
            (
                doc! {"_id": 1, "a": {"b": 1}},
                bson!({"$rename": {"a.b": "c"}}),
                doc! {"_id": 1, "a": {}, "c": 1},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$rename": {"a": "x.y"}}),
                doc! {"_id": 1, "x": {"y": 1}},
            ),
            (
                doc! {"_id": 1, "b": 1},
                bson!({"$rename": {"a": "z"}}),
                doc! {"_id": 1, "b": 1},
            ),
            // The rename's destination is applied in lexicographic order with the rest.
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$rename": {"a": "b"}, "$set": {"c": 1}}),
                doc! {"_id": 1, "b": 1, "c": 1},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$setOnInsert": {"b": 1}}),
                doc! {"_id": 1, "a": 1},
            ),
        ],
        None,
        None,
    );
    check_err(
        &[
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "a"}}), 2, "The source and target field for $rename must differ: a: \"a\""),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "a.b"}}), 2, "must not be on the same path: a: \"a.b\""),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": 1}}), 2, "The 'to' field for $rename must be a string: a: 1"),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a.$": "b"}}), 2, "The source field for $rename may not be dynamic: a.$"),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "b.$[]"}}), 2, "The destination field for $rename may not be dynamic: b.$[]"),
            (
                doc! {"_id": 1, "a": [{"b": 1}]},
                bson!({"$rename": {"a.0.b": "c"}}),
                2,
                "The source field cannot be an array element, 'a.0.b' in doc with _id: 1 has an array field called 'a'",
            ),
            (
                doc! {"_id": 1, "a": 1, "x": [1]},
                bson!({"$rename": {"a": "x.y"}}),
                2,
                "The destination field cannot be an array element, 'x.y' in doc with _id: 1 has an array field called 'x'",
            ),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a.b": "c"}}), 28, "cannot use the part (b of a.b) to traverse the element ({a: 1})"),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"a": "b"}, "$set": {"b.c": 1}}), 40, "would create a conflict at 'b'"),
            (doc! {"_id": 1, "a": 1}, bson!({"$rename": {"_id": "b"}}), 66, "would modify the immutable field '_id'"),
        ],
        None,
        None,
    );

    let (d, changed) = run_with(
        &doc! {"_id": 1},
        bson!({"$currentDate": {"a": true, "b": {"$type": "date"}, "c": {"$type": "timestamp"}}}),
        None,
        None,
    )
    .unwrap();
    assert!(changed);
    assert_eq!(d.get("a"), Some(&Bson::DateTime(now())));
    assert_eq!(d.get("b"), Some(&Bson::DateTime(now())));
    assert_eq!(
        d.get("c"),
        Some(&Bson::Timestamp(Timestamp {
            time: 1_700_000_000,
            increment: 124
        }))
    );
    check_err(
        &[
            (
                doc! {"_id": 1},
                bson!({"$currentDate": {"a": 1}}),
                2,
                "int is not valid type for $currentDate",
            ),
            (
                doc! {"_id": 1},
                bson!({"$currentDate": {"a": {"$type": "x"}}}),
                2,
                "The '$type' string field is required",
            ),
            (
                doc! {"_id": 1},
                bson!({"$currentDate": {"a": {"t": 1}}}),
                2,
                "Unrecognized $currentDate option: t",
            ),
        ],
        None,
        None,
    );
}

#[test]
fn push_and_add_to_set() {
    let a = |v: Bson| doc! {"_id": 1, "a": v};
    check(
        &[
            (a(bson!([1])), bson!({"$push": {"a": 2}}), a(bson!([1, 2]))),
            (doc! {"_id": 1}, bson!({"$push": {"a": 2}}), a(bson!([2]))),
            (
                a(bson!([1])),
                bson!({"$push": {"a": [2, 3]}}),
                a(bson!([1, [2, 3]])),
            ),
            (
                a(bson!([1])),
                bson!({"$push": {"a": {"$each": [2, 3]}}}),
                a(bson!([1, 2, 3])),
            ),
            (
                doc! {"_id": 1},
                bson!({"$push": {"a": {"$each": []}}}),
                a(bson!([])),
            ),
            (
                a(bson!([1])),
                bson!({"$push": {"a": {"$each": []}}}),
                a(bson!([1])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$push": {"a": {"$each": [9], "$position": 0}}}),
                a(bson!([9, 1, 2])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$push": {"a": {"$each": [9], "$position": 1}}}),
                a(bson!([1, 9, 2])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$push": {"a": {"$each": [9], "$position": 10}}}),
                a(bson!([1, 2, 9])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$push": {"a": {"$each": [9], "$position": -1}}}),
                a(bson!([1, 2, 9, 3])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$push": {"a": {"$each": [9], "$position": -5}}}),
                a(bson!([9, 1, 2])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$push": {"a": {"$each": [4], "$slice": -2}}}),
                a(bson!([3, 4])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$push": {"a": {"$each": [4], "$slice": 2}}}),
                a(bson!([1, 2])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$push": {"a": {"$each": [], "$slice": 0}}}),
                a(bson!([])),
            ),
            (
                a(bson!([3, 1])),
                bson!({"$push": {"a": {"$each": [2], "$sort": 1}}}),
                a(bson!([1, 2, 3])),
            ),
            (
                a(bson!([3, 1])),
                bson!({"$push": {"a": {"$each": [2], "$sort": -1, "$slice": 2}}}),
                a(bson!([3, 2])),
            ),
            (
                a(bson!([{"x": 1, "y": 1}, {"x": 3}])),
                bson!({"$push": {"a": {"$each": [{"x": 2}], "$sort": {"x": -1}}}}),
                a(bson!([{"x": 3}, {"x": 2}, {"x": 1, "y": 1}])),
            ),
            (
                a(bson!([{"s": {"v": 2}}, {"s": {"v": 1}}])),
                bson!({"$push": {"a": {"$each": [], "$sort": {"s.v": 1}}}}),
                a(bson!([{"s": {"v": 1}}, {"s": {"v": 2}}])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$addToSet": {"a": 2}}),
                a(bson!([1, 2])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$addToSet": {"a": 2.0}}),
                a(bson!([1, 2])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$addToSet": {"a": 3}}),
                a(bson!([1, 2, 3])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$addToSet": {"a": {"$each": [2, 3, 3, 4]}}}),
                a(bson!([1, 2, 3, 4])),
            ),
            (
                a(bson!([{"x": 1}])),
                bson!({"$addToSet": {"a": {"x": 1}}}),
                a(bson!([{"x": 1}])),
            ),
            (
                a(bson!([1])),
                bson!({"$addToSet": {"a": [1]}}),
                a(bson!([1, [1]])),
            ),
            (
                doc! {"_id": 1},
                bson!({"$addToSet": {"a": {"$each": [1, 1]}}}),
                a(bson!([1])),
            ),
        ],
        None,
        None,
    );
}

#[test]
fn push_and_add_to_set_errors() {
    let a = |v: Bson| doc! {"_id": 1, "a": v};
    check_err(
        &[
            (
                a(bson!(5)),
                bson!({"$push": {"a": 1}}),
                2,
                "The field 'a' must be an array but is of type int in document {_id: 1}",
            ),
            (
                doc! {"_id": 1, "x": {"a": "s"}},
                bson!({"$push": {"x.a": 1}}),
                2,
                "The field 'x.a' must be an array but is of type string in document {_id: 1}",
            ),
            (
                a(bson!(5)),
                bson!({"$addToSet": {"a": 1}}),
                2,
                "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": 1}}}),
                2,
                "The argument to $each in $push must be an array but it was of type: int",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": [], "$foo": 1}}}),
                2,
                "Unrecognized clause in $push: $foo",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": [], "$slice": "x"}}}),
                2,
                "The value for $slice must be an integer value but was given type: string",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": [], "$position": 1.5}}}),
                2,
                "The value for $position must be an integer value, not of type: double",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": [], "$sort": 2}}}),
                2,
                "The $sort element value must be either 1 or -1",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": [], "$sort": {}}}}),
                2,
                "The $sort pattern is empty",
            ),
            (
                a(bson!([])),
                bson!({"$push": {"a": {"$each": [], "$sort": "x"}}}),
                2,
                "The $sort is invalid",
            ),
            (
                a(bson!([])),
                bson!({"$addToSet": {"a": {"$each": 1}}}),
                14,
                "The argument to $each in $addToSet must be an array but it was of type int",
            ),
            (
                a(bson!([])),
                bson!({"$addToSet": {"a": {"$each": [], "x": 1}}}),
                2,
                "Found unexpected fields after $each in $addToSet",
            ),
        ],
        None,
        None,
    );
}

#[test]
fn pop_pull_pull_all() {
    let a = |v: Bson| doc! {"_id": 1, "a": v};
    check(
        &[
            (
                a(bson!([1, 2, 3])),
                bson!({"$pop": {"a": 1}}),
                a(bson!([1, 2])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$pop": {"a": -1}}),
                a(bson!([2, 3])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$pop": {"a": 1.0}}),
                a(bson!([1, 2])),
            ),
            (a(bson!([])), bson!({"$pop": {"a": 1}}), a(bson!([]))),
            (doc! {"_id": 1}, bson!({"$pop": {"a": 1}}), doc! {"_id": 1}),
            (
                a(bson!([1, 2, 3, 2])),
                bson!({"$pull": {"a": 2}}),
                a(bson!([1, 3])),
            ),
            (
                a(bson!([1, 2, 3, 2])),
                bson!({"$pull": {"a": 2.0}}),
                a(bson!([1, 3])),
            ),
            (
                a(bson!([1, 2, 3])),
                bson!({"$pull": {"a": 9}}),
                a(bson!([1, 2, 3])),
            ),
            (doc! {"_id": 1}, bson!({"$pull": {"a": 9}}), doc! {"_id": 1}),
            (
                a(bson!([1, 2, 3, 4])),
                bson!({"$pull": {"a": {"$gte": 3}}}),
                a(bson!([1, 2])),
            ),
            (
                a(bson!([1, 2, 3, 4])),
                bson!({"$pull": {"a": {"$in": [1, 4]}}}),
                a(bson!([2, 3])),
            ),
            (
                a(bson!([{"x": 1, "y": 1}, {"x": 2}, 1])),
                bson!({"$pull": {"a": {"x": 1}}}),
                a(bson!([{"x": 2}, 1])),
            ),
            (
                a(bson!([{"x": 1}, [1], 2])),
                bson!({"$pull": {"a": {}}}),
                a(bson!([[1], 2])),
            ),
            (
                a(bson!([[1, 2], [3]])),
                bson!({"$pull": {"a": [3]}}),
                a(bson!([[1, 2]])),
            ),
            (
                a(bson!([1, 2, 3, 1])),
                bson!({"$pullAll": {"a": [1, 3]}}),
                a(bson!([2])),
            ),
            (
                a(bson!([1, 2])),
                bson!({"$pullAll": {"a": []}}),
                a(bson!([1, 2])),
            ),
        ],
        None,
        None,
    );
    check_err(
        &[
            (
                a(bson!(5)),
                bson!({"$pop": {"a": 1}}),
                14,
                "Path 'a' contains an element of non-array type 'int'",
            ),
            (
                a(bson!([])),
                bson!({"$pop": {"a": 2}}),
                9,
                "$pop expects 1 or -1, found: 2",
            ),
            (
                a(bson!([])),
                bson!({"$pop": {"a": "x"}}),
                9,
                "Expected a number in: a: \"x\"",
            ),
            (
                a(bson!(5)),
                bson!({"$pull": {"a": 1}}),
                2,
                "Cannot apply $pull to a non-array value",
            ),
            (
                a(bson!(5)),
                bson!({"$pullAll": {"a": [1]}}),
                2,
                "Cannot apply $pull to a non-array value",
            ),
            (
                a(bson!([])),
                bson!({"$pullAll": {"a": 1}}),
                2,
                "$pullAll requires an array argument but was given a int",
            ),
        ],
        None,
        None,
    );
}

#[test]
fn positional() {
    check(
        &[
            (
                doc! {"_id": 1, "a": [1, 2, 3]},
                bson!({"$set": {"a.$": 9}}),
                doc! {"_id": 1, "a": [1, 9, 3]},
            ),
            (
                doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
                bson!({"$inc": {"a.$.b": 5}}),
                doc! {"_id": 1, "a": [{"b": 1}, {"b": 7}]},
            ),
            (
                doc! {"_id": 1, "a": [1, 2, 3]},
                bson!({"$unset": {"a.$": 1}}),
                doc! {"_id": 1, "a": [1, null, 3]},
            ),
            (
                doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
                bson!({"$set": {"a.$.c": 1, "a.0.c": 2}}),
                doc! {"_id": 1, "a": [{"b": 1, "c": 2}, {"b": 2, "c": 1}]},
            ),
        ],
        None,
        Some(1),
    );
    check_err(
        &[(
            doc! {"_id": 1, "a": [1, 2]},
            bson!({"$set": {"a.$": 1, "a.1": 2}}),
            40,
            "Update created a conflict at 'a.1'",
        )],
        None,
        Some(1),
    );
    check_err(
        &[
            (
                doc! {"_id": 1, "a": [1, 2]},
                bson!({"$set": {"a.$": 1}}),
                2,
                "The positional operator did not find the match needed from the query.",
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"$": 1}}),
                2,
                "Cannot have positional (i.e. '$') element in the first position",
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"a.$.b.$": 1}}),
                2,
                "Too many positional (i.e. '$') elements found in path 'a.$.b.$'",
            ),
        ],
        None,
        None,
    );
}

#[test]
fn all_positional() {
    check(
        &[
            (
                doc! {"_id": 1, "a": [1, 2]},
                bson!({"$inc": {"a.$[]": 1}}),
                doc! {"_id": 1, "a": [2, 3]},
            ),
            (
                doc! {"_id": 1, "a": []},
                bson!({"$inc": {"a.$[]": 1}}),
                doc! {"_id": 1, "a": []},
            ),
            (
                doc! {"_id": 1, "a": [{"b": 1}, {}]},
                bson!({"$set": {"a.$[].b": 5}}),
                doc! {"_id": 1, "a": [{"b": 5}, {"b": 5}]},
            ),
            (
                doc! {"_id": 1, "a": [[1, 2], [3]]},
                bson!({"$inc": {"a.$[].$[]": 10}}),
                doc! {"_id": 1, "a": [[11, 12], [13]]},
            ),
            (
                doc! {"_id": 1, "a": [{"b": [1]}, {"b": [2]}]},
                bson!({"$push": {"a.$[].b": 0}}),
                doc! {"_id": 1, "a": [{"b": [1, 0]}, {"b": [2, 0]}]},
            ),
        ],
        None,
        None,
    );
    check_err(
        &[
            (
                doc! {"_id": 1},
                bson!({"$set": {"a.$[]": 1}}),
                2,
                "The path 'a' must exist in the document in order to apply array updates.",
            ),
            (
                doc! {"_id": 1, "x": {}},
                bson!({"$set": {"x.a.$[].b": 1}}),
                2,
                "The path 'x.a' must exist in the document in order to apply array updates.",
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"$set": {"a.$[]": 1}}),
                2,
                "Cannot apply array updates to non-array element a: 1",
            ),
            (
                doc! {"_id": 1, "a": [1, {}]},
                bson!({"$set": {"a.$[].b": 1}}),
                28,
                "Cannot create field 'b' in element {0: 1}",
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"$[]": 1}}),
                2,
                "Cannot have array filter identifier",
            ),
            (
                doc! {"_id": 1, "a": [1]},
                bson!({"$set": {"a.$[]": 1, "a.0": 2}}),
                40,
                "Updating the path 'a.0' would create a conflict at 'a'",
            ),
        ],
        None,
        None,
    );
}

#[test]
fn filtered_positional() {
    let gt1 = [doc! {"x": {"$gt": 1}}];
    check(
        &[
            (
                doc! {"_id": 1, "a": [1, 2, 3]},
                bson!({"$set": {"a.$[x]": 0}}),
                doc! {"_id": 1, "a": [1, 0, 0]},
            ),
            (
                doc! {"_id": 1, "a": [0, 1]},
                bson!({"$set": {"a.$[x]": 0}}),
                doc! {"_id": 1, "a": [0, 1]},
            ),
        ],
        Some(&gt1),
        None,
    );
    let by_field = [doc! {"e.k": "b"}];
    check(
        &[(
            doc! {"_id": 1, "a": [{"k": "a", "n": 1}, {"k": "b", "n": 1}]},
            bson!({"$inc": {"a.$[e].n": 1}}),
            doc! {"_id": 1, "a": [{"k": "a", "n": 1}, {"k": "b", "n": 2}]},
        )],
        Some(&by_field),
        None,
    );
    let nested = [doc! {"i.v": {"$gte": 2}}, doc! {"j": 1}];
    check(
        &[(
            doc! {"_id": 1, "a": [{"v": 1, "w": [1, 2]}, {"v": 2, "w": [1, 2, 1]}]},
            bson!({"$set": {"a.$[i].w.$[j]": 0}}),
            doc! {"_id": 1, "a": [{"v": 1, "w": [1, 2]}, {"v": 2, "w": [0, 2, 0]}]},
        )],
        Some(&nested),
        None,
    );
    check_err(
        &[
            (
                doc! {"_id": 1, "a": [1]},
                bson!({"$set": {"a.$[y]": 0}}),
                2,
                "No array filter found for identifier 'y' in path 'a.$[y]'",
            ),
            (
                doc! {"_id": 1, "a": [1]},
                bson!({"$set": {"a.$[]": 0}}),
                9,
                "The array filter for identifier 'x' was not used in the update",
            ),
            (
                doc! {"_id": 1},
                bson!({"$set": {"a.$[x]": 0}}),
                2,
                "The path 'a' must exist in the document in order to apply array updates.",
            ),
            (
                doc! {"_id": 1, "a": [1, 2]},
                bson!({"$set": {"a.$[x]": 0, "a.$[]": 1}}),
                40,
                "Update created a conflict at 'a.1'",
            ),
        ],
        Some(&gt1),
        None,
    );
    for (filters, code, msg) in [
        (
            vec![doc! {}],
            9,
            "Cannot use an expression without a top-level field name in arrayFilters",
        ),
        (
            vec![doc! {"x": 1, "y": 1}],
            9,
            "Expected a single top-level field name, found 'x' and 'y'",
        ),
        (
            vec![doc! {"X": 1}],
            2,
            "must be an alphanumeric string beginning with a lowercase letter, found 'X'",
        ),
        (
            vec![doc! {"x": 1}, doc! {"x.a": 1}],
            9,
            "Found multiple array filters with the same top-level field name x",
        ),
    ] {
        let e = UpdateSpec::parse(&bson!({"$set": {"a.$[x]": 1}}), Some(&filters)).unwrap_err();
        assert_eq!(
            (e.code, e.message.contains(msg)),
            (code, true),
            "{filters:?}: {e}"
        );
    }
}

#[test]
fn parse_and_path_errors() {
    check_err(
        &[
            (doc! {"_id": 1}, bson!({"$foo": {"a": 1}}), 9, "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array"),
            (doc! {"_id": 1}, bson!({"$set": {"a": 1}, "b": 2}), 9, "Unknown modifier: b."),
            (doc! {"_id": 1}, bson!({"$set": 1}), 9, "Modifiers operate on fields but we found type int instead"),
            (doc! {"_id": 1}, bson!({"$set": {"a": 1}, "$inc": {"a.b": 1}}), 40, "Updating the path 'a.b' would create a conflict at 'a'"),
            (doc! {"_id": 1}, bson!({"$set": {"a.b": 1}, "$inc": {"a": 1}}), 40, "Updating the path 'a' would create a conflict at 'a'"),
            (doc! {"_id": 1}, bson!({"$set": {"a": 1}, "$unset": {"a": 1}}), 40, "Updating the path 'a' would create a conflict at 'a'"),
            (doc! {"_id": 1}, bson!({"$set": {"": 1}}), 56, "An empty update path is not valid."),
            (doc! {"_id": 1}, bson!({"$set": {"a..b": 1}}), 56, "The update path 'a..b' contains an empty field name"),
            (doc! {"_id": 1}, bson!({"$set": {"$x": 1}}), 52, "The dollar ($) prefixed field '$x'"),
            (doc! {"_id": 1}, bson!({"$set": {"_id": 2}}), 66, "Performing an update on the path '_id' would modify the immutable field '_id'"),
            (doc! {"_id": {"a": 1}}, bson!({"$set": {"_id.a": 2}}), 66, "Performing an update on the path '_id.a' would modify the immutable field '_id'"),
            (doc! {"_id": 1}, bson!({"$unset": {"_id": 1}}), 66, "would modify the immutable field '_id'"),
            (doc! {"_id": 1, "a": 1}, bson!({"$set": {"a.b": 1}}), 28, "Cannot create field 'b' in element {a: 1}"),
            (doc! {"_id": 1, "a": null}, bson!({"$set": {"a.b.c": 1}}), 28, "Cannot create field 'b' in element {a: null}"),
            (doc! {"_id": 1, "a": [1, 2]}, bson!({"$set": {"a.b": 1}}), 28, "Cannot create field 'b' in element {a: [ 1, 2 ]}"),
            (doc! {"_id": 1, "a": {"b": "s"}}, bson!({"$inc": {"a.b.c": 1}}), 28, "Cannot create field 'c' in element {b: \"s\"}"),
            (doc! {"_id": 1}, bson!(1), 9, "Update argument must be either an object or an array"),
        ],
        None,
        None,
    );
    // A failed update leaves the document as it was.
    let spec = UpdateSpec::parse(&bson!({"$set": {"a": 1, "b.c": 1}}), None).unwrap();
    let mut d = doc! {"_id": 1, "b": 5};
    assert!(spec.apply(&mut d, &UpdateContext::new(now())).is_err());
    assert_eq!(d, doc! {"_id": 1, "b": 5});
}

#[test]
fn replacement() {
    check(
        &[
            (
                doc! {"_id": 1, "a": 1},
                bson!({"b": 2}),
                doc! {"_id": 1, "b": 2},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"b": 2, "_id": 1}),
                doc! {"b": 2, "_id": 1},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!({"a": 1}),
                doc! {"_id": 1, "a": 1},
            ),
            (doc! {"_id": 1, "a": 1}, bson!({}), doc! {"_id": 1}),
        ],
        None,
        None,
    );
    check_err(
        &[
            (
                doc! {"_id": 1},
                bson!({"_id": 2}),
                66,
                "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2",
            ),
            (doc! {"_id": 1}, bson!({"a": 1, "$set": {"b": 1}}), 52, "The dollar ($) prefixed field '$set' in '$set' is not allowed"),
            (doc! {"_id": 1}, bson!({"_id": [1]}), 53, "The '_id' value cannot be of type array"),
        ],
        None,
        None,
    );
    assert!(UpdateSpec::parse(&bson!({"a": 1}), None)
        .unwrap()
        .is_replacement());
    assert!(!UpdateSpec::parse(&bson!({"$set": {"a": 1}}), None)
        .unwrap()
        .is_replacement());
}

#[test]
fn upsert() {
    let seed = upsert_seed(&doc! {
        "a": 1, "b.c": 2, "$and": [{"d": 3}, {"e": {"$gt": 1}}], "f": {"$eq": 4, "$lt": 9},
        "g": {"$in": [5]}, "h": {"$in": [1, 2]}, "_id": 7, "$or": [{"i": 1}, {"j": 1}], "k": {"x": 1},
    })
    .unwrap();
    assert!(
        identical_docs(
            &seed,
            &doc! {"_id": 7, "a": 1, "b": {"c": 2}, "d": 3, "f": 4, "g": 5, "k": {"x": 1}}
        ),
        "{seed}"
    );
    assert_eq!(
        upsert_seed(&doc! {"a": 1, "$and": [{"a": 2}]})
            .unwrap_err()
            .code,
        54
    );
    let e = upsert_seed(&doc! {"a": 1, "a.b": 2}).unwrap_err();
    assert_eq!(
        e.message,
        "cannot infer query fields to set, both paths 'a' and 'a.b' are matched"
    );

    let spec = UpdateSpec::parse(
        &bson!({"$set": {"x": 1}, "$setOnInsert": {"created": true}, "$inc": {"n": 1}}),
        None,
    )
    .unwrap();
    let d = spec
        .upsert_document(&doc! {"_id": 3, "q": "v"}, now())
        .unwrap();
    assert!(
        identical_docs(
            &d,
            &doc! {"_id": 3, "q": "v", "created": true, "n": 1, "x": 1}
        ),
        "{d}"
    );

    let d = spec.upsert_document(&doc! {"q": "v"}, now()).unwrap();
    assert!(
        matches!(d.iter().next(), Some((k, Bson::ObjectId(_))) if k == "_id"),
        "{d}"
    );
    assert_eq!(d.get("created"), Some(&Bson::Boolean(true)));

    // $set of _id is allowed on insert unless the query fixed it.
    let spec = UpdateSpec::parse(&bson!({"$set": {"_id": 9, "a": 1}}), None).unwrap();
    assert!(identical_docs(
        &spec.upsert_document(&doc! {"a": 0}, now()).unwrap(),
        &doc! {"_id": 9, "a": 1}
    ));
    assert_eq!(
        spec.upsert_document(&doc! {"_id": 1}, now())
            .unwrap_err()
            .code,
        66
    );

    let spec = UpdateSpec::parse(&bson!({"y": 1}), None).unwrap();
    let d = spec
        .upsert_document(&doc! {"_id": 5, "x": 1}, now())
        .unwrap();
    assert!(identical_docs(&d, &doc! {"_id": 5, "y": 1}), "{d}");

    let spec = UpdateSpec::parse(&bson!({"$set": {"a.$": 1}}), None).unwrap();
    assert_eq!(
        spec.upsert_document(&doc! {"a": 1}, now())
            .unwrap_err()
            .code,
        2
    );
}

#[test]
fn pipeline() {
    check(
        &[
            (
                doc! {"_id": 1, "a": 5},
                bson!([{"$set": {"b": "$a"}}]),
                doc! {"_id": 1, "a": 5, "b": 5},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!([{"$addFields": {"c.d": {"$literal": 1}}}]),
                doc! {"_id": 1, "a": 5, "c": {"d": 1}},
            ),
            (
                doc! {"_id": 1, "a": {"x": 1}},
                bson!([{"$set": {"a": {"y": "$a.x"}}}]),
                doc! {"_id": 1, "a": {"x": 1, "y": 1}},
            ),
            (
                doc! {"_id": 1, "a": 5, "b": 1},
                bson!([{"$unset": ["a"]}]),
                doc! {"_id": 1, "b": 1},
            ),
            (
                doc! {"_id": 1, "a": 5, "b": 1},
                bson!([{"$project": {"a": 1}}]),
                doc! {"_id": 1, "a": 5},
            ),
            (
                doc! {"_id": 1, "a": 5, "b": 1},
                bson!([{"$project": {"a": 0}}]),
                doc! {"_id": 1, "b": 1},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!([{"$replaceWith": {"x": "$a"}}]),
                doc! {"_id": 1, "x": 5},
            ),
            (
                doc! {"_id": 1, "a": {"z": 2}},
                bson!([{"$replaceRoot": {"newRoot": "$a"}}]),
                doc! {"_id": 1, "z": 2},
            ),
            (
                doc! {"_id": 1, "a": 5},
                bson!([{"$set": {"a": 5}}]),
                doc! {"_id": 1, "a": 5},
            ),
            (doc! {"_id": 1, "a": 5}, bson!([]), doc! {"_id": 1, "a": 5}),
            (
                doc! {"_id": 1},
                bson!([{"$set": {"t": "$$NOW"}}]),
                doc! {"_id": 1, "t": now()},
            ),
            (
                doc! {"_id": 1, "a": 1},
                bson!([{"$replaceWith": {"b": 2}}]),
                doc! {"_id": 1, "b": 2},
            ),
        ],
        None,
        None,
    );
    check_err(
        &[
            (
                doc! {"_id": 1},
                bson!([{"$match": {}}]),
                72,
                "$match is not allowed to be used within an update",
            ),
            (
                doc! {"_id": 1},
                bson!([{"$set": {"_id": 2}}]),
                66,
                "was found to have been altered to _id: 2",
            ),
            (
                doc! {"_id": 1},
                bson!([{"$set": {"a": 1}, "$unset": "b"}]),
                40323,
                "exactly one field",
            ),
            (
                doc! {"_id": 1},
                bson!([{"$replaceWith": 1}]),
                40228,
                "'replacement document' must evaluate to an object",
            ),
        ],
        None,
        None,
    );
}

#[test]
fn spec_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<UpdateSpec>();
}

#[test]
fn field_order_and_padding() {
    check(
        &[
            // Children apply in string order: "10" pads first, then "9.x" finds null.
            (
                doc! {"_id": 1, "a": []},
                bson!({"$set": {"a.3": 1, "a.1.x": 2}}),
                doc! {"_id": 1, "a": [null, {"x": 2}, null, 1]},
            ),
            (
                doc! {"_id": 1, "z": 1, "b": 1},
                bson!({"$set": {"y": 1, "b": 2, "c": 3}}),
                doc! {"_id": 1, "z": 1, "b": 2, "c": 3, "y": 1},
            ),
            (
                doc! {"_id": 1, "a": [1, 2]},
                bson!({"$unset": {"a.$[]": 1}}),
                doc! {"_id": 1, "a": [null, null]},
            ),
        ],
        None,
        None,
    );
    check_err(
        &[(
            doc! {"_id": 1, "a": []},
            bson!({"$set": {"a.10": 1, "a.9.x": 2}}),
            28,
            "Cannot create field 'x' in element {9: null}",
        )],
        None,
        None,
    );
}
