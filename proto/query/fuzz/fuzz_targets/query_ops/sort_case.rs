//! The sort case, with the target's only oracle beyond "no panic": a document's key string
//! must decode back to as many values as made it, and key strings must sort like the
//! documents.

use std::cmp::Ordering;

use bson::{Bson, Document};
use query::sort::SortSpec;

use crate::limits::{cmd_ok, MAX_DEPTH};
use crate::print::show;
use crate::sorts::Sort;
use crate::values::{single, Cx};

/// `{find: "c", sort: {...}}`
pub fn sort(cx: &mut Cx, s: &Sort, docs: &[Document]) {
    let s = cx.sort(s, MAX_DEPTH - 1);
    show("sort", &Bson::Document(s.clone()));
    if !cmd_ok(single("sort", Bson::Document(s.clone()))) {
        return;
    }
    if let Ok(spec) = SortSpec::new(&s) {
        let mut sorted = docs.to_vec();
        sorted.sort_by(|a, b| spec.compare(a, b));
        check_round_trip(&spec, &sorted);
        check_order(&spec, &sorted);
    }
}

/// The key string must decode back to the values that made it.
fn check_round_trip(spec: &SortSpec, sorted: &[Document]) {
    let desc = spec.descending_flags();
    for d in sorted {
        let k = spec.sort_key(d);
        let enc = query::keystring::encode_key(&k, &desc);
        if let Ok(back) = query::keystring::decode_key(&enc, &desc, k.len()) {
            assert_eq!(back.len(), k.len(), "decode_key returned another count");
        }
    }
}

/// Key strings sort like the documents (ties are fine either way).
fn check_order(spec: &SortSpec, sorted: &[Document]) {
    let desc = spec.descending_flags();
    for w in sorted.windows(2) {
        let (a, b) = (spec.sort_key(&w[0]), spec.sort_key(&w[1]));
        if spec.compare_keys(&a, &b) == Ordering::Less {
            let (ea, eb) = (
                query::keystring::encode_key(&a, &desc),
                query::keystring::encode_key(&b, &desc),
            );
            assert!(ea <= eb, "key strings out of order: {a:?} {b:?}");
        }
    }
}
