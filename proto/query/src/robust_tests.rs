//! Client input must never panic or overflow a stack: regression tests for inputs that
//! did, and the deepest inputs the wire layer lets through run on a 2 MiB stack (what
//! tokio's blocking threads get).

use bson::{bson, doc, Bson, DateTime, Document};

use crate::agg::{NoCollections, Pipeline};
use crate::expr::{Expr, Variables};
use crate::matcher::Matcher;
use crate::projection::Projection;
use crate::sort::SortSpec;
use crate::update::{UpdateContext, UpdateSpec};

/// Runs `f` on a thread with a 2 MiB stack, as tokio's blocking pool does.
pub(crate) fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the closure panicked or overflowed")
}

fn ctx() -> UpdateContext {
    UpdateContext::new(DateTime::from_millis(1_700_000_000_000))
}

fn apply(update: Bson, doc: Document) -> crate::MongoResult<Document> {
    let spec = UpdateSpec::parse(&update, None)?;
    let mut d = doc;
    spec.apply(&mut d, &ctx())?;
    Ok(d)
}

#[test]
fn date_from_string_multibyte_after_offset_is_conversion_failure() {
    let update = bson!([{"$set": {"d": {"$dateFromString": {"dateString": "$s"}}}}]);
    for s in [
        "2020-01-01T00:00+0000é",
        "2020-01-01T00:00+00é",
        "2020-01-01T00:00+é",
        "2020-01-01T00:00-0é0",
        "2020-01-01T00:00:00.000+00:0€",
        "2020-01-01T00:00 €",
    ] {
        let err = apply(update.clone(), doc! {"_id": 1, "s": s}).unwrap_err();
        assert_eq!(err.code, 241, "{s}: {err:?}");
        assert_eq!(err.code_name, "ConversionFailure");
    }
    // With a format, too.
    let e = Expr::parse(&bson!({"$dateFromString": {"dateString": "+0000é", "format": "%z"}}))
        .unwrap()
        .eval(&doc! {}, &Variables::new())
        .unwrap_err();
    assert_eq!(e.code, 241);
    // A well-formed one still parses.
    let d = apply(update, doc! {"_id": 1, "s": "2020-01-01T00:00+0100"}).unwrap();
    assert_eq!(
        d.get_datetime("d").unwrap().timestamp_millis(),
        1_577_833_200_000
    );
}

#[test]
fn update_path_of_100000_components_is_refused() {
    let path = vec!["a"; 100_000].join(".");
    let r = on_small_stack(move || {
        let spec = UpdateSpec::parse(&bson!({"$set": {path.clone(): 1}}), None);
        let up = match &spec {
            Ok(s) => s.upsert_document(&doc! {}, DateTime::from_millis(0)).err(),
            Err(e) => Some(e.clone()),
        };
        let mut d = doc! {"_id": 1};
        let ap = match &spec {
            Ok(s) => s.apply(&mut d, &ctx()).err(),
            Err(e) => Some(e.clone()),
        };
        (up.map(|e| e.code), ap.map(|e| e.code))
    });
    assert_eq!(r, (Some(15), Some(15)));
}

// ---------------------------------------------------------------------------------------
// The deepest inputs the wire layer accepts, on a 2 MiB stack

const MAX: usize = wire::MAX_NESTING_DEPTH;

/// Wraps `leaf` with `f` as many times as fit in `depth` levels of nesting (a value's
/// depth: `{}` is 1). The result is what a client can send at the nesting limit.
fn nest(depth: usize, leaf: Bson, f: impl Fn(Bson) -> Bson) -> Bson {
    let mut cur = leaf;
    loop {
        let next = f(cur.clone());
        if crate::depth::value_depth_capped(&next, depth) > depth {
            return cur;
        }
        cur = next;
    }
}

fn as_doc(v: Bson) -> Document {
    match v {
        Bson::Document(d) => d,
        other => panic!("not a document: {other}"),
    }
}

/// Documents 100 levels deep: nested documents, nested arrays, and a mix.
fn deep_docs() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "a": nest(MAX, bson!(1), |v| bson!({"a": v}))},
        doc! {"_id": 2, "a": nest(MAX, bson!(1), |v| bson!([v]))},
        doc! {"_id": 3, "a": nest(MAX, bson!("x"), |v| bson!([{"a": v, "b": [1, 2]}]))},
        doc! {"_id": 4, "a": nest(MAX, bson!({}), |v| bson!({"0": [v]}))},
    ]
}

/// Expressions nested to the limit, one per shape of argument.
fn deep_exprs() -> Vec<(&'static str, Bson)> {
    vec![
        ("$add", nest(MAX, bson!("$x"), |v| bson!({"$add": [v, 1]}))),
        ("$abs", nest(MAX, bson!("$x"), |v| bson!({"$abs": v}))),
        ("$not", nest(MAX, bson!("$x"), |v| bson!({"$not": v}))),
        (
            "$and",
            nest(MAX, bson!("$x"), |v| bson!({"$and": [v, true]})),
        ),
        (
            "$or",
            nest(MAX, bson!("$x"), |v| bson!({"$or": [false, v]})),
        ),
        (
            "$cond",
            nest(
                MAX,
                bson!("$x"),
                |v| bson!({"$cond": {"if": v, "then": 1, "else": 2}}),
            ),
        ),
        (
            "$cond[]",
            nest(MAX, bson!("$x"), |v| bson!({"$cond": [true, v, 2]})),
        ),
        (
            "$switch",
            nest(
                MAX,
                bson!("$x"),
                |v| bson!({"$switch": {"branches": [{"case": true, "then": v}], "default": 0}}),
            ),
        ),
        (
            "$let",
            nest(
                MAX,
                bson!("$$v"),
                |v| bson!({"$let": {"vars": {"v": 1}, "in": v}}),
            ),
        ),
        (
            "$map",
            nest(
                MAX,
                bson!("$$this"),
                |v| bson!({"$map": {"input": [1], "in": v}}),
            ),
        ),
        (
            "$filter",
            nest(
                MAX,
                bson!([1, 2]),
                |v| bson!({"$filter": {"input": v, "cond": true}}),
            ),
        ),
        (
            "$reduce",
            nest(
                MAX,
                bson!([1]),
                |v| bson!({"$reduce": {"input": [1, 2], "initialValue": v, "in": ["$$value"]}}),
            ),
        ),
        ("object", nest(MAX, bson!("$x"), |v| bson!({"o": v}))),
        ("array", nest(MAX, bson!("$x"), |v| bson!([v, "$x"]))),
        (
            "$arrayElemAt",
            nest(MAX, bson!("$x"), |v| bson!({"$arrayElemAt": [[v], 0]})),
        ),
        (
            "$concatArrays",
            nest(MAX, bson!([1]), |v| bson!({"$concatArrays": [v, [2]]})),
        ),
        (
            "$ifNull",
            nest(MAX, bson!("$x"), |v| bson!({"$ifNull": [null, v]})),
        ),
        (
            "$toString",
            nest(MAX, bson!("$x"), |v| bson!({"$toString": v})),
        ),
        (
            "$trim",
            nest(MAX, bson!("x"), |v| bson!({"$trim": {"input": v}})),
        ),
        (
            "$dateAdd",
            nest(
                MAX,
                bson!({"$toDate": 0}),
                |v| bson!({"$dateAdd": {"startDate": v, "unit": "day", "amount": 1}}),
            ),
        ),
        (
            "$setField",
            nest(
                MAX,
                bson!({}),
                |v| bson!({"$setField": {"field": "f", "input": v, "value": 1}}),
            ),
        ),
        (
            "$mergeObjects",
            nest(MAX, bson!({}), |v| bson!({"$mergeObjects": [v, {"m": 1}]})),
        ),
        (
            "$regexMatch",
            nest(
                MAX,
                bson!("x"),
                |v| bson!({"$toString": {"$regexMatch": {"input": {"$toString": v}, "regex": "x"}}}),
            ),
        ),
        (
            "$literal",
            nest(MAX, bson!(1), |v| bson!({"$literal": [v]})),
        ),
        ("$eq", nest(MAX, bson!("$x"), |v| bson!({"$eq": [v, 1]}))),
        ("$size", nest(MAX, bson!([1]), |v| bson!([{"$size": v}]))),
    ]
}

#[test]
fn deepest_expressions_evaluate_on_a_small_stack() {
    on_small_stack(|| {
        for (name, spec) in deep_exprs() {
            let e = Expr::parse(&spec).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for d in deep_docs().into_iter().chain([doc! {"x": 1}]) {
                let _ = e.eval(&d, &Variables::new());
            }
            // The same expression inside stages and a pipeline update.
            let stage = doc! {"$project": {"r": spec.clone()}};
            let p = Pipeline::parse(&[stage, doc! {"$addFields": {"s": spec.clone()}}])
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let _ = p.run(deep_docs(), &NoCollections);
            let filter = doc! {"$expr": spec.clone()};
            let m = Matcher::new(&filter).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for d in deep_docs() {
                let _ = m.matches_checked(&d);
            }
            let up = bson!([{"$set": {"r": spec.clone()}}]);
            for d in deep_docs() {
                let _ = apply(up.clone(), d);
            }
        }
    });
}

fn deep_filters() -> Vec<(&'static str, Document)> {
    let leaf = bson!({"a": 1});
    vec![
        (
            "$and",
            as_doc(nest(MAX, leaf.clone(), |v| bson!({"$and": [v, {"b": 1}]}))),
        ),
        (
            "$or",
            as_doc(nest(MAX, leaf.clone(), |v| bson!({"$or": [{"b": 1}, v]}))),
        ),
        (
            "$nor",
            as_doc(nest(MAX, leaf.clone(), |v| bson!({"$nor": [v]}))),
        ),
        (
            "$elemMatch",
            as_doc(nest(MAX, leaf.clone(), |v| bson!({"a": {"$elemMatch": v}}))),
        ),
        (
            "$elemMatch value",
            doc! {"a": nest(MAX - 1, bson!({"$gt": 0}), |v| bson!({"$elemMatch": v}))},
        ),
        (
            "$not",
            doc! {"a": nest(MAX - 1, bson!({"$gt": 0}), |v| bson!({"$not": v}))},
        ),
        (
            "$all $elemMatch",
            as_doc(nest(
                MAX,
                leaf.clone(),
                |v| bson!({"a": {"$all": [{"$elemMatch": v}]}}),
            )),
        ),
        (
            "eq deep value",
            doc! {"a": nest(MAX - 1, bson!(1), |v| bson!({"a": v}))},
        ),
        (
            "$in deep value",
            doc! {"a": {"$in": [nest(MAX - 3, bson!(1), |v| bson!([v]))]}},
        ),
        (
            "$jsonSchema",
            doc! {"$jsonSchema": nest(MAX - 1, bson!({}), |v| {
                bson!({"properties": {"a": v}})
            })},
        ),
        (
            "$jsonSchema items",
            doc! {"$jsonSchema": nest(MAX - 1, bson!({}), |v| {
                bson!({"items": v, "anyOf": [{}], "not": {"type": "string"}})
            })},
        ),
        ("dotted deep", doc! {vec!["a"; MAX].join("."): 1}),
        ("dotted numeric", doc! {vec!["0"; 200].join("."): 1}),
    ]
}

#[test]
fn deepest_filters_match_on_a_small_stack() {
    on_small_stack(|| {
        for (name, f) in deep_filters() {
            let m = Matcher::new(&f).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for d in deep_docs() {
                let _ = m.matches_checked(&d);
                let _ = m.matches_with_position(&d);
            }
            let p = Pipeline::parse(&[doc! {"$match": f.clone()}]).unwrap();
            let _ = p.run(deep_docs(), &NoCollections);
            // As an update's query: the upsert seed, and $pull conditions.
            let _ = crate::update::upsert_seed(&f);
            let pull = bson!({"$pull": {"a": f.clone()}});
            for d in deep_docs() {
                let _ = apply(pull.clone(), d);
            }
        }
    });
}

#[test]
fn deepest_projections_updates_and_sorts_on_a_small_stack() {
    on_small_stack(|| {
        let nested = as_doc(nest(MAX, bson!(1), |v| bson!({"a": v})));
        let computed = as_doc(nest(MAX, bson!({"$add": [1, 1]}), |v| bson!({"a": v})));
        let excl = as_doc(nest(MAX, bson!(0), |v| bson!({"a": v})));
        let long_path = doc! {vec!["a"; 2 * MAX].join("."): 1};
        let slice = doc! {vec!["a"; MAX].join("."): {"$slice": -1}};
        for spec in [
            nested.clone(),
            computed.clone(),
            excl.clone(),
            long_path,
            slice,
        ] {
            let p = Projection::new(&spec).unwrap();
            for d in deep_docs() {
                let _ = p.apply_with_position(&d, Some(0));
            }
            let stage = Pipeline::parse(&[doc! {"$project": spec.clone()}]);
            if let Ok(stage) = stage {
                let _ = stage.run(deep_docs(), &NoCollections);
            }
        }
        let path = vec!["a"; MAX].join(".");
        let deep_value = nest(MAX - 2, bson!(1), |v| bson!({"v": [v]}));
        let updates = vec![
            bson!({"$set": {&path: 1}}),
            bson!({"$set": {"a": deep_value.clone()}}),
            bson!({"$set": {"b": deep_value.clone()}}),
            bson!({"$inc": {&path: 1}}),
            bson!({"$unset": {&path: 1}}),
            bson!({"$push": {"a": {"$each": [deep_value.clone()], "$sort": {&path: 1}}}}),
            bson!({"$addToSet": {"a": deep_value.clone()}}),
            bson!({"$pull": {"a": deep_value.clone()}}),
            bson!({"$rename": {&path: "z"}}),
            bson!({"$set": {vec!["$[]"; MAX].join(".").replacen("$[]", "a", 1): 1}}),
            bson!({"$set": {"a.$[x]": 1}}),
            bson!({"$min": {"a": deep_value.clone()}}),
        ];
        for u in updates {
            for d in deep_docs() {
                let _ = apply(u.clone(), d);
            }
            if let Ok(spec) = UpdateSpec::parse(&u, Some(&[doc! {"x": {"$gt": 0}}])) {
                let _ = spec.upsert_document(&doc! {}, DateTime::from_millis(0));
            }
        }
        // A replacement and a pipeline at the limit.
        for d in deep_docs() {
            let _ = apply(
                Bson::Document(d.clone()),
                doc! {"_id": d.get("_id").cloned()},
            );
        }
        // Sort keys, comparisons, hashing and key strings of the deepest documents.
        let sort = SortSpec::new(&doc! {"a": 1, &path: -1}).unwrap();
        let docs = deep_docs();
        for x in &docs {
            for y in &docs {
                let _ = sort.compare(x, y);
                let _ = crate::order::compare_documents(x, y);
                let _ = crate::expr::compare_values(
                    &Bson::Document(x.clone()),
                    &Bson::Document(y.clone()),
                );
            }
            let v = Bson::Document(x.clone());
            let enc = crate::keystring::encode(&v);
            let _ = crate::keystring::decode_value(&enc).unwrap();
            let _ = crate::keystring::hashed_value(&v);
            let _ = crate::path::path_values(x, &path);
            let _ = format!("{v} {v:?}");
            let mut key = Vec::new();
            crate::expr::canonical_key(&v, &mut key);
            let _ = crate::depth::check_document_depth(x);
        }
        let stages = vec![
            doc! {"$sort": {"a": 1}},
            doc! {"$group": {"_id": "$a", "n": {"$push": "$$ROOT"}, "s": {"$addToSet": "$a"}}},
            doc! {"$unwind": "$n"},
            doc! {"$replaceRoot": {"newRoot": "$n"}},
            doc! {"$redact": {"$cond": [true, "$$DESCEND", "$$PRUNE"]}},
            doc! {"$facet": {"f": [{"$match": {"a": {"$exists": true}}}]}},
            doc! {"$bucketAuto": {"groupBy": "$f", "buckets": 2}},
        ];
        let p = Pipeline::parse(&stages).unwrap();
        let _ = p.run(deep_docs(), &NoCollections);
        let mut sorted = deep_docs();
        sorted.sort_by(|x, y| sort.compare(x, y));
    });
}

/// A pipeline that nests a little more at every stage must stop at the value-depth
/// limit instead of building a document too deep to drop.
#[test]
fn growing_pipelines_stop_at_the_depth_limit() {
    on_small_stack(|| {
        let wrap = nest(MAX - 3, bson!("$a"), |v| bson!({"w": v}));
        let stages: Vec<Document> = (0..50)
            .map(|_| doc! {"$set": {"a": wrap.clone()}})
            .collect();
        let e = Pipeline::parse(&stages)
            .unwrap()
            .run(vec![doc! {"a": 1}], &NoCollections)
            .unwrap_err();
        assert_eq!(e.code, 15);
        let facets: Vec<Document> = (0..2000).map(|_| doc! {"$facet": {"f": []}}).collect();
        let e = Pipeline::parse(&facets)
            .unwrap()
            .run(vec![doc! {"a": 1}], &NoCollections)
            .unwrap_err();
        assert_eq!(e.code, 15);
        let roots: Vec<Document> = (0..1000)
            .map(|_| doc! {"$replaceRoot": {"newRoot": {"r": "$$ROOT"}}})
            .collect();
        let e = Pipeline::parse(&roots)
            .unwrap()
            .run(vec![doc! {"a": 1}], &NoCollections)
            .unwrap_err();
        assert_eq!(e.code, 15);
        // $reduce feeding its accumulator back into an array, 100000 times.
        let e = Expr::parse(&bson!({"$reduce": {
            "input": {"$range": [0, 100_000]}, "initialValue": [], "in": ["$$value"]
        }}))
        .unwrap()
        .eval(&doc! {}, &Variables::new())
        .unwrap_err();
        assert_eq!(e.code, 15);
        // A pipeline update deeper than the storage limit is refused.
        let wrap = nest(MAX - 3, bson!("$a"), |v| bson!({"w": v}));
        let a = bson!({"b": {"c": {"d": {"e": 1}}}});
        let e = apply(bson!([{"$set": {"a": wrap}}]), doc! {"_id": 1, "a": a}).unwrap_err();
        assert_eq!(e.code, 15);
    });
}

// ---------------------------------------------------------------------------------------
// Arithmetic and counts taken from client values

fn eval_err(spec: Bson) -> i32 {
    Expr::parse(&spec)
        .and_then(|e| e.eval(&doc! {}, &Variables::new()))
        .map(|v| panic!("evaluated to a {}", crate::expr::type_name(&v)))
        .unwrap_or_else(|e| e.code)
}

#[test]
fn extreme_operator_arguments_are_errors() {
    let min = DateTime::from_millis(i64::MIN);
    let max = DateTime::from_millis(i64::MAX);
    // i64::MIN cannot be negated: mongod's 6045000.
    assert_eq!(
        eval_err(bson!({"$dateSubtract": {"startDate": max, "unit": "day", "amount": i64::MIN}})),
        6045000
    );
    assert_eq!(
        eval_err(bson!({"$dateDiff": {"startDate": min, "endDate": max, "unit": "millisecond"}})),
        5166308
    );
    assert_eq!(
        eval_err(bson!({"$dateTrunc": {"date": min, "unit": "year", "binSize": i64::MAX}})),
        15
    );
    assert_eq!(
        eval_err(
            bson!({"$dateTrunc": {"date": min, "unit": "week", "binSize": i64::MAX, "timezone": "+14:00"}})
        ),
        15
    );
    // Billions of elements: ExceededMemoryLimit, not an allocation.
    assert_eq!(eval_err(bson!({"$range": [i32::MIN, i32::MAX]})), 146);
    assert_eq!(eval_err(bson!({"$range": [i32::MAX, i32::MIN, -1]})), 146);
    // Strings past mongod's 64 MB builder limit: 13548.
    let big = "x".repeat(1 << 20);
    assert_eq!(
        eval_err(
            bson!({"$replaceAll": {"input": "x".repeat(4 << 20), "find": "", "replacement": "yyyyyyyyyyyyyyyy"}})
        ),
        13548
    );
    assert_eq!(
        eval_err(
            bson!({"$replaceAll": {"input": &big, "find": "x", "replacement": {"$concat": [&big]}}})
        ),
        13548
    );
    let strs: Vec<Bson> = (0..70).map(|_| Bson::String(big.clone())).collect();
    assert_eq!(eval_err(bson!({"$concat": strs})), 13548);
    // Extreme dates in every date operator: values or errors, never a panic.
    for d in [min, max] {
        for tz in ["+14:00", "-14:00", "UTC"] {
            for op in ["$year", "$isoWeek", "$dayOfYear", "$week"] {
                let _ = Expr::parse(&bson!({op: {"date": d, "timezone": tz}}))
                    .unwrap()
                    .eval(&doc! {}, &Variables::new());
            }
            for spec in [
                bson!({"$dateToString": {"date": d, "timezone": tz}}),
                bson!({"$dateToParts": {"date": d, "timezone": tz, "iso8601": true}}),
                bson!({"$dateAdd": {"startDate": d, "unit": "month", "amount": -1, "timezone": tz}}),
                bson!({"$dateDiff": {"startDate": d, "endDate": min, "unit": "week", "timezone": tz}}),
                bson!({"$dateTrunc": {"date": d, "unit": "quarter", "timezone": tz}}),
            ] {
                let _ = Expr::parse(&spec)
                    .unwrap()
                    .eval(&doc! {}, &Variables::new());
            }
        }
    }
}

#[test]
fn update_counts_are_bounded() {
    // Padding an array past mongod's kMaxPaddingAllowed: CannotBackfillArray (34).
    let e = apply(bson!({"$set": {"a.2000000": 1}}), doc! {"_id": 1, "a": []}).unwrap_err();
    assert_eq!((e.code, e.code_name.as_ref()), (34, "CannotBackfillArray"));
    let e = apply(
        bson!({"$set": {"a.99999999999999999": 1}}),
        doc! {"_id": 1, "a": [1]},
    )
    .unwrap_err();
    assert_eq!(e.code, 34);
    let mut d = doc! {"a": [1]};
    assert_eq!(
        crate::path::set_path(&mut d, "a.1600000", bson!(1))
            .unwrap_err()
            .code,
        34
    );
    // $position of i64::MIN is "from the front".
    let d = apply(
        bson!({"$push": {"a": {"$each": [0], "$position": i64::MIN, "$slice": i64::MIN}}}),
        doc! {"_id": 1, "a": [1, 2]},
    )
    .unwrap();
    assert_eq!(
        d.get_array("a").unwrap(),
        &vec![bson!(0), bson!(1), bson!(2)]
    );
    // A path that would nest past the storage limit, created by any operator.
    let path = vec!["a"; 102].join(".");
    for u in [
        bson!({"$set": {&path: 1}}),
        bson!({"$inc": {&path: 1}}),
        bson!({"$push": {&path: 1}}),
        bson!({"$rename": {"x": &path}}),
    ] {
        assert_eq!(apply(u, doc! {"_id": 1, "x": 1}).unwrap_err().code, 15);
    }
    // At the limit it is accepted; a value making the result too deep is not.
    let path = vec!["a"; 101].join(".");
    assert!(apply(bson!({"$set": {&path: 1}}), doc! {"_id": 1}).is_ok());
    assert_eq!(
        apply(bson!({"$set": {&path: {}}}), doc! {"_id": 1})
            .unwrap_err()
            .code,
        15
    );
    // $sort + $limit with a limit near i64::MAX.
    let p = Pipeline::parse(&[doc! {"$sort": {"a": 1}}, doc! {"$limit": i64::MAX}]).unwrap();
    assert_eq!(
        p.run(vec![doc! {"a": 2}, doc! {"a": 1}], &NoCollections)
            .unwrap()
            .len(),
        2
    );
    // A corrupt key string claiming a 4 GB binary, or nesting without end.
    let mut key = vec![70u8, 0xff, 0xff, 0xff, 0xff, 0];
    assert!(crate::keystring::decode_value(&key).is_err());
    key = vec![60u8; 100_000];
    assert!(on_small_stack(
        move || crate::keystring::decode_value(&key).is_err()
    ));
}

#[test]
fn array_paths_do_not_explode() {
    // {a: [{"0": [{"0": ...}]}]}: a numeric component both indexes the array and is
    // looked up in its documents; without memoizing, the walk doubles at every level.
    let d = doc! {"a": nest(MAX, bson!(1), |v| bson!([{"0": v}]))};
    let path = format!("a.{}", vec!["0"; 150].join("."));
    let f = doc! {&path: 1};
    let m = Matcher::new(&f).unwrap();
    let start = std::time::Instant::now();
    let _ = m.matches(&d);
    let _ = crate::path::path_values(&d, &path);
    let _ = SortSpec::new(&f).unwrap().sort_key(&d);
    let lookup = Pipeline::parse(&[doc! {"$lookup": {
        "from": "c", "localField": &path, "foreignField": &path, "as": "j"
    }}])
    .unwrap();
    struct Same(Document);
    impl crate::agg::AggContext for Same {
        fn collection_docs(&self, _coll: &str) -> crate::MongoResult<Vec<Document>> {
            Ok(vec![self.0.clone()])
        }
        fn variables(&self) -> Variables {
            Variables::new()
        }
    }
    let _ = lookup.run(vec![d.clone()], &Same(d.clone()));
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
}
