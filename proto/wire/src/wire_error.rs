//! The crate's error type: what went wrong while reading or decoding a frame, whether the
//! connection survives it, and how it is reported to the client.

use crate::error::{ErrorCode, MongoError};
use crate::{BSON_SIZE_SLACK, MAX_BSON_SIZE, MAX_MESSAGE_SIZE, MAX_NESTING_DEPTH};

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed, or closed in the middle of a frame.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A frame (or its decompressed form) larger than [`MAX_MESSAGE_SIZE`] — fatal — or a
    /// single document larger than [`MAX_BSON_SIZE`] + slack inside a well-formed frame —
    /// not fatal. The value is the offending size.
    #[error("size {0} exceeds the limit")]
    MessageTooLarge(usize),
    /// The frame itself is inconsistent (lengths, sections, flags, compression).
    #[error("malformed message: {0}")]
    Malformed(String),
    /// An OP_MSG whose CRC-32C does not match its contents.
    #[error("OP_MSG checksum does not match contents")]
    Checksum,
    /// An opcode Bulwark does not accept (legacy OP_INSERT, OP_GET_MORE, ..., or garbage).
    #[error("unsupported opcode {0}")]
    UnsupportedOpCode(i32),
    /// A document nested deeper than [`MAX_NESTING_DEPTH`].
    #[error("document exceeds maximum nesting depth of {}", MAX_NESTING_DEPTH)]
    NestingTooDeep,
    /// A document that is not valid BSON, inside an otherwise well-formed frame.
    #[error("invalid BSON: {0}")]
    Bson(String),
}

impl WireError {
    /// Whether the connection must be closed. Framing errors leave the stream in a state
    /// that cannot be trusted; a bad document inside a well-framed message is answered with
    /// [`Self::to_mongo_error`] (its frame is still in the read buffer, see
    /// [`crate::read_message`]) and the connection carries on.
    pub fn is_fatal(&self) -> bool {
        match self {
            WireError::Io(_)
            | WireError::Malformed(_)
            | WireError::Checksum
            | WireError::UnsupportedOpCode(_) => true,
            WireError::MessageTooLarge(n) => *n > MAX_MESSAGE_SIZE,
            WireError::NestingTooDeep | WireError::Bson(_) => false,
        }
    }

    /// The error as MongoDB reports it (codes as mongod uses them for the same faults).
    pub fn to_mongo_error(&self) -> MongoError {
        match self {
            WireError::Io(e) => {
                MongoError::new(ErrorCode::ProtocolError, format!("connection error: {e}"))
            }
            WireError::MessageTooLarge(n) if *n > MAX_MESSAGE_SIZE => MongoError::new(
                ErrorCode::ProtocolError,
                format!("message size {n} is invalid. Min 16 Max: {MAX_MESSAGE_SIZE}"),
            ),
            WireError::MessageTooLarge(n) => {
                let max = MAX_BSON_SIZE + BSON_SIZE_SLACK;
                MongoError::new(
                    ErrorCode::BSONObjectTooLarge,
                    format!("BSONObj size: {n} (0x{n:X}) is invalid. Size must be between 0 and {max}(16MB)"),
                )
            }
            WireError::Malformed(m) => MongoError::new(ErrorCode::ProtocolError, m.clone()),
            WireError::Checksum => MongoError::new(
                ErrorCode::ProtocolError,
                "OP_MSG checksum does not match contents",
            ),
            WireError::UnsupportedOpCode(op) => MongoError::new(
                ErrorCode::ProtocolError,
                format!("Unsupported message opcode: {op}"),
            ),
            WireError::NestingTooDeep => MongoError::new(
                ErrorCode::Overflow,
                format!("BSONObj exceeded maximum nested object depth: {MAX_NESTING_DEPTH}"),
            ),
            WireError::Bson(m) => MongoError::new(ErrorCode::InvalidBSON, m.clone()),
        }
    }
}

pub(crate) fn malformed(msg: impl Into<String>) -> WireError {
    WireError::Malformed(msg.into())
}
