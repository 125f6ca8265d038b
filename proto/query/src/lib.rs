//! Pure, synchronous query machinery shared by router and shard: BSON total order,
//! order-preserving key encoding, filter matching, projection, sort, update operators
//! and aggregation. No I/O here; every function is table-testable.

pub mod agg;
pub mod expr;
pub mod keystring;
pub mod matcher;
pub mod order;
pub mod ownership;
pub mod path;
pub mod projection;
pub mod shard_key;
pub mod sort;
pub mod update;

pub use wire::{ErrorCode, MongoError, MongoResult};
