//! Reading and decoding frames.
//!
//! Decoding runs in two passes. The structural pass checks everything that frames the
//! message (header, flags, checksum, section boundaries, document length prefixes) without
//! allocating per document; its failures are fatal. The content pass then validates and
//! deserialises each document; its failures (bad BSON, too deep, too large) leave the
//! connection usable, because the frame boundaries were sound.

use bson::{Document, RawDocumentBuf};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::bson_check::validate_document;
use crate::compression::{decompress_into, Compressor, NOOP_ID};
use crate::message::{DocSequence, Incoming, MsgHeader, OpMsg, OpQuery, Request};
use crate::wire_error::{malformed, WireError};
use crate::{BSON_SIZE_SLACK, MAX_BSON_SIZE, MAX_MESSAGE_SIZE, MAX_NESTING_DEPTH, MAX_WRITE_BATCH};
use crate::{OP_COMPRESSED, OP_MSG, OP_QUERY, OP_REPLY};

/// Documents allowed across all sequences of one OP_MSG: drivers split writes at
/// `maxWriteBatchSize`, and `bulkWrite` sends two sequences (`ops`, `nsInfo`). The cap
/// bounds the per-document memory a single 48 MB frame of empty documents could cost.
const MAX_SEQUENCE_DOCUMENTS: usize = 2 * MAX_WRITE_BATCH;

/// Read buffers that grew past this are shrunk back before the next read, so an idle
/// connection does not keep a 48 MB buffer after one large insert.
const KEEP_BUFFER_CAPACITY: usize = 1 << 20;

/// Reads and decodes one request. `Ok(None)` on a clean EOF between messages.
///
/// `buf` is reused across calls. After an error that is not [`WireError::is_fatal`], it
/// holds the complete frame, so the caller can answer it (`MsgHeader::parse(buf)`).
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Incoming>, WireError> {
    match read_frame(r, buf).await? {
        None => Ok(None),
        Some(_) => decode_message(buf).map(Some),
    }
}

/// Reads one raw frame (header included) into `buf` without decoding it; the length is
/// validated before anything is allocated. `Ok(None)` on a clean EOF before a header.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<MsgHeader>, WireError> {
    buf.clear();
    if buf.capacity() > KEEP_BUFFER_CAPACITY {
        buf.shrink_to(KEEP_BUFFER_CAPACITY);
    }
    let mut head = [0u8; MsgHeader::LEN];
    let mut got = 0;
    while got < head.len() {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(eof("connection closed inside a message header"));
        }
        got += n;
    }
    let header = MsgHeader::parse(&head).expect("16 bytes");
    let len = frame_length(&header)?;
    buf.reserve(len.min(KEEP_BUFFER_CAPACITY));
    buf.extend_from_slice(&head);
    // `take` + `read_to_end` grows the buffer with the bytes that really arrive, so a peer
    // announcing 48 MB and sending nothing costs nothing.
    (&mut *r)
        .take((len - MsgHeader::LEN) as u64)
        .read_to_end(buf)
        .await?;
    if buf.len() != len {
        return Err(eof("connection closed inside a message"));
    }
    Ok(Some(header))
}

/// Decodes one complete frame (header included, exactly `messageLength` bytes) holding
/// OP_MSG, OP_QUERY, or either inside OP_COMPRESSED.
pub fn decode_message(frame: &[u8]) -> Result<Incoming, WireError> {
    let header = frame_header(frame)?;
    if header.op_code != OP_COMPRESSED {
        return decode_plain(header, frame, None);
    }
    let (inner, compressor) = decompress(&header, frame, &[OP_MSG, OP_QUERY])?;
    let inner_header = MsgHeader::parse(&inner).expect("decompress writes a header");
    decode_plain(inner_header, &inner, compressor)
}

/// Decodes a server reply (OP_MSG or OP_REPLY, possibly compressed) into its header and
/// reply document: for OP_MSG the body with any sequences folded in, for OP_REPLY the
/// first document. For clients (tests, chaos).
pub fn decode_reply(frame: &[u8]) -> Result<(MsgHeader, Document), WireError> {
    let mut header = frame_header(frame)?;
    let decompressed;
    let mut frame = frame;
    if header.op_code == OP_COMPRESSED {
        decompressed = decompress(&header, frame, &[OP_MSG, OP_REPLY])?.0;
        frame = &decompressed;
        header = MsgHeader::parse(frame).expect("decompress writes a header");
    }
    match header.op_code {
        OP_MSG => Ok((header, parse_op_msg(frame)?.into_command()?)),
        OP_REPLY => {
            let mut c = Cursor::new(frame, MsgHeader::LEN, frame.len());
            let _flags = c.i32("responseFlags")?;
            let _cursor_id = c.i64("cursorID")?;
            let _starting_from = c.i32("startingFrom")?;
            let number_returned = c.i32("numberReturned")?;
            if number_returned < 1 {
                return Err(malformed("OP_REPLY without documents"));
            }
            let first = c.document()?;
            Ok((header, parse_document(first)?))
        }
        other => Err(WireError::UnsupportedOpCode(other)),
    }
}

fn decode_plain(
    header: MsgHeader,
    frame: &[u8],
    compressor: Option<Compressor>,
) -> Result<Incoming, WireError> {
    let request = match header.op_code {
        OP_MSG => Request::Msg(parse_op_msg(frame)?),
        OP_QUERY => Request::Query(parse_op_query(frame)?),
        other => return Err(WireError::UnsupportedOpCode(other)),
    };
    Ok(Incoming {
        header,
        request,
        compressor,
    })
}

/// Validates the announced length (before anything is allocated for the body).
fn frame_length(header: &MsgHeader) -> Result<usize, WireError> {
    let len = header.message_length;
    if len < MsgHeader::LEN as i32 {
        return Err(malformed(format!(
            "message length {len} is smaller than a header"
        )));
    }
    let len = len as usize;
    if len > MAX_MESSAGE_SIZE {
        return Err(WireError::MessageTooLarge(len));
    }
    Ok(len)
}

fn frame_header(frame: &[u8]) -> Result<MsgHeader, WireError> {
    let header = MsgHeader::parse(frame).ok_or_else(|| malformed("truncated message header"))?;
    let len = frame_length(&header)?;
    if len != frame.len() {
        return Err(malformed(format!(
            "message length {len} does not match the {} bytes received",
            frame.len()
        )));
    }
    Ok(header)
}

/// Unwraps OP_COMPRESSED into the frame it carries, rebuilt with its own header
/// (original opcode, uncompressed length) so checksums and parsing work on it unchanged.
fn decompress(
    header: &MsgHeader,
    frame: &[u8],
    allowed: &[i32],
) -> Result<(Vec<u8>, Option<Compressor>), WireError> {
    let mut c = Cursor::new(frame, MsgHeader::LEN, frame.len());
    let original = c.i32("originalOpcode")?;
    let size = c.i32("uncompressedSize")?;
    let id = c.u8("compressorId")?;
    if original == OP_COMPRESSED {
        return Err(malformed("OP_COMPRESSED inside OP_COMPRESSED"));
    }
    if !allowed.contains(&original) {
        return Err(WireError::UnsupportedOpCode(original));
    }
    let size = usize::try_from(size)
        .map_err(|_| malformed(format!("negative uncompressedSize {size}")))?;
    if size > MAX_MESSAGE_SIZE - MsgHeader::LEN {
        return Err(WireError::MessageTooLarge(size + MsgHeader::LEN));
    }
    let compressor = match id {
        NOOP_ID => None,
        id => Some(
            Compressor::from_id(id)
                .ok_or_else(|| malformed(format!("unknown compressor id {id}")))?,
        ),
    };
    let inner_header = MsgHeader {
        message_length: (size + MsgHeader::LEN) as i32,
        request_id: header.request_id,
        response_to: header.response_to,
        op_code: original,
    };
    let mut out = Vec::with_capacity(MsgHeader::LEN + size.min(KEEP_BUFFER_CAPACITY));
    inner_header.write(&mut out);
    decompress_into(id, c.rest(), size, &mut out)?;
    Ok((out, compressor))
}

fn parse_op_msg(frame: &[u8]) -> Result<OpMsg, WireError> {
    let mut end = frame.len();
    let mut c = Cursor::new(frame, MsgHeader::LEN, end);
    let flags = c.u32("flagBits")?;
    let unknown_required = flags & 0xFFFF & !OpMsg::KNOWN_REQUIRED;
    if unknown_required != 0 {
        return Err(malformed(format!(
            "OP_MSG has unknown required flag bits 0x{unknown_required:x}"
        )));
    }
    if flags & OpMsg::CHECKSUM_PRESENT != 0 {
        if end < MsgHeader::LEN + 4 + 4 {
            return Err(malformed("OP_MSG too short for its checksum"));
        }
        end -= 4;
        let stored = u32::from_le_bytes(frame[end..].try_into().expect("4 bytes"));
        if crc32c::crc32c(&frame[..end]) != stored {
            return Err(WireError::Checksum);
        }
    }
    c.end = end;

    // Structural pass.
    let mut body: Option<&[u8]> = None;
    let mut sequences: Vec<(&str, Vec<&[u8]>)> = Vec::new();
    let mut sequence_docs = 0usize;
    while !c.at_end() {
        match c.u8("section kind")? {
            0 => {
                let doc = c.document()?;
                if body.replace(doc).is_some() {
                    return Err(malformed("OP_MSG has more than one body section"));
                }
            }
            1 => {
                let size = c.i32("document sequence size")?;
                let start = c.pos - 4;
                let seq_end = usize::try_from(size)
                    .ok()
                    .filter(|&s| s >= 5 && s <= end - start)
                    .map(|s| start + s)
                    .ok_or_else(|| malformed(format!("invalid document sequence size {size}")))?;
                let mut s = Cursor::new(frame, c.pos, seq_end);
                let id = s.cstring("document sequence identifier")?;
                let mut docs = Vec::new();
                while !s.at_end() {
                    sequence_docs += 1;
                    if sequence_docs > MAX_SEQUENCE_DOCUMENTS {
                        return Err(malformed(format!(
                            "OP_MSG has more than {MAX_SEQUENCE_DOCUMENTS} documents in its sequences"
                        )));
                    }
                    docs.push(s.document()?);
                }
                sequences.push((id, docs));
                c.pos = seq_end;
            }
            kind => return Err(malformed(format!("unknown OP_MSG section kind {kind}"))),
        }
    }
    let body = body.ok_or_else(|| malformed("OP_MSG has no body section"))?;

    // Content pass.
    let body = parse_document(body)?;
    let mut parsed: Vec<DocSequence> = Vec::with_capacity(sequences.len());
    for (id, docs) in sequences {
        if body.contains_key(id) || parsed.iter().any(|(other, _)| other == id) {
            return Err(WireError::Bson(format!("duplicate field {id} in OP_MSG")));
        }
        let docs = docs
            .into_iter()
            .map(check_raw_document)
            .collect::<Result<Vec<_>, _>>()?;
        parsed.push((id.to_owned(), docs));
    }
    Ok(OpMsg {
        flags,
        body,
        sequences: parsed,
    })
}

fn parse_op_query(frame: &[u8]) -> Result<OpQuery, WireError> {
    let mut c = Cursor::new(frame, MsgHeader::LEN, frame.len());
    let flags = c.i32("flags")?;
    let full_collection_name = c.cstring("fullCollectionName")?.to_owned();
    let number_to_skip = c.i32("numberToSkip")?;
    let number_to_return = c.i32("numberToReturn")?;
    let query = c.document()?;
    let return_fields = if c.at_end() {
        None
    } else {
        Some(c.document()?)
    };
    if !c.at_end() {
        return Err(malformed("trailing bytes after OP_QUERY"));
    }
    Ok(OpQuery {
        flags,
        full_collection_name,
        number_to_skip,
        number_to_return,
        query: parse_document(query)?,
        return_fields: return_fields.map(parse_document).transpose()?,
    })
}

/// Content checks for one document whose length prefix already matches `bytes`.
fn parse_document(bytes: &[u8]) -> Result<Document, WireError> {
    check_document(bytes)?;
    Document::from_reader(bytes).map_err(|e| WireError::Bson(e.to_string()))
}

/// The same checks, keeping the document as raw BSON.
fn check_raw_document(bytes: &[u8]) -> Result<RawDocumentBuf, WireError> {
    check_document(bytes)?;
    RawDocumentBuf::from_bytes(bytes.to_vec()).map_err(|e| WireError::Bson(e.to_string()))
}

/// Size, structure, UTF-8 and nesting depth: after this, parsing cannot recurse deeply.
fn check_document(bytes: &[u8]) -> Result<(), WireError> {
    if bytes.len() > MAX_BSON_SIZE + BSON_SIZE_SLACK {
        return Err(WireError::MessageTooLarge(bytes.len()));
    }
    validate_document(bytes, MAX_NESTING_DEPTH)
}

fn eof(msg: &str) -> WireError {
    WireError::Io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, msg))
}

/// Bounds-checked reads over `bytes[pos..end]`; every failure is a framing error.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], pos: usize, end: usize) -> Self {
        Cursor { bytes, pos, end }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.end
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..self.end]
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        if n > self.end - self.pos {
            return Err(malformed(format!("message truncated in {what}")));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn i32(&mut self, what: &str) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn i64(&mut self, what: &str) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    fn cstring(&mut self, what: &str) -> Result<&'a str, WireError> {
        let rest = &self.bytes[self.pos..self.end];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| malformed(format!("unterminated {what}")))?;
        let s = std::str::from_utf8(&rest[..nul])
            .map_err(|_| malformed(format!("{what} is not valid UTF-8")))?;
        self.pos += nul + 1;
        Ok(s)
    }

    /// One BSON document, delimited by its length prefix (contents are checked later).
    fn document(&mut self) -> Result<&'a [u8], WireError> {
        let start = self.pos;
        let len = self.i32("document length")?;
        if len < 5 || len as usize > self.end - start {
            return Err(malformed(format!(
                "document length {len} does not fit its section"
            )));
        }
        self.pos = start;
        self.take(len as usize, "document")
    }
}
