//! Table tests for pipeline stages.

use std::collections::HashMap;

use bson::{bson, doc, Bson, Document};

use super::*;

struct Ctx {
    colls: HashMap<String, Vec<Document>>,
    vars: Variables,
}

impl AggContext for Ctx {
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>> {
        Ok(self.colls.get(coll).cloned().unwrap_or_default())
    }
    fn variables(&self) -> Variables {
        self.vars.clone()
    }
}

fn ctx() -> Ctx {
    let mut colls = HashMap::new();
    colls.insert(
        "inventory".to_string(),
        vec![
            doc! {"_id": 1, "sku": "almonds", "instock": 120},
            doc! {"_id": 2, "sku": "bread", "instock": 80},
            doc! {"_id": 3, "sku": "cashews", "instock": 60},
            doc! {"_id": 4, "sku": null},
            doc! {"_id": 5},
        ],
    );
    colls.insert(
        "employees".to_string(),
        vec![
            doc! {"_id": 1, "name": "Dev"},
            doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
            doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
            doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
            doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
        ],
    );
    Ctx {
        colls,
        vars: Variables::default(),
    }
}

fn orders() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "quantity": 2, "tags": ["a", "b"], "cust": "x"},
        doc! {"_id": 2, "item": "pecans", "price": 20, "quantity": 1, "tags": [], "cust": "y"},
        doc! {"_id": 3, "item": "bread", "price": 10, "quantity": 5, "cust": "x"},
        doc! {"_id": 4, "item": null, "price": 5.5, "quantity": 10, "tags": "solo", "cust": "z"},
        doc! {"_id": 5, "price": 1, "quantity": 3, "tags": null, "cust": "y"},
    ]
}

fn stages(v: Bson) -> Vec<Document> {
    match v {
        Bson::Array(a) => a
            .into_iter()
            .map(|s| s.as_document().unwrap().clone())
            .collect(),
        _ => panic!("pipeline must be an array"),
    }
}

fn run(p: Bson, input: Vec<Document>) -> MongoResult<Vec<Document>> {
    Pipeline::parse(&stages(p))?.run(input, &ctx())
}

#[track_caller]
fn check(p: Bson, input: Vec<Document>, want: Vec<Document>) {
    let got = run(p.clone(), input).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert_eq!(got, want, "pipeline {p}");
}

#[track_caller]
fn check_err(p: Bson, code: i32) {
    match run(p.clone(), orders()) {
        Ok(v) => panic!("{p}: expected error {code}, got {v:?}"),
        Err(e) => assert_eq!(e.code, code, "pipeline {p}: {e}"),
    }
}

#[test]
fn parse_errors() {
    let cases: Vec<(Bson, i32)> = vec![
        (bson!([{"$foo": 1}]), 40324),
        (bson!([{"$match": {}, "$limit": 1}]), 40323),
        (bson!([{}]), 40323),
        (bson!([{"$out": "x"}, {"$limit": 1}]), 40601),
        (bson!([{"$merge": "x"}, {"$match": {}}]), 40601),
        (bson!([{"$limit": 0}]), 15958),
        (bson!([{"$limit": "x"}]), 15957),
        (bson!([{"$skip": -1}]), 15956),
        (bson!([{"$sort": {}}]), 15976),
        (bson!([{"$sort": {"a": 2}}]), 15975),
        (bson!([{"$group": {"total": {"$sum": 1}}}]), 15955),
        (bson!([{"$group": {"_id": null, "t": {"$foo": 1}}}]), 15952),
        (
            bson!([{"$group": {"_id": null, "t": {"$sum": 1, "$avg": 1}}}]),
            40238,
        ),
        (
            bson!([{"$group": {"_id": null, "a.b": {"$sum": 1}}}]),
            40235,
        ),
        (
            bson!([{"$group": {"_id": null, "t": {"$sum": [1, 2]}}}]),
            40237,
        ),
        (bson!([{"$group": 1}]), 15947),
        (bson!([{"$project": {}}]), 51272),
        (bson!([{"$project": {"a": 1, "b": 0}}]), 31254),
        (bson!([{"$project": {"a": 0, "b": "$x"}}]), 31252),
        (bson!([{"$project": {"a": 0, "b": 1}}]), 31253),
        (bson!([{"$project": {"a": {}}}]), 51270),
        (bson!([{"$project": {"a": 1, "a.b": 1}}]), 31250),
        (bson!([{"$project": 1}]), 15969),
        (bson!([{"$count": ""}]), 40157),
        (bson!([{"$count": "$x"}]), 40158),
        (bson!([{"$count": "a.b"}]), 40160),
        (bson!([{"$count": "_id"}]), 15948),
        (
            bson!([{"$bucket": {"groupBy": "$a", "boundaries": [0, 1], "output": {"_id": {"$sum": 1}}}}]),
            15948,
        ),
        (bson!([{"$count": "a\u{0}b"}]), 40159),
        (bson!([{"$unwind": "tags"}]), 28818),
        (bson!([{"$unwind": {"path": "$tags", "bogus": 1}}]), 28811),
        (bson!([{"$unwind": {"includeArrayIndex": "i"}}]), 28812),
        (bson!([{"$unwind": 5}]), 15981),
        (bson!([{"$unset": []}]), 31119),
        (bson!([{"$unset": 1}]), 31002),
        (bson!([{"$replaceRoot": {}}]), 40414),
        (bson!([{"$replaceRoot": {"newRoot": "$a", "x": 1}}]), 40415),
        (bson!([{"$sample": {"size": -1}}]), 28747),
        (bson!([{"$sample": {}}]), 28749),
        (bson!([{"$sortByCount": "item"}]), 40148),
        (bson!([{"$facet": {"a": [{"$out": "x"}]}}]), 40600),
        (bson!([{"$facet": {"a": 1}}]), 40170),
        (
            bson!([{"$bucket": {"groupBy": "$price", "boundaries": [10, 5]}}]),
            40194,
        ),
        (
            bson!([{"$bucket": {"groupBy": "$price", "boundaries": [1]}}]),
            40192,
        ),
        (
            bson!([{"$bucket": {"groupBy": "$price", "boundaries": [0, 10], "default": 5}}]),
            40199,
        ),
        (
            bson!([{"$lookup": {"from": "x", "localField": "a", "foreignField": "b"}}]),
            9,
        ),
        (bson!([{"$lookup": {"from": "x", "as": "y"}}]), 9),
        (
            bson!([{"$lookup": {"from": "x", "localField": 1, "foreignField": "b", "as": "y"}}]),
            4570,
        ),
        (bson!([{"$graphLookup": {"from": "x"}}]), 40105),
        (bson!([{"$match": 1}]), 15959),
        (bson!([{"$match": {"$foo": 1}}]), 2),
        (bson!([{"$addFields": {"a": {"$foo": 1}}}]), 168),
        (bson!([{"$limit": 1}, {"$documents": []}]), 40602),
        (
            bson!([{"$merge": {"into": "x", "whenMatched": "bogus"}}]),
            2,
        ),
        (bson!([{"$merge": {"into": "x", "bogus": 1}}]), 40415),
        (bson!([{"$merge": {"on": "a"}}]), 40414),
        (
            bson!([{"$merge": {"into": "x", "let": {"a": 1}, "whenMatched": "replace"}}]),
            51199,
        ),
        (bson!([{"$out": 1}]), 16990),
    ];
    for (p, code) in cases {
        check_err(p, code);
    }
    let e = Pipeline::parse(&stages(bson!([{"$foo": 1}]))).unwrap_err();
    assert_eq!(e.message, "Unrecognized pipeline stage name: '$foo'");
    let e = Pipeline::parse(&stages(bson!([{"a": 1, "b": 2}]))).unwrap_err();
    assert_eq!(
        e.message,
        "A pipeline stage specification object must contain exactly one field."
    );
}

#[test]
fn match_project_limit_skip() {
    check(
        bson!([{"$match": {"price": {"$gte": 10}}}, {"$project": {"item": 1, "_id": 0}}]),
        orders(),
        vec![
            doc! {"item": "almonds"},
            doc! {"item": "pecans"},
            doc! {"item": "bread"},
        ],
    );
    check(
        bson!([{"$skip": 3}, {"$limit": 1}, {"$project": {"_id": 1}}]),
        orders(),
        vec![doc! {"_id": 4}],
    );
    check(
        bson!([{"$limit": 2}, {"$project": {"_id": 1}}]),
        orders(),
        vec![doc! {"_id": 1}, doc! {"_id": 2}],
    );
    check(
        bson!([{"$match": {"$expr": {"$gt": [{"$multiply": ["$price", "$quantity"]}, 50]}}}, {"$project": {"_id": 1}}]),
        orders(),
        vec![doc! {"_id": 4}],
    );
    check(
        bson!([{"$match": {"$and": [{"$expr": {"$eq": ["$cust", "y"]}}, {"price": {"$lt": 5}}]}}, {"$project": {"_id": 1}}]),
        orders(),
        vec![doc! {"_id": 5}],
    );
}

#[test]
fn project_shapes() {
    let d = vec![
        doc! {"_id": 1, "a": {"b": 1, "c": 2}, "arr": [{"b": 1, "c": 2}, 5, {"c": 3}], "x": 10},
    ];
    // inclusion keeps input order, computed fields go last
    check(
        bson!([{"$project": {"x": 1, "a.c": 1}}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {"c": 2}, "x": 10}],
    );
    check(
        bson!([{"$project": {"arr.c": 1, "_id": 0}}]),
        d.clone(),
        vec![doc! {"arr": [{"c": 2}, {"c": 3}]}],
    );
    check(
        bson!([{"$project": {"a": {"b": 1}, "_id": 0}}]),
        d.clone(),
        vec![doc! {"a": {"b": 1}}],
    );
    check(
        bson!([{"$project": {"y": {"$add": ["$x", 1]}, "z": "$a.b", "lit": {"$literal": 1}}}]),
        d.clone(),
        vec![doc! {"_id": 1, "y": 11, "z": 1, "lit": 1}],
    );
    check(
        bson!([{"$project": {"gone": "$$REMOVE", "x": 1}}]),
        d.clone(),
        vec![doc! {"_id": 1, "x": 10}],
    );
    check(
        bson!([{"$project": {"a.d": "$x", "_id": 0}}]),
        d.clone(),
        vec![doc! {"a": {"d": 10}}],
    );
    check(
        bson!([{"$project": {"arr.d": "$x", "_id": 0}}]),
        d.clone(),
        vec![doc! {"arr": [{"d": 10}, {"d": 10}, {"d": 10}]}],
    );
    // exclusion
    check(
        bson!([{"$project": {"a.b": 0, "arr": 0, "_id": 0}}]),
        d.clone(),
        vec![doc! {"a": {"c": 2}, "x": 10}],
    );
    check(
        bson!([{"$project": {"arr.c": 0}}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {"b": 1, "c": 2}, "arr": [{"b": 1}, 5, {}], "x": 10}],
    );
    check(
        bson!([{"$project": {"_id": 0}}]),
        vec![doc! {"_id": 1, "q": 2}],
        vec![doc! {"q": 2}],
    );
    check(
        bson!([{"$project": {"_id": 1}}]),
        vec![doc! {"_id": 1, "q": 2}],
        vec![doc! {"_id": 1}],
    );
}

#[test]
fn add_fields_set_unset_replace() {
    let d = vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{"b": 1}, 2], "x": 10}];
    check(
        bson!([{"$addFields": {"y": {"$add": ["$x", 1]}, "x": 0, "a.c": "$x"}}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {"b": 1, "c": 10}, "arr": [{"b": 1}, 2], "x": 0, "y": 11}],
    );
    check(
        bson!([{"$set": {"arr.k": 1, "x": "$$REMOVE"}}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{"b": 1, "k": 1}, {"k": 1}]}],
    );
    check(
        bson!([{"$set": {"a": {"z": 1}}}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {"b": 1, "z": 1}, "arr": [{"b": 1}, 2], "x": 10}],
    );
    check(
        bson!([{"$set": {"e": {}}}]),
        vec![doc! {"_id": 1}],
        vec![doc! {"_id": 1, "e": {}}],
    );
    check(
        bson!([{"$unset": ["a.b", "x"]}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {}, "arr": [{"b": 1}, 2]}],
    );
    check(
        bson!([{"$unset": "arr.b"}]),
        d.clone(),
        vec![doc! {"_id": 1, "a": {"b": 1}, "arr": [{}, 2], "x": 10}],
    );
    check(
        bson!([{"$replaceRoot": {"newRoot": "$a"}}]),
        d.clone(),
        vec![doc! {"b": 1}],
    );
    check(
        bson!([{"$replaceWith": {"$mergeObjects": [{"dflt": 1}, "$a"]}}]),
        d.clone(),
        vec![doc! {"dflt": 1, "b": 1}],
    );
    let e = run(bson!([{"$replaceRoot": {"newRoot": "$missing"}}]), d).unwrap_err();
    assert_eq!(e.code, 40228);
}

#[test]
fn group_accumulators() {
    check(
        bson!([
            {"$group": {
                "_id": "$cust",
                "n": {"$sum": 1},
                "total": {"$sum": "$price"},
                "avg": {"$avg": "$quantity"},
                "min": {"$min": "$item"},
                "max": {"$max": "$price"},
                "first": {"$first": "$item"},
                "last": {"$last": "$item"},
                "items": {"$push": "$item"},
                "set": {"$addToSet": "$quantity"},
                "count": {"$count": {}},
            }},
            {"$sort": {"_id": 1}}
        ]),
        orders(),
        vec![
            doc! {"_id": "x", "n": 2, "total": 22, "avg": 3.5, "min": "almonds", "max": 12, "first": "almonds", "last": "bread",
            "items": ["almonds", "bread"], "set": [2, 5], "count": 2},
            doc! {"_id": "y", "n": 2, "total": 21, "avg": 2.0, "min": "pecans", "max": 20, "first": "pecans", "last": null,
            "items": ["pecans"], "set": [1, 3], "count": 2},
            doc! {"_id": "z", "n": 1, "total": 5.5, "avg": 10.0, "min": null, "max": 5.5, "first": null, "last": null,
            "items": [null], "set": [10], "count": 1},
        ],
    );
    // _id null groups everything; object keys; numeric keys 1 and 1.0 are one group
    check(
        bson!([{"$group": {"_id": null, "s": {"$sum": {"$multiply": ["$price", "$quantity"]}}}}]),
        orders(),
        vec![doc! {"_id": null, "s": 24.0 + 20.0 + 50.0 + 55.0 + 3.0}],
    );
    check(
        bson!([{"$group": {"_id": "$k", "c": {"$sum": 1}}}]),
        vec![
            doc! {"k": 1},
            doc! {"k": 1.0},
            doc! {"k": 1i64},
            doc! {},
            doc! {"k": null},
        ],
        vec![doc! {"_id": 1, "c": 3}, doc! {"_id": null, "c": 2}],
    );
    check(
        bson!([{"$group": {"_id": {"c": "$cust", "big": {"$gt": ["$price", 10]}}, "c": {"$sum": 1}}}, {"$match": {"_id.c": "x"}}]),
        orders(),
        vec![
            doc! {"_id": {"c": "x", "big": true}, "c": 1},
            doc! {"_id": {"c": "x", "big": false}, "c": 1},
        ],
    );
    check(
        bson!([{"$group": {"_id": null, "c": {"$sum": 1}}}]),
        vec![],
        vec![],
    );
    check(
        bson!([{"$group": {"_id": null, "pop": {"$stdDevPop": "$v"}, "samp": {"$stdDevSamp": "$v"}, "m": {"$mergeObjects": "$o"}}}]),
        vec![
            doc! {"v": 1, "o": {"a": 1}},
            doc! {"v": 3, "o": {"b": 2}},
            doc! {"o": null},
        ],
        vec![
            doc! {"_id": null, "pop": 1.0, "samp": std::f64::consts::SQRT_2, "m": {"a": 1, "b": 2}},
        ],
    );
    check(
        bson!([{"$group": {
            "_id": null,
            "top": {"$top": {"sortBy": {"price": -1}, "output": "$item"}},
            "bottom": {"$bottom": {"sortBy": {"price": -1}, "output": ["$item", "$price"]}},
            "top2": {"$topN": {"n": 2, "sortBy": {"price": 1}, "output": "$price"}},
            "bottom2": {"$bottomN": {"n": 2, "sortBy": {"price": 1}, "output": "$price"}},
            "first2": {"$firstN": {"n": 2, "input": "$_id"}},
            "last2": {"$lastN": {"n": 2, "input": "$_id"}},
            "max2": {"$maxN": {"n": 2, "input": "$quantity"}},
            "min2": {"$minN": {"n": 2, "input": "$quantity"}},
        }}]),
        orders(),
        vec![
            doc! {"_id": null, "top": "pecans", "bottom": [null, 1], "top2": [1, 5.5], "bottom2": [12, 20],
            "first2": [1, 2], "last2": [4, 5], "max2": [10, 5], "min2": [1, 2]},
        ],
    );
    // integer overflow widens
    check(
        bson!([{"$group": {"_id": null, "s": {"$sum": "$v"}}}]),
        vec![doc! {"v": i32::MAX}, doc! {"v": 1}],
        vec![doc! {"_id": null, "s": i32::MAX as i64 + 1}],
    );
}

#[test]
fn sort_and_count() {
    check(
        bson!([{"$sort": {"price": -1}}, {"$project": {"_id": 1}}]),
        orders(),
        vec![
            doc! {"_id": 2},
            doc! {"_id": 1},
            doc! {"_id": 3},
            doc! {"_id": 4},
            doc! {"_id": 5},
        ],
    );
    check(
        bson!([{"$sort": {"cust": 1, "price": -1}}, {"$project": {"_id": 1}}]),
        orders(),
        vec![
            doc! {"_id": 1},
            doc! {"_id": 3},
            doc! {"_id": 2},
            doc! {"_id": 5},
            doc! {"_id": 4},
        ],
    );
    // missing sorts with null, before numbers; arrays by min ascending / max descending
    let d = vec![
        doc! {"_id": 1, "v": [5, 1]},
        doc! {"_id": 2, "v": 3},
        doc! {"_id": 3},
        doc! {"_id": 4, "v": null},
    ];
    check(
        bson!([{"$sort": {"v": 1, "_id": 1}}, {"$project": {"_id": 1}}]),
        d.clone(),
        vec![
            doc! {"_id": 3},
            doc! {"_id": 4},
            doc! {"_id": 1},
            doc! {"_id": 2},
        ],
    );
    check(
        bson!([{"$sort": {"v": -1, "_id": 1}}, {"$project": {"_id": 1}}]),
        d.clone(),
        vec![
            doc! {"_id": 1},
            doc! {"_id": 2},
            doc! {"_id": 3},
            doc! {"_id": 4},
        ],
    );
    // sort + limit (top-k path) stays stable
    let many: Vec<Document> = (0..100).map(|i| doc! {"_id": i, "k": i % 3}).collect();
    check(
        bson!([{"$sort": {"k": 1}}, {"$limit": 3}, {"$project": {"_id": 1}}]),
        many,
        vec![doc! {"_id": 0}, doc! {"_id": 3}, doc! {"_id": 6}],
    );
    check(bson!([{"$count": "n"}]), orders(), vec![doc! {"n": 5}]);
    check(
        bson!([{"$match": {"price": 999}}, {"$count": "n"}]),
        orders(),
        vec![],
    );
    check(
        bson!([{"$sortByCount": "$cust"}]),
        vec![doc! {"cust": "a"}, doc! {"cust": "b"}, doc! {"cust": "b"}],
        vec![doc! {"_id": "b", "count": 2}, doc! {"_id": "a", "count": 1}],
    );
}

#[test]
fn unwind() {
    let d = orders();
    check(
        bson!([{"$unwind": "$tags"}, {"$project": {"tags": 1}}]),
        d.clone(),
        vec![
            doc! {"_id": 1, "tags": "a"},
            doc! {"_id": 1, "tags": "b"},
            doc! {"_id": 4, "tags": "solo"},
        ],
    );
    check(
        bson!([{"$unwind": {"path": "$tags", "includeArrayIndex": "idx", "preserveNullAndEmptyArrays": true}}, {"$project": {"tags": 1, "idx": 1}}]),
        d,
        vec![
            doc! {"_id": 1, "tags": "a", "idx": 0i64},
            doc! {"_id": 1, "tags": "b", "idx": 1i64},
            doc! {"_id": 2, "idx": null},
            doc! {"_id": 3, "idx": null},
            doc! {"_id": 4, "tags": "solo", "idx": null},
            doc! {"_id": 5, "tags": null, "idx": null},
        ],
    );
    check(
        bson!([{"$unwind": "$a.b"}]),
        vec![doc! {"_id": 1, "a": {"b": [1, 2], "c": 3}}],
        vec![
            doc! {"_id": 1, "a": {"b": 1, "c": 3}},
            doc! {"_id": 1, "a": {"b": 2, "c": 3}},
        ],
    );
}

#[test]
fn lookup_forms() {
    let input = vec![
        doc! {"_id": 1, "item": "almonds"},
        doc! {"_id": 2, "item": ["bread", "cashews"]},
        doc! {"_id": 3},
    ];
    check(
        bson!([{"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku", "as": "inv"}}, {"$project": {"ids": "$inv._id"}}]),
        input.clone(),
        vec![
            doc! {"_id": 1, "ids": [1]},
            doc! {"_id": 2, "ids": [2, 3]},
            doc! {"_id": 3, "ids": [4, 5]},
        ],
    );
    check(
        bson!([{"$lookup": {
            "from": "inventory",
            "let": {"want": "$item"},
            "pipeline": [
                {"$match": {"$expr": {"$eq": ["$sku", "$$want"]}}},
                {"$project": {"_id": 0, "instock": 1}}
            ],
            "as": "stock"
        }}, {"$limit": 1}]),
        input.clone(),
        vec![doc! {"_id": 1, "item": "almonds", "stock": [{"instock": 120}]}],
    );
    check(
        bson!([{"$lookup": {"from": "nope", "localField": "item", "foreignField": "sku", "as": "x.y"}}, {"$limit": 1}]),
        input.clone(),
        vec![doc! {"_id": 1, "item": "almonds", "x": {"y": []}}],
    );
    check(
        bson!([{"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku",
            "pipeline": [{"$project": {"instock": 1}}], "as": "inv"}}, {"$limit": 1}]),
        input,
        vec![doc! {"_id": 1, "item": "almonds", "inv": [{"_id": 1, "instock": 120}]}],
    );
}

#[test]
fn graph_lookup_union_facet_bucket() {
    check(
        bson!([{"$graphLookup": {
            "from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
            "connectToField": "name", "as": "chain", "depthField": "depth"
        }}, {"$project": {"names": "$chain.name", "depths": "$chain.depth"}}]),
        vec![doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"}],
        vec![doc! {"_id": 5, "names": ["Ron", "Eliot", "Dev"], "depths": [0i64, 1i64, 2i64]}],
    );
    check(
        bson!([{"$graphLookup": {
            "from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
            "connectToField": "name", "as": "chain", "maxDepth": 0
        }}, {"$project": {"names": "$chain.name"}}]),
        vec![doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"}],
        vec![doc! {"_id": 5, "names": ["Ron"]}],
    );
    check(
        bson!([{"$unionWith": {"coll": "inventory", "pipeline": [{"$match": {"instock": {"$gt": 70}}}, {"$project": {"_id": 1}}]}}]),
        vec![doc! {"_id": "own"}],
        vec![doc! {"_id": "own"}, doc! {"_id": 1}, doc! {"_id": 2}],
    );
    check(
        bson!([{"$unionWith": "inventory"}, {"$count": "n"}]),
        vec![doc! {"_id": "own"}],
        vec![doc! {"n": 6}],
    );
    check(
        bson!([{"$facet": {
            "cheap": [{"$match": {"price": {"$lt": 10}}}, {"$project": {"_id": 1}}],
            "n": [{"$count": "n"}],
        }}]),
        orders(),
        vec![doc! {"cheap": [{"_id": 4}, {"_id": 5}], "n": [{"n": 5}]}],
    );
    check(
        bson!([{"$bucket": {"groupBy": "$price", "boundaries": [0, 10, 20], "default": "other",
            "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}]),
        orders(),
        vec![
            doc! {"_id": 0, "n": 2, "ids": [4, 5]},
            doc! {"_id": 10, "n": 2, "ids": [1, 3]},
            doc! {"_id": "other", "n": 1, "ids": [2]},
        ],
    );
    let e = run(
        bson!([{"$bucket": {"groupBy": "$price", "boundaries": [0, 10]}}]),
        orders(),
    )
    .unwrap_err();
    assert_eq!(e.code, 40066);
    // A $group and a $sort on _id, as MongoDB runs it: a default below the boundaries
    // comes first, and boundaries are values, never field paths.
    check(
        bson!([{"$bucket": {"groupBy": "$s", "boundaries": ["$a", "$m"], "default": "$"}}]),
        vec![doc! {"s": "$b"}, doc! {"s": "$x"}, doc! {"s": "$c"}],
        vec![
            doc! {"_id": "$", "count": 1},
            doc! {"_id": "$a", "count": 2},
        ],
    );
    check(
        bson!([{"$bucketAuto": {"groupBy": "$v", "buckets": 2}}]),
        (1..=4).map(|i| doc! {"v": i}).collect(),
        vec![
            doc! {"_id": {"min": 1, "max": 3}, "count": 2},
            doc! {"_id": {"min": 3, "max": 4}, "count": 2},
        ],
    );
}

#[test]
fn sample_redact_documents_variables() {
    let out = run(bson!([{"$sample": {"size": 2}}]), orders()).unwrap();
    assert_eq!(out.len(), 2);
    assert_ne!(out[0].get("_id"), out[1].get("_id"));
    assert_eq!(
        run(bson!([{"$sample": {"size": 10}}]), orders())
            .unwrap()
            .len(),
        5
    );
    check(
        bson!([{"$redact": {"$cond": {"if": {"$eq": ["$level", 5]}, "then": "$$PRUNE", "else": "$$DESCEND"}}}]),
        vec![
            doc! {"_id": 1, "level": 1, "sub": {"level": 5, "x": 1}, "list": [{"level": 5}, {"level": 2}, 3]},
        ],
        vec![doc! {"_id": 1, "level": 1, "list": [{"level": 2}, 3]}],
    );
    check(
        bson!([{"$documents": [{"x": 1}, {"x": 2}]}, {"$match": {"x": 2}}]),
        vec![doc! {"ignored": true}],
        vec![doc! {"x": 2}],
    );
    // variables from the context (command `let`) and $$NOW fixed for the whole run
    let mut c = ctx();
    c.vars = Variables::new().with("limit", bson!(15));
    let p = Pipeline::parse(&stages(bson!([
        {"$match": {"$expr": {"$gt": ["$price", "$$limit"]}}},
        {"$project": {"_id": 1, "now": "$$NOW"}}
    ])))
    .unwrap();
    let out = p.run(orders(), &c).unwrap();
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0].get("now"), Some(Bson::DateTime(_))));
}

#[test]
fn pipeline_metadata() {
    let p = Pipeline::parse(&stages(bson!([{"$match": {"a": 1}}, {"$limit": 1}]))).unwrap();
    assert_eq!(p.leading_match(), Some(&doc! {"a": 1}));
    assert!(!p.is_empty());
    assert!(p.output_stage().is_none());
    let p = Pipeline::parse(&[]).unwrap();
    assert!(p.is_empty());
    assert_eq!(p.run(orders(), &NoCollections).unwrap().len(), 5);
    let p = Pipeline::parse(&stages(bson!([{"$limit": 1}, {"$match": {"a": 1}}]))).unwrap();
    assert_eq!(p.leading_match(), None);
    let p = Pipeline::parse(&stages(bson!([{"$lookup": {"from": "b", "localField": "x", "foreignField": "y", "as": "z"}}, {"$unionWith": "a"}]))).unwrap();
    assert_eq!(
        p.referenced_collections(),
        vec!["a".to_string(), "b".to_string()]
    );

    let p = Pipeline::parse(&stages(bson!([{"$match": {}}, {"$out": "target"}]))).unwrap();
    assert!(
        matches!(p.output_stage(), Some(OutputStage::Out { db: None, coll }) if coll == "target")
    );
    assert_eq!(p.run(orders(), &NoCollections).unwrap().len(), 5);
    let p = Pipeline::parse(&stages(bson!([{"$out": {"db": "other", "coll": "t"}}]))).unwrap();
    assert!(
        matches!(p.output_stage(), Some(OutputStage::Out { db: Some(d), coll }) if d == "other" && coll == "t")
    );
    let p = Pipeline::parse(&stages(bson!([{"$merge": {"into": {"db": "d", "coll": "c"}, "on": ["a", "b"], "whenMatched": "keepExisting", "whenNotMatched": "discard"}}]))).unwrap();
    let Some(OutputStage::Merge(spec)) = p.output_stage() else {
        panic!("merge expected")
    };
    assert_eq!((spec.db.as_deref(), spec.coll.as_str()), (Some("d"), "c"));
    assert_eq!(spec.on, vec!["a", "b"]);
    assert!(matches!(spec.when_matched, WhenMatched::KeepExisting));
    assert_eq!(spec.when_not_matched, WhenNotMatched::Discard);
    assert_eq!(
        spec.match_filter(&doc! {"a": 1, "b": "x", "c": 3}).unwrap(),
        doc! {"a": 1, "b": "x"}
    );
    assert_eq!(spec.match_filter(&doc! {"a": 1}).unwrap_err().code, 51132);
}

fn merge_spec(stage: Bson) -> MergeSpec {
    let p = Pipeline::parse(&[doc! {"$merge": stage}]).unwrap();
    match p.output_stage() {
        Some(OutputStage::Merge(s)) => s.clone(),
        _ => panic!("merge expected"),
    }
}

#[test]
fn merge_semantics() {
    let existing = doc! {"_id": 1, "a": 1, "b": 1};
    let new = doc! {"_id": 1, "b": 2, "c": 3};
    let spec = merge_spec(bson!("target"));
    assert_eq!(
        merge_document(Some(&existing), &new, &spec).unwrap(),
        MergeAction::Update(doc! {"_id": 1, "a": 1, "b": 2, "c": 3})
    );
    assert_eq!(
        merge_document(None, &new, &spec).unwrap(),
        MergeAction::Insert(new.clone())
    );

    let spec =
        merge_spec(bson!({"into": "t", "whenMatched": "replace", "whenNotMatched": "discard"}));
    assert_eq!(
        merge_document(Some(&existing), &new, &spec).unwrap(),
        MergeAction::Update(new.clone())
    );
    assert_eq!(
        merge_document(None, &new, &spec).unwrap(),
        MergeAction::Nothing
    );
    // replace keeps the matched _id when the new document has none (merge on other fields)
    assert_eq!(
        merge_document(Some(&existing), &doc! {"b": 9}, &spec).unwrap(),
        MergeAction::Update(doc! {"_id": 1, "b": 9})
    );
    assert_eq!(
        merge_document(Some(&existing), &doc! {"_id": 2}, &spec)
            .unwrap_err()
            .code,
        66
    );

    let spec = merge_spec(bson!({"into": "t", "whenMatched": "keepExisting"}));
    assert_eq!(
        merge_document(Some(&existing), &new, &spec).unwrap(),
        MergeAction::Nothing
    );

    let spec = merge_spec(bson!({"into": "t", "whenMatched": "fail", "whenNotMatched": "fail"}));
    assert_eq!(
        merge_document(Some(&existing), &new, &spec)
            .unwrap_err()
            .code,
        11000
    );
    assert_eq!(merge_document(None, &new, &spec).unwrap_err().code, 13113);

    let spec = merge_spec(bson!({"into": "t", "let": {"inc": "$c"}, "whenMatched": [
        {"$set": {"b": {"$add": ["$b", "$$new.b", "$$inc"]}}}
    ]}));
    assert_eq!(
        merge_document(Some(&existing), &new, &spec).unwrap(),
        MergeAction::Update(doc! {"_id": 1, "a": 1, "b": 6})
    );

    let spec = merge_spec(bson!({"into": "t", "whenMatched": [{"$replaceWith": "$$new"}]}));
    assert_eq!(
        merge_document(Some(&existing), &new, &spec).unwrap(),
        MergeAction::Update(new.clone())
    );
    let e = Pipeline::parse(&[
        doc! {"$merge": {"into": "t", "whenMatched": [{"$group": {"_id": null}}]}},
    ])
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidOptions as i32);
}
