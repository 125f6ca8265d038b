//! The query engine: pure, synchronous query machinery shared by router and shard: BSON total order,
//! order-preserving key encoding, filter matching, projection, sort, update operators
//! and aggregation. No I/O here; every function is table-testable.

pub mod agg;
pub mod bson_types;
pub mod change_stream;
pub mod depth;
pub mod expr;
pub mod keystring;
pub mod matcher;
pub mod memory;
pub mod order;
pub mod ownership;
pub mod path;
pub mod projection;
pub mod shard_key;
pub mod sort;
pub mod update;

pub use depth::check_document_depth;
pub use wire::{ErrorCode, MongoError, MongoResult};

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod robust_tests;
