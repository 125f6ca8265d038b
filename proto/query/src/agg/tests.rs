//! Tests of the pipeline as a whole: stage documents, output stages, variables and what
//! it reports about itself. Each stage's own tests are in its file.

use bson::{bson, doc, Bson};

use super::test_support::*;
use super::*;

#[test]
fn parse_errors() {
    check_errs(vec![
        (bson!([{"$foo": 1}]), 40324),
        (bson!([{"$match": {}, "$limit": 1}]), 40323),
        (bson!([{}]), 40323),
        (bson!([{"$out": "x"}, {"$limit": 1}]), 40601),
        (bson!([{"$merge": "x"}, {"$match": {}}]), 40601),
        (bson!([{"$limit": 1}, {"$documents": []}]), 40602),
    ]);
    let e = Pipeline::parse(&stages(bson!([{"$foo": 1}]))).unwrap_err();
    assert_eq!(e.message, "Unrecognized pipeline stage name: '$foo'");
    let e = Pipeline::parse(&stages(bson!([{"a": 1, "b": 2}]))).unwrap_err();
    assert_eq!(
        e.message,
        "A pipeline stage specification object must contain exactly one field."
    );
}

#[test]
fn variables_from_the_context() {
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
