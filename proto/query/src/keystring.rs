//! Order-preserving byte encoding of BSON values (owner: query-core helper).
//! `encode(a) < encode(b)` (bytewise) exactly when `order::compare(a, b) == Less`.
use bson::Bson;

/// Appends the order-preserving encoding of `v` to `out`.
pub fn encode_value(out: &mut Vec<u8>, v: &Bson) {
    let _ = (out, v);
    unimplemented!("query-core helper")
}
