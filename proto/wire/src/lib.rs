//! MongoDB wire protocol framing (OP_MSG, OP_QUERY/OP_REPLY, OP_COMPRESSED) and the
//! shared `MongoError`. No tonic and no WiredTiger here: router and shard both link it.

pub mod error;

pub use error::{ErrorCode, MongoError, MongoResult};
