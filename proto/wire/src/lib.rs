//! MongoDB wire protocol framing (OP_MSG, OP_QUERY/OP_REPLY, OP_COMPRESSED) and the
//! shared `MongoError`. No tonic and no WiredTiger here: router and shard both link it.
//!
//! Reading a request (server side):
//!
//! ```no_run
//! # async fn conn(mut sock: tokio::net::TcpStream) -> Result<(), wire::WireError> {
//! let mut buf = Vec::new();
//! while let Some(incoming) = wire::read_message(&mut sock, &mut buf).await.transpose() {
//!     let incoming = match incoming {
//!         Ok(m) => m,
//!         // A bad document inside a well-framed message: `buf` still holds the frame,
//!         // so reply with `e.to_mongo_error()` to `MsgHeader::parse(&buf)`'s request id.
//!         Err(e) if !e.is_fatal() => continue,
//!         Err(e) => return Err(e),
//!     };
//!     // ... run the command, then reply with encode_op_msg / encode_op_reply,
//!     // passing `incoming.compressor` so the reply is compressed the same way.
//! }
//! # Ok(()) }
//! ```
//!
//! Every limit is checked on the raw bytes before anything is allocated or deserialised:
//! frame length, decompressed size, document sizes and document nesting depth
//! (see [`bson_check`]).

pub mod command_fields;
pub mod error;

pub mod bson_check;
mod compression;
mod decode;
mod encode;
mod message;
pub mod namespace;
pub mod op_display;
mod wire_error;

pub use compression::Compressor;
pub use decode::{decode_message, decode_reply, read_frame, read_message};
pub use encode::{
    encode_compressed, encode_op_msg, encode_op_msg_raw, encode_op_msg_request, encode_op_query,
    encode_op_reply, fold_sequences,
};
pub use error::{ErrorCode, MongoError, MongoResult, OVERLOADED_LABELS};
pub use message::{DocSequence, Incoming, MsgHeader, OpMsg, OpQuery, Request};
pub use wire_error::WireError;

/// Largest frame accepted or produced (`maxMessageSizeBytes` in `hello`).
pub const MAX_MESSAGE_SIZE: usize = 48_000_000;
/// Largest user document (`maxBsonObjectSize` in `hello`).
pub const MAX_BSON_SIZE: usize = 16 * 1024 * 1024;
/// Command documents may exceed [`MAX_BSON_SIZE`] by this much, so that a maximal user
/// document still fits inside its command envelope (MongoDB's `BSONObjMaxInternalSize`).
pub const BSON_SIZE_SLACK: usize = 16 * 1024;
/// Deepest nesting of embedded documents/arrays below a top-level document.
pub const MAX_NESTING_DEPTH: usize = 100;
/// Most operations in one write command (`maxWriteBatchSize` in `hello`).
pub const MAX_WRITE_BATCH: usize = 100_000;

/// Opcodes. Only the ones Bulwark speaks; the rest were removed from MongoDB in 5.1/6.0.
pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_COMPRESSED: i32 = 2012;
pub const OP_MSG: i32 = 2013;
