//! MongoDB's total order over BSON values (owner: query-core helper).
use std::cmp::Ordering;
use bson::Bson;

/// Compares two values in MongoDB's cross-type order: MinKey < null/undefined < numbers
/// (int, long, double, decimal compared numerically) < string/symbol < object < array <
/// binData < ObjectId < bool < date < timestamp < regex < MaxKey.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let _ = (a, b);
    unimplemented!("query-core helper")
}

/// Equality as `$eq` sees it (1 == 1.0, field order matters inside documents).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare(a, b) == Ordering::Equal
}
