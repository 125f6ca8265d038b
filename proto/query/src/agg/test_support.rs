//! What the stage tests share: a context with two collections, a few orders, and helpers
//! that run a pipeline and compare its output or its error code.

use std::collections::HashMap;

use bson::{doc, Bson, Document};

use super::{AggContext, Pipeline};
use crate::expr::Variables;
use crate::MongoResult;

pub(super) struct Ctx {
    pub(super) colls: HashMap<String, Vec<Document>>,
    pub(super) vars: Variables,
}

impl AggContext for Ctx {
    fn collection_docs(&self, coll: &str) -> MongoResult<Vec<Document>> {
        Ok(self.colls.get(coll).cloned().unwrap_or_default())
    }
    fn variables(&self) -> Variables {
        self.vars.clone()
    }
}

pub(super) fn ctx() -> Ctx {
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

pub(super) fn orders() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "quantity": 2, "tags": ["a", "b"], "cust": "x"},
        doc! {"_id": 2, "item": "pecans", "price": 20, "quantity": 1, "tags": [], "cust": "y"},
        doc! {"_id": 3, "item": "bread", "price": 10, "quantity": 5, "cust": "x"},
        doc! {"_id": 4, "item": null, "price": 5.5, "quantity": 10, "tags": "solo", "cust": "z"},
        doc! {"_id": 5, "price": 1, "quantity": 3, "tags": null, "cust": "y"},
    ]
}

pub(super) fn stages(v: Bson) -> Vec<Document> {
    match v {
        Bson::Array(a) => a
            .into_iter()
            .map(|s| s.as_document().unwrap().clone())
            .collect(),
        _ => panic!("pipeline must be an array"),
    }
}

pub(super) fn run(p: Bson, input: Vec<Document>) -> MongoResult<Vec<Document>> {
    Pipeline::parse(&stages(p))?.run(input, &ctx())
}

#[track_caller]
pub(super) fn check(p: Bson, input: Vec<Document>, want: Vec<Document>) {
    let got = run(p.clone(), input).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert_eq!(got, want, "pipeline {p}");
}

#[track_caller]
pub(super) fn check_err(p: Bson, code: i32) {
    match run(p.clone(), orders()) {
        Ok(v) => panic!("{p}: expected error {code}, got {v:?}"),
        Err(e) => assert_eq!(e.code, code, "pipeline {p}: {e}"),
    }
}

/// Checks that each pipeline fails with its error code.
#[track_caller]
pub(super) fn check_errs(cases: Vec<(Bson, i32)>) {
    for (p, code) in cases {
        check_err(p, code);
    }
}
