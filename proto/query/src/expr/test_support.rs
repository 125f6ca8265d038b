//! Shared fixtures for the expression tests.

use bson::{doc, Bson, DateTime, Document};

use crate::MongoResult;

use super::{Expr, Variables};

pub(super) fn sample() -> Document {
    doc! {
        "_id": 1, "a": 5, "b": 2.5, "l": 10i64, "s": "Hello World", "n": null,
        "arr": [1, 2, 3], "docs": [{"x": 1, "y": "p"}, {"x": 2}, {"y": "q"}, 7],
        "nested": {"k": {"v": 42}}, "d": DateTime::from_millis(1_700_000_000_123),
        "big": i32::MAX, "t": true, "e": [],
    }
}

pub(super) fn ev(spec: Bson) -> MongoResult<Bson> {
    Expr::parse(&spec)?.eval(&sample(), &Variables::default())
}

pub(super) fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse().unwrap())
}

#[track_caller]
pub(super) fn check(cases: Vec<(Bson, Bson)>) {
    for (spec, want) in cases {
        let got = ev(spec.clone()).unwrap_or_else(|e| panic!("{spec}: unexpected error {e}"));
        assert_eq!(got, want, "spec {spec}");
    }
}

#[track_caller]
pub(super) fn check_err(cases: Vec<(Bson, i32)>) {
    for (spec, code) in cases {
        match ev(spec.clone()) {
            Ok(v) => panic!("{spec}: expected error {code}, got {v}"),
            Err(e) => assert_eq!(e.code, code, "spec {spec}: {e}"),
        }
    }
}
