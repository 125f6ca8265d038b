//! Tests of the change-stream description of updates (`apply_described`, `describe`),
//! against what mongod 7.0 reports (the change-streams spec tests and its update logging).

use bson::{bson, doc};

use super::*;

fn ctx() -> UpdateContext {
    UpdateContext::new(DateTime::from_millis(1_700_000_000_123))
}

/// What `update` does to `before`; `describe` on the result must say the same.
fn change(before: Document, update: Bson) -> Option<UpdateChange> {
    change_with(before, update, None)
}

fn change_with(
    before: Document,
    update: Bson,
    filters: Option<&[Document]>,
) -> Option<UpdateChange> {
    let spec = UpdateSpec::parse(&update, filters).expect("valid update");
    let mut after = before.clone();
    let got = spec
        .apply_described(&mut after, &ctx())
        .unwrap_or_else(|e| panic!("{update} on {before}: {e}"));
    let mut plain = before.clone();
    let changed = spec.apply(&mut plain, &ctx()).expect("same update");
    assert_eq!(changed, got.is_some(), "{update} on {before}: changed flag");
    assert_eq!(plain, after, "{update} on {before}: same result as apply");
    if let Some(c) = &got {
        assert_eq!(
            &spec.describe(&before, &after, &ctx()),
            c,
            "{update} on {before}: describe"
        );
    }
    got
}

/// The description of an update that must be reported as an `update` event.
fn described(before: Document, update: Bson) -> UpdateDescription {
    match change(before.clone(), update.clone()) {
        Some(UpdateChange::Update(d)) => d,
        other => panic!("{update} on {before}: expected an update event, got {other:?}"),
    }
}

/// `{updatedFields, removedFields, truncatedArrays}` as the event shows them.
fn shown(before: Document, update: Bson) -> Document {
    described(before, update).to_document(false)
}

#[test]
fn array_truncation_by_modifier_and_by_pipeline() {
    // Spec test "Test array truncation".
    let before = doc! {"_id": 1, "a": 1, "array": ["foo", {"a": "bar"}, 1, 2, 3]};
    let modifier = bson!({"$set": {"array": ["foo", {"a": "bar"}]}});
    assert_eq!(
        shown(before.clone(), modifier),
        doc! {
            "updatedFields": {"array": ["foo", {"a": "bar"}]},
            "removedFields": [],
            "truncatedArrays": [],
        }
    );
    let pipeline = bson!([{"$set": {"array": ["foo", {"a": "bar"}]}}]);
    let d = described(before, pipeline);
    assert_eq!(d.truncated_arrays, vec![("array".to_owned(), 2)]);
    assert_eq!(
        d.to_document(false),
        doc! {
            "updatedFields": {},
            "removedFields": [],
            "truncatedArrays": [{"field": "array", "newSize": 2_i32}],
        }
    );
}

#[test]
fn set_and_unset_together() {
    // pymongo's test_change_operations.
    let before = doc! {"_id": 1, "foo": "bar"};
    let update = bson!({"$set": {"new": 1}, "$unset": {"foo": 1}});
    assert_eq!(
        shown(before, update),
        doc! {"updatedFields": {"new": 1}, "removedFields": ["foo"], "truncatedArrays": []}
    );
}

#[test]
fn push_logs_appended_elements_alone() {
    let before = doc! {"_id": 1, "arr": [1, 2]};
    let fields = |u: Bson| described(before.clone(), u).updated_fields;
    assert_eq!(fields(bson!({"$push": {"arr": 3}})), doc! {"arr.2": 3});
    assert_eq!(
        fields(bson!({"$push": {"arr": {"$each": [3, 4]}}})),
        doc! {"arr.2": 3, "arr.3": 4}
    );
    // Inserting anywhere but past the end, sorting or slicing rewrites the whole array.
    assert_eq!(
        fields(bson!({"$push": {"arr": {"$each": [0], "$position": 0}}})),
        doc! {"arr": [0, 1, 2]}
    );
    assert_eq!(
        fields(bson!({"$push": {"arr": {"$each": [3], "$position": 2}}})),
        doc! {"arr": [1, 2, 3]}
    );
    assert_eq!(
        fields(bson!({"$push": {"arr": {"$each": [3], "$slice": 2}}})),
        doc! {"arr": [1, 2]}
    );
    // An empty array, or none at all, is logged whole too.
    let empty = doc! {"_id": 1, "arr": []};
    assert_eq!(
        described(empty, bson!({"$push": {"arr": 3}})).updated_fields,
        doc! {"arr": [3]}
    );
    assert_eq!(
        described(doc! {"_id": 1}, bson!({"$push": {"arr": 3}})).updated_fields,
        doc! {"arr": [3]}
    );
}

#[test]
fn pop_reports_the_whole_array() {
    let before = doc! {"_id": 1, "arr": [1, 2, 3]};
    assert_eq!(
        shown(before.clone(), bson!({"$pop": {"arr": 1}})),
        doc! {"updatedFields": {"arr": [1, 2]}, "removedFields": [], "truncatedArrays": []}
    );
    assert_eq!(
        described(before, bson!({"$pop": {"arr": -1}})).updated_fields,
        doc! {"arr": [2, 3]}
    );
    assert_eq!(
        change(doc! {"_id": 1, "arr": []}, bson!({"$pop": {"arr": 1}})),
        None
    );
}

#[test]
fn inc_reports_the_new_value() {
    let before = doc! {"_id": 1, "n": 1, "sub": {"m": 1.5}};
    assert_eq!(
        described(before.clone(), bson!({"$inc": {"n": 2, "sub.m": 1}})).updated_fields,
        doc! {"n": 3, "sub.m": 2.5}
    );
    // Incrementing by zero changes nothing, so nothing is reported for it.
    assert_eq!(change(before.clone(), bson!({"$inc": {"n": 0}})), None);
    assert_eq!(
        described(before, bson!({"$inc": {"n": 0, "new": 5}})).updated_fields,
        doc! {"new": 5}
    );
}

#[test]
fn rename_reports_the_destination_then_the_removed_source() {
    let before = doc! {"_id": 1, "a": 1, "z": {"y": 2}};
    assert_eq!(
        shown(before.clone(), bson!({"$rename": {"a": "b"}})),
        doc! {"updatedFields": {"b": 1}, "removedFields": ["a"], "truncatedArrays": []}
    );
    assert_eq!(
        shown(before.clone(), bson!({"$rename": {"z.y": "a"}})),
        doc! {"updatedFields": {"a": 2}, "removedFields": ["z.y"], "truncatedArrays": []}
    );
    // mongod removes the source when it reaches the destination ("a" comes before "b").
    let d = described(
        doc! {"_id": 1, "b": 1, "z": 2},
        bson!({"$unset": {"b": 1}, "$rename": {"z": "a"}}),
    );
    assert_eq!(d.removed_fields, vec!["z", "b"]);
    assert_eq!(d.updated_fields, doc! {"a": 2});
    // A missing source renames nothing.
    assert_eq!(change(before, bson!({"$rename": {"missing": "c"}})), None);
}

#[test]
fn unset_of_a_missing_field_reports_nothing() {
    let before = doc! {"_id": 1, "a": 1, "arr": [1, 2]};
    assert_eq!(
        change(before.clone(), bson!({"$unset": {"missing": 1}})),
        None
    );
    assert_eq!(
        shown(
            before.clone(),
            bson!({"$unset": {"missing": 1}, "$set": {"x": 1}})
        ),
        doc! {"updatedFields": {"x": 1}, "removedFields": [], "truncatedArrays": []}
    );
    // An array element is set to null, which is an update of that element.
    assert_eq!(
        shown(before, bson!({"$unset": {"arr.1": 1}})),
        doc! {"updatedFields": {"arr.1": null}, "removedFields": [], "truncatedArrays": []}
    );
}

#[test]
fn created_paths_report_the_topmost_created_field() {
    assert_eq!(
        described(doc! {"_id": 1}, bson!({"$set": {"a.b.c": 1}})).updated_fields,
        doc! {"a": {"b": {"c": 1}}}
    );
    assert_eq!(
        described(
            doc! {"_id": 1, "a": {"x": 0}},
            bson!({"$set": {"a.b.c": 1}})
        )
        .updated_fields,
        doc! {"a.b": {"c": 1}}
    );
    // Two fields created under one new parent are reported as that parent.
    assert_eq!(
        described(doc! {"_id": 1}, bson!({"$set": {"x.y": 1, "x.z": 2}})).updated_fields,
        doc! {"x": {"y": 1, "z": 2}}
    );
    // Past the end of an array: the element alone (the null padding is implied).
    assert_eq!(
        described(doc! {"_id": 1, "a": [1]}, bson!({"$set": {"a.3": 5}})).updated_fields,
        doc! {"a.3": 5}
    );
    assert_eq!(
        described(doc! {"_id": 1, "a": [1]}, bson!({"$set": {"a.1.b": 5}})).updated_fields,
        doc! {"a.1": {"b": 5}}
    );
}

#[test]
fn fields_are_reported_updates_first_then_sub_documents() {
    // mongod's diff lists a level's own fields before the ones inside its sub-documents.
    let before = doc! {"_id": 1, "a": {"x": 0}, "c": 1};
    let fields = described(
        before,
        bson!({"$set": {"a.b": 1, "a.x": 2, "c": 2, "d": 3}}),
    )
    .updated_fields;
    let keys: Vec<&str> = fields.keys().map(String::as_str).collect();
    assert_eq!(keys, ["c", "d", "a.x", "a.b"]);
}

#[test]
fn all_positional_reports_each_changed_element() {
    let before = doc! {"_id": 1, "arr": [1, 2, 3]};
    assert_eq!(
        described(before.clone(), bson!({"$inc": {"arr.$[]": 1}})).updated_fields,
        doc! {"arr.0": 2, "arr.1": 3, "arr.2": 4}
    );
    assert_eq!(
        described(before.clone(), bson!({"$set": {"arr.$[]": 2}})).updated_fields,
        doc! {"arr.0": 2, "arr.2": 2}
    );
    let filters = [doc! {"x": {"$gt": 1}}];
    let got = change_with(before, bson!({"$set": {"arr.$[x]": 0}}), Some(&filters));
    let Some(UpdateChange::Update(d)) = got else {
        panic!("expected an update, got {got:?}");
    };
    assert_eq!(d.updated_fields, doc! {"arr.1": 0, "arr.2": 0});
}

#[test]
fn positional_reports_the_matched_element() {
    let spec = UpdateSpec::parse(&bson!({"$set": {"arr.$.v": 9}}), None).unwrap();
    let mut doc = doc! {"_id": 1, "arr": [{"v": 1}, {"v": 2}]};
    let mut ctx = ctx();
    ctx.matched_array_index = Some(1);
    let got = spec.apply_described(&mut doc, &ctx).unwrap();
    let Some(UpdateChange::Update(d)) = got else {
        panic!("expected an update, got {got:?}");
    };
    assert_eq!(d.updated_fields, doc! {"arr.1.v": 9});
}

#[test]
fn disambiguated_paths() {
    // change-streams-disambiguatedPaths.json.
    let d = described(doc! {"_id": 1, "a": {"1": 1}}, bson!({"$set": {"a.1": 2}}));
    assert_eq!(d.disambiguated_paths, doc! {"a.1": ["a", "1"]});
    assert_eq!(
        d.to_document(true),
        doc! {
            "updatedFields": {"a.1": 2},
            "removedFields": [],
            "truncatedArrays": [],
            "disambiguatedPaths": {"a.1": ["a", "1"]},
        }
    );
    assert!(!d.to_document(false).contains_key("disambiguatedPaths"));

    let d = described(
        doc! {"_id": 1, "a": [{"1": 1}]},
        bson!({"$set": {"a.0.1": 2}}),
    );
    assert_eq!(
        d.disambiguated_paths,
        doc! {"a.0.1": ["a", Bson::Int32(0), "1"]}
    );

    // An array index alone is not ambiguous, nor is a numeric first field; mongod still
    // shows the (empty) field with showExpandedEvents.
    let d = described(
        doc! {"_id": 1, "a": [1], "7": 1},
        bson!({"$set": {"a.0": 2, "7": 2}}),
    );
    assert_eq!(d.disambiguated_paths, doc! {});
    assert_eq!(
        d.to_document(true)
            .get_document("disambiguatedPaths")
            .unwrap(),
        &doc! {}
    );
}

#[test]
fn pipeline_updates_are_diffed() {
    // A sub-diff must stay smaller than the sub-document, hence the long value beside "y".
    let before = doc! {
        "_id": 1,
        "keep": "a long enough value",
        "a": {"x": "some long text value here", "y": 2},
        "gone": 1,
    };
    let d = described(before, bson!([{"$set": {"a.y": 3}}, {"$unset": "gone"}]));
    assert_eq!(
        d.to_document(false),
        doc! {"updatedFields": {"a.y": 3}, "removedFields": ["gone"], "truncatedArrays": []}
    );
}

#[test]
fn pipeline_diff_larger_than_the_document_is_a_replacement() {
    // The diff `{d: {a: false}, i: {b: 1}}` is estimated larger than `{_id: 1, b: 1}`.
    let before = doc! {"_id": 1, "a": 1};
    let update = bson!([{"$unset": "a"}, {"$set": {"b": 1}}]);
    assert_eq!(change(before.clone(), update), Some(UpdateChange::Replace));
    // A change that leaves the document as it was is no change.
    assert_eq!(change(before, bson!([{"$set": {"a": 1}}])), None);
}

#[test]
fn replacement_is_a_replace_event() {
    let before = doc! {"_id": 1, "a": 1};
    assert_eq!(
        change(before.clone(), bson!({"b": 2})),
        Some(UpdateChange::Replace)
    );
    assert_eq!(change(before, bson!({"_id": 1, "a": 1})), None);
}

#[test]
fn describe_without_a_reproducible_change_falls_back_to_the_diff() {
    // `describe` on documents the update did not produce still tells their difference.
    let spec = UpdateSpec::parse(&bson!({"$set": {"a": 1}}), None).unwrap();
    let before = doc! {"_id": 1, "a": 1, "s": "some padding text"};
    let after = doc! {"_id": 1, "a": 2, "s": "some padding text"};
    let UpdateChange::Update(d) = spec.describe(&before, &after, &ctx()) else {
        panic!("expected an update");
    };
    assert_eq!(d.updated_fields, doc! {"a": 2});
}

#[test]
fn deepest_documents_are_described_on_a_small_stack() {
    crate::robust_tests::on_small_stack(|| {
        let depth = wire::MAX_NESTING_DEPTH - 2;
        let deep = |leaf: Bson| {
            let mut v = leaf;
            for i in 0..depth {
                v = if i % 2 == 0 {
                    bson!({"a": v, "pad": "some text to keep sub-diffs small"})
                } else {
                    bson!([v, "pad"])
                };
            }
            v
        };
        let before = doc! {"_id": 1, "d": deep(bson!(1))};
        let after = doc! {"_id": 1, "d": deep(bson!(2))};
        let replace = bson!([{"$replaceWith": {"$literal": after.clone()}}]);
        let long_path = vec!["a"; depth].join(".");
        for update in [
            replace,
            bson!({"$set": {&long_path: 1}}),
            bson!({"$set": {"d": deep(bson!(3))}}),
            bson!({"$unset": {"d": 1}}),
        ] {
            let spec = UpdateSpec::parse(&update, None).unwrap();
            for doc in [before.clone(), doc! {"_id": 1}] {
                let mut d = doc.clone();
                if let Ok(Some(UpdateChange::Update(desc))) = spec.apply_described(&mut d, &ctx()) {
                    let _ = desc.to_document(true);
                }
                let _ = spec.describe(&doc, &after, &ctx());
            }
        }
    });
}
