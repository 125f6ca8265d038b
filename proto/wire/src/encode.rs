//! Encoding replies (server) and requests (tests, chaos and other clients).

use std::io::Write;

use bson::Document;

use crate::compression::Compressor;
use crate::message::{DocSequence, MsgHeader, OpMsg, OpQuery};
use crate::wire_error::WireError;
use crate::{MAX_MESSAGE_SIZE, OP_COMPRESSED, OP_MSG, OP_QUERY, OP_REPLY};

/// An OP_MSG reply holding `body`, compressed when `compressor` is set (pass the
/// request's [`crate::Incoming::compressor`]).
///
/// Infallible: a body that cannot be encoded (a key containing NUL, or a frame over
/// [`MAX_MESSAGE_SIZE`]) is replaced by the matching error reply, so the client always
/// gets an answer to its request.
pub fn encode_op_msg(
    request_id: i32,
    response_to: i32,
    body: &Document,
    compressor: Option<Compressor>,
) -> Vec<u8> {
    let frame = op_msg_frame(request_id, response_to, 0, body, &[]).unwrap_or_else(|e| {
        let reply = e.to_mongo_error().to_document();
        op_msg_frame(request_id, response_to, 0, &reply, &[])
            .expect("an error reply always encodes")
    });
    maybe_compress(frame, compressor)
}

/// An OP_MSG reply whose body is already BSON (`body` must be one well-formed document,
/// as a `RawDocumentBuf` holds): a reply built straight to bytes skips the `Document`
/// and its encoding. Used for the refusals an overloaded router sends by the thousand a
/// second (`router/src/overload/refusal.rs`), where building the reply was most of a refusal's own
/// work. Infallible as [`encode_op_msg`] is: a body too large for a frame is replaced by
/// the matching error reply.
pub fn encode_op_msg_raw(
    request_id: i32,
    response_to: i32,
    body: &[u8],
    compressor: Option<Compressor>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(MsgHeader::LEN + 5 + body.len());
    out.resize(MsgHeader::LEN, 0);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(0);
    out.extend_from_slice(body);
    match finish_header(&mut out, request_id, response_to, OP_MSG) {
        Ok(()) => maybe_compress(out, compressor),
        Err(e) => encode_op_msg(
            request_id,
            response_to,
            &e.to_mongo_error().to_document(),
            compressor,
        ),
    }
}

/// An OP_REPLY answering an OP_QUERY (the legacy handshake): one document, cursor id 0.
/// Infallible in the same way as [`encode_op_msg`].
pub fn encode_op_reply(request_id: i32, response_to: i32, doc: &Document) -> Vec<u8> {
    op_reply_frame(request_id, response_to, doc).unwrap_or_else(|e| {
        let reply = e.to_mongo_error().to_document();
        op_reply_frame(request_id, response_to, &reply).expect("an error reply always encodes")
    })
}

/// An OP_MSG request with `msg`'s flags, body and document sequences. When
/// [`OpMsg::CHECKSUM_PRESENT`] is set the CRC-32C is computed over the uncompressed
/// message, as the receiver verifies it after decompressing.
pub fn encode_op_msg_request(
    request_id: i32,
    msg: &OpMsg,
    compressor: Option<Compressor>,
) -> Result<Vec<u8>, WireError> {
    let frame = op_msg_frame(request_id, 0, msg.flags, &msg.body, &msg.sequences)?;
    Ok(maybe_compress(frame, compressor))
}

/// An OP_QUERY request (drivers send the first `hello`/`isMaster` this way).
pub fn encode_op_query(request_id: i32, query: &OpQuery) -> Result<Vec<u8>, WireError> {
    let mut out = vec![0; MsgHeader::LEN];
    out.extend_from_slice(&query.flags.to_le_bytes());
    write_cstring(&mut out, &query.full_collection_name)?;
    out.extend_from_slice(&query.number_to_skip.to_le_bytes());
    out.extend_from_slice(&query.number_to_return.to_le_bytes());
    write_doc(&mut out, &query.query)?;
    if let Some(fields) = &query.return_fields {
        write_doc(&mut out, fields)?;
    }
    finish_header(&mut out, request_id, 0, OP_QUERY)?;
    Ok(out)
}

/// Wraps a complete uncompressed frame in OP_COMPRESSED.
pub fn encode_compressed(frame: &[u8], compressor: Compressor) -> Vec<u8> {
    let header = MsgHeader::parse(frame).expect("a complete frame starts with a header");
    let payload = &frame[MsgHeader::LEN..];
    let compressed = compressor.compress(payload);
    let mut out = Vec::with_capacity(MsgHeader::LEN + 9 + compressed.len());
    MsgHeader {
        message_length: (MsgHeader::LEN + 9 + compressed.len()) as i32,
        request_id: header.request_id,
        response_to: header.response_to,
        op_code: OP_COMPRESSED,
    }
    .write(&mut out);
    out.extend_from_slice(&header.op_code.to_le_bytes());
    out.extend_from_slice(&(payload.len() as i32).to_le_bytes());
    out.push(compressor.id());
    out.extend_from_slice(&compressed);
    out
}

fn maybe_compress(frame: Vec<u8>, compressor: Option<Compressor>) -> Vec<u8> {
    match compressor {
        Some(c) => encode_compressed(&frame, c),
        None => frame,
    }
}

fn op_msg_frame(
    request_id: i32,
    response_to: i32,
    flags: u32,
    body: &Document,
    sequences: &[DocSequence],
) -> Result<Vec<u8>, WireError> {
    let mut out = vec![0; MsgHeader::LEN];
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    write_doc(&mut out, body)?;
    for (id, docs) in sequences {
        out.push(1);
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        write_cstring(&mut out, id)?;
        for d in docs {
            out.extend_from_slice(d.as_bytes());
        }
        let size =
            i32::try_from(out.len() - start).map_err(|_| WireError::MessageTooLarge(out.len()))?;
        out[start..start + 4].copy_from_slice(&size.to_le_bytes());
    }
    let checksum = flags & OpMsg::CHECKSUM_PRESENT != 0;
    if checksum {
        out.extend_from_slice(&[0; 4]);
    }
    finish_header(&mut out, request_id, response_to, OP_MSG)?;
    if checksum {
        let end = out.len() - 4;
        let crc = crc32c::crc32c(&out[..end]);
        out[end..].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

fn op_reply_frame(request_id: i32, response_to: i32, doc: &Document) -> Result<Vec<u8>, WireError> {
    let mut out = vec![0; MsgHeader::LEN];
    out.extend_from_slice(&0i32.to_le_bytes()); // responseFlags
    out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
    out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    write_doc(&mut out, doc)?;
    finish_header(&mut out, request_id, response_to, OP_REPLY)?;
    Ok(out)
}

fn finish_header(
    out: &mut [u8],
    request_id: i32,
    response_to: i32,
    op_code: i32,
) -> Result<(), WireError> {
    if out.len() > MAX_MESSAGE_SIZE {
        return Err(WireError::MessageTooLarge(out.len()));
    }
    let header = MsgHeader {
        message_length: out.len() as i32,
        request_id,
        response_to,
        op_code,
    };
    let mut h = Vec::with_capacity(MsgHeader::LEN);
    header.write(&mut h);
    out[..MsgHeader::LEN].copy_from_slice(&h);
    Ok(())
}

/// `body` as one BSON document with each sequence appended as an array field under its
/// identifier, the documents copied as they are: what [`OpMsg::into_command`] would
/// encode to, without building a `Document` of each sequence document.
pub fn fold_sequences(body: &Document, sequences: &[DocSequence]) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(
        256 + sequences
            .iter()
            .flat_map(|(_, docs)| docs.iter().map(|d| d.as_bytes().len() + 8))
            .sum::<usize>(),
    );
    write_doc(&mut out, body)?;
    out.pop(); // the body's terminating NUL; the arrays go before it
    for (id, docs) in sequences {
        out.push(0x04);
        write_cstring(&mut out, id)?;
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        for (i, d) in docs.iter().enumerate() {
            out.push(0x03);
            // The index key, formatted in place (no allocation per document).
            write!(out, "{i}\0").expect("writing to a Vec cannot fail");
            out.extend_from_slice(d.as_bytes());
        }
        out.push(0);
        patch_len(&mut out, start)?;
    }
    out.push(0);
    patch_len(&mut out, 0)?;
    Ok(out)
}

/// Writes the length of the document that starts at `start` and runs to the end of `out`.
fn patch_len(out: &mut [u8], start: usize) -> Result<(), WireError> {
    let len =
        i32::try_from(out.len() - start).map_err(|_| WireError::MessageTooLarge(out.len()))?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn write_doc(out: &mut Vec<u8>, doc: &Document) -> Result<(), WireError> {
    let start = out.len();
    doc.to_writer(&mut *out).map_err(|e| {
        out.truncate(start);
        WireError::Bson(e.to_string())
    })
}

fn write_cstring(out: &mut Vec<u8>, s: &str) -> Result<(), WireError> {
    if s.as_bytes().contains(&0) {
        return Err(WireError::Bson(format!("{s:?} contains a NUL byte")));
    }
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}
