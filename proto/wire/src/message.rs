//! Decoded message types.

use bson::{Bson, Document, RawDocumentBuf};

use crate::compression::Compressor;
use crate::wire_error::WireError;

/// The 16-byte header that starts every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHeader {
    pub message_length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl MsgHeader {
    pub const LEN: usize = 16;

    /// Reads the header at the start of `bytes` (no validation beyond the length).
    /// Useful to answer a request whose decoding failed with a non-fatal error.
    pub fn parse(bytes: &[u8]) -> Option<MsgHeader> {
        let b = bytes.get(..Self::LEN)?;
        let f = |i: usize| i32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(MsgHeader {
            message_length: f(0),
            request_id: f(4),
            response_to: f(8),
            op_code: f(12),
        })
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.message_length.to_le_bytes());
        out.extend_from_slice(&self.request_id.to_le_bytes());
        out.extend_from_slice(&self.response_to.to_le_bytes());
        out.extend_from_slice(&self.op_code.to_le_bytes());
    }
}

/// A decoded client request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Msg(OpMsg),
    /// Legacy OP_QUERY; only the `admin.$cmd` handshake (isMaster/hello) uses it today.
    Query(OpQuery),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// For a message that arrived in OP_COMPRESSED this is the header of the message it
    /// carried: `op_code` is the original opcode and `message_length` the uncompressed
    /// length. `request_id`/`response_to` are the same either way.
    pub header: MsgHeader,
    pub request: Request,
    /// Set when the message arrived in OP_COMPRESSED (not for the noop compressor), so the
    /// reply can use the same one. Handshake and auth commands are never compressed by
    /// drivers, so their replies naturally go out uncompressed.
    pub compressor: Option<Compressor>,
}

/// One OP_MSG document sequence: its identifier and its documents, already validated.
pub type DocSequence = (String, Vec<RawDocumentBuf>);

/// OP_MSG: flags, one body document and any number of document sequences.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpMsg {
    pub flags: u32,
    pub body: Document,
    /// Kind-1 sections: (identifier, documents), in wire order. Kept as validated raw
    /// BSON: a router forwards them without ever building a `Document` of each.
    pub sequences: Vec<DocSequence>,
}

impl OpMsg {
    /// The message ends with a CRC-32C of everything before it.
    pub const CHECKSUM_PRESENT: u32 = 1 << 0;
    /// The sender will not wait for a reply (request) / will send more replies (exhaust).
    pub const MORE_TO_COME: u32 = 1 << 1;
    /// The client accepts an exhaust stream of replies.
    pub const EXHAUST_ALLOWED: u32 = 1 << 16;
    /// Bits 0-15 must be understood by the receiver; these are the ones defined.
    pub(crate) const KNOWN_REQUIRED: u32 = Self::CHECKSUM_PRESENT | Self::MORE_TO_COME;

    pub fn new(body: Document) -> OpMsg {
        OpMsg {
            flags: 0,
            body,
            sequences: Vec::new(),
        }
    }

    pub fn checksum_present(&self) -> bool {
        self.flags & Self::CHECKSUM_PRESENT != 0
    }

    pub fn more_to_come(&self) -> bool {
        self.flags & Self::MORE_TO_COME != 0
    }

    pub fn exhaust_allowed(&self) -> bool {
        self.flags & Self::EXHAUST_ALLOWED != 0
    }

    /// The command as one document: each document sequence becomes an array field of the
    /// body under its identifier (drivers send insert `documents`, update `updates` and
    /// delete `deletes` this way). Decoding already rejected identifiers that collide
    /// with a body field or with each other.
    pub fn into_command(self) -> Result<Document, WireError> {
        let mut body = self.body;
        for (id, docs) in self.sequences {
            let docs = docs
                .iter()
                .map(|d| Document::try_from(d.as_ref()).map(Bson::Document))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| WireError::Bson(e.to_string()))?;
            body.insert(id, Bson::Array(docs));
        }
        Ok(body)
    }
}

/// Legacy OP_QUERY, kept for the handshake of drivers that do not yet know the server
/// speaks OP_MSG.
#[derive(Debug, Clone, PartialEq)]
pub struct OpQuery {
    pub flags: i32,
    pub full_collection_name: String,
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: Document,
    pub return_fields: Option<Document>,
}

impl OpQuery {
    /// The database part of `full_collection_name` (`admin` for `admin.$cmd`).
    pub fn database(&self) -> &str {
        self.full_collection_name
            .split_once('.')
            .map_or(&self.full_collection_name, |(db, _)| db)
    }

    /// The command document when this is a command (`<db>.$cmd`), unwrapping the legacy
    /// `{$query: {...}, $readPreference: ...}` (or `query`) envelope the way mongod does.
    pub fn command(&self) -> Option<Document> {
        let (_, coll) = self.full_collection_name.split_once('.')?;
        if coll != "$cmd" {
            return None;
        }
        match self.query.iter().next() {
            Some((k, Bson::Document(inner))) if k == "$query" || k == "query" => {
                Some(inner.clone())
            }
            _ => Some(self.query.clone()),
        }
    }
}
