//! Table tests for the wire codec: round trips of every opcode and each way a frame can be bad.

use bson::{doc, Bson, Document, RawDocumentBuf};
use wire::{
    decode_message, decode_reply, encode_compressed, encode_op_msg, encode_op_msg_request,
    encode_op_query, encode_op_reply, read_message, Compressor, ErrorCode, Incoming, MsgHeader,
    OpMsg, OpQuery, Request, WireError, MAX_MESSAGE_SIZE, MAX_NESTING_DEPTH, OP_COMPRESSED, OP_MSG,
    OP_QUERY,
};

const COMPRESSORS: [Compressor; 3] = [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd];

fn bson_bytes(d: &Document) -> Vec<u8> {
    let mut v = Vec::new();
    d.to_writer(&mut v).unwrap();
    v
}

/// A frame with the given opcode around `payload` (header computed).
fn raw_frame(request_id: i32, op_code: i32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((16 + payload.len()) as i32).to_le_bytes());
    v.extend_from_slice(&request_id.to_le_bytes());
    v.extend_from_slice(&0i32.to_le_bytes());
    v.extend_from_slice(&op_code.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// An OP_MSG payload from raw sections: (kind, bytes).
fn op_msg_payload(flags: u32, sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut p = flags.to_le_bytes().to_vec();
    for (kind, bytes) in sections {
        p.push(*kind);
        p.extend_from_slice(bytes);
    }
    p
}

fn sequence_section(id: &str, docs: &[Document]) -> Vec<u8> {
    let mut body = id.as_bytes().to_vec();
    body.push(0);
    for d in docs {
        body.extend(bson_bytes(d));
    }
    let mut s = ((body.len() + 4) as i32).to_le_bytes().to_vec();
    s.extend(body);
    s
}

fn insert_msg() -> OpMsg {
    OpMsg {
        flags: 0,
        body: doc! { "insert": "c", "$db": "test", "ordered": true },
        sequences: vec![(
            "documents".into(),
            raw(&[doc! { "_id": 1, "x": "a" }, doc! { "_id": 2, "y": [1, 2] }]),
        )],
    }
}

fn raw(docs: &[Document]) -> Vec<RawDocumentBuf> {
    docs.iter()
        .map(|d| RawDocumentBuf::from_document(d).unwrap())
        .collect()
}

fn msg(incoming: Incoming) -> OpMsg {
    match incoming.request {
        Request::Msg(m) => m,
        other => panic!("expected OP_MSG, got {other:?}"),
    }
}

fn nested(depth: usize) -> Document {
    let mut d = doc! { "leaf": 1 };
    for _ in 0..depth {
        d = doc! { "a": d };
    }
    d
}

fn assert_err(frame: &[u8], pred: impl Fn(&WireError) -> bool, what: &str) {
    match decode_message(frame) {
        Ok(m) => panic!("{what}: decoded {m:?}"),
        Err(e) => assert!(pred(&e), "{what}: unexpected error {e:?}"),
    }
}

#[test]
fn op_msg_round_trip_with_sequences() {
    let m = insert_msg();
    let frame = encode_op_msg_request(7, &m, None).unwrap();
    let incoming = decode_message(&frame).unwrap();
    assert_eq!(incoming.header.request_id, 7);
    assert_eq!(incoming.header.op_code, OP_MSG);
    assert_eq!(incoming.header.message_length as usize, frame.len());
    assert_eq!(incoming.compressor, None);
    let got = msg(incoming);
    assert_eq!(got, m);
    assert!(!got.more_to_come() && !got.exhaust_allowed());
    assert_eq!(
        got.into_command().unwrap(),
        doc! { "insert": "c", "$db": "test", "ordered": true,
        "documents": [{ "_id": 1, "x": "a" }, { "_id": 2, "y": [1, 2] }] }
    );
}

#[test]
fn op_msg_several_sequences_and_empty_sequence() {
    let m = OpMsg {
        flags: OpMsg::MORE_TO_COME | OpMsg::EXHAUST_ALLOWED,
        body: doc! { "bulkWrite": 1, "$db": "admin" },
        sequences: vec![
            (
                "ops".into(),
                raw(&[doc! { "insert": 0, "document": { "a": 1 } }]),
            ),
            ("nsInfo".into(), raw(&[doc! { "ns": "db.c" }])),
            ("empty".into(), vec![]),
        ],
    };
    let got = msg(decode_message(&encode_op_msg_request(1, &m, None).unwrap()).unwrap());
    assert!(got.more_to_come() && got.exhaust_allowed());
    assert_eq!(got, m);
    let cmd = got.into_command().unwrap();
    assert_eq!(cmd.get_array("empty").unwrap().len(), 0);
    assert_eq!(cmd.get_array("nsInfo").unwrap().len(), 1);
}

#[test]
fn sequence_before_body_is_accepted() {
    let payload = op_msg_payload(
        0,
        &[
            (1, sequence_section("documents", &[doc! { "a": 1 }])),
            (0, bson_bytes(&doc! { "insert": "c" })),
        ],
    );
    let got = msg(decode_message(&raw_frame(1, OP_MSG, &payload)).unwrap());
    assert_eq!(
        got.into_command().unwrap(),
        doc! { "insert": "c", "documents": [{ "a": 1 }] }
    );
}

#[test]
fn checksum_verified_when_present() {
    let mut m = insert_msg();
    m.flags = OpMsg::CHECKSUM_PRESENT;
    let frame = encode_op_msg_request(3, &m, None).unwrap();
    let got = msg(decode_message(&frame).unwrap());
    assert!(got.checksum_present());
    assert_eq!(got.sequences, m.sequences);

    // Flip a bit in the body, then in the checksum itself.
    for at in [30, frame.len() - 1] {
        let mut bad = frame.clone();
        bad[at] ^= 0x10;
        assert_err(
            &bad,
            |e| matches!(e, WireError::Checksum) && e.is_fatal(),
            "corrupted checksum",
        );
    }
    // Checksum flag set but no room for it.
    let short = raw_frame(1, OP_MSG, &1u32.to_le_bytes());
    assert_err(
        &short,
        |e| matches!(e, WireError::Malformed(_)),
        "checksum flag without checksum",
    );
}

#[test]
fn every_compressor_round_trips_op_msg_and_op_query() {
    let big = doc! { "insert": "c", "$db": "test", "pad": "x".repeat(100_000) };
    for c in COMPRESSORS {
        assert_eq!(Compressor::from_name(c.name()), Some(c));
        let mut m = insert_msg();
        m.body = big.clone();
        let frame = encode_op_msg_request(9, &m, Some(c)).unwrap();
        assert!(
            frame.len() < 20_000,
            "{c:?} did not compress: {}",
            frame.len()
        );
        assert_eq!(MsgHeader::parse(&frame).unwrap().op_code, OP_COMPRESSED);
        let incoming = decode_message(&frame).unwrap();
        assert_eq!(incoming.compressor, Some(c));
        assert_eq!(incoming.header.op_code, OP_MSG);
        assert_eq!(incoming.header.request_id, 9);
        assert_eq!(msg(incoming), m);

        // Checksum is over the uncompressed message.
        m.flags = OpMsg::CHECKSUM_PRESENT;
        let got = msg(decode_message(&encode_op_msg_request(9, &m, Some(c)).unwrap()).unwrap());
        assert_eq!(got, m);

        let q = hello_query();
        let frame = encode_compressed(&encode_op_query(4, &q).unwrap(), c);
        let incoming = decode_message(&frame).unwrap();
        assert_eq!(incoming.compressor, Some(c));
        assert_eq!(incoming.request, Request::Query(q));

        // Replies.
        let reply = encode_op_msg(5, 9, &doc! { "ok": 1.0, "n": 2 }, Some(c));
        let (h, body) = decode_reply(&reply).unwrap();
        assert_eq!((h.request_id, h.response_to, h.op_code), (5, 9, OP_MSG));
        assert_eq!(body, doc! { "ok": 1.0, "n": 2 });
    }
    assert_eq!(Compressor::from_name("lz4"), None);
}

#[test]
fn noop_compressor_is_accepted_uncompressed() {
    let plain = encode_op_msg_request(2, &insert_msg(), None).unwrap();
    let payload = &plain[16..];
    let mut p = OP_MSG.to_le_bytes().to_vec();
    p.extend_from_slice(&(payload.len() as i32).to_le_bytes());
    p.push(0);
    p.extend_from_slice(payload);
    let incoming = decode_message(&raw_frame(2, OP_COMPRESSED, &p)).unwrap();
    assert_eq!(incoming.compressor, None);
    assert_eq!(msg(incoming), insert_msg());
}

fn hello_query() -> OpQuery {
    OpQuery {
        flags: 4,
        full_collection_name: "admin.$cmd".into(),
        number_to_skip: 0,
        number_to_return: -1,
        query: doc! { "$query": { "isMaster": 1, "client": { "driver": "x" } }, "$readPreference": { "mode": "primaryPreferred" } },
        return_fields: None,
    }
}

#[test]
fn op_query_round_trip_and_command() {
    let q = hello_query();
    let incoming = decode_message(&encode_op_query(11, &q).unwrap()).unwrap();
    assert_eq!(incoming.header.op_code, OP_QUERY);
    let Request::Query(got) = incoming.request else {
        panic!("expected OP_QUERY")
    };
    assert_eq!(got, q);
    assert_eq!(got.database(), "admin");
    assert_eq!(
        got.command(),
        Some(doc! { "isMaster": 1, "client": { "driver": "x" } })
    );

    let plain = OpQuery {
        query: doc! { "hello": 1 },
        return_fields: Some(doc! { "a": 1 }),
        full_collection_name: "test.$cmd".into(),
        ..hello_query()
    };
    let Request::Query(got) = decode_message(&encode_op_query(12, &plain).unwrap())
        .unwrap()
        .request
    else {
        panic!("expected OP_QUERY")
    };
    assert_eq!(got, plain);
    assert_eq!(got.command(), Some(doc! { "hello": 1 }));
    assert_eq!(got.database(), "test");
    let not_cmd = OpQuery {
        full_collection_name: "test.coll".into(),
        ..plain
    };
    assert_eq!(not_cmd.command(), None);
}

#[test]
fn op_reply_round_trip() {
    let frame = encode_op_reply(20, 11, &doc! { "ismaster": true, "maxWireVersion": 21 });
    let (h, d) = decode_reply(&frame).unwrap();
    assert_eq!((h.request_id, h.response_to, h.op_code), (20, 11, 1));
    assert_eq!(d, doc! { "ismaster": true, "maxWireVersion": 21 });
    // A server never accepts OP_REPLY as a request.
    assert_err(
        &frame,
        |e| matches!(e, WireError::UnsupportedOpCode(1)),
        "OP_REPLY as request",
    );
}

#[test]
fn unencodable_reply_becomes_an_error_reply() {
    let bad = doc! { "a\0b": 1 };
    let (_, body) = decode_reply(&encode_op_msg(1, 2, &bad, None)).unwrap();
    assert_eq!(body.get_f64("ok").unwrap(), 0.0);
    let (_, body) = decode_reply(&encode_op_reply(1, 2, &bad)).unwrap();
    assert_eq!(body.get_f64("ok").unwrap(), 0.0);
    assert!(encode_op_msg_request(1, &OpMsg::new(bad), None).is_err());
}

#[test]
fn garbage_bytes_never_decode_or_panic() {
    // xorshift; fixed seed so a failure reproduces.
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..20_000 {
        let len = (next() % 96) as usize;
        let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if v.len() >= 16 && next() % 2 == 0 {
            // Make the header plausible so decoding gets further.
            v[..4].copy_from_slice(&(len as i32).to_le_bytes());
            let op = [OP_MSG, OP_QUERY, OP_COMPRESSED][(next() % 3) as usize];
            v[12..16].copy_from_slice(&op.to_le_bytes());
        }
        let _ = decode_message(&v);
        let _ = decode_reply(&v);
    }
    assert!(decode_message(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").is_err());
}

#[test]
fn every_truncation_and_extension_is_rejected() {
    let mut with_checksum = insert_msg();
    with_checksum.flags = OpMsg::CHECKSUM_PRESENT;
    let frames = [
        encode_op_msg_request(1, &insert_msg(), None).unwrap(),
        encode_op_msg_request(1, &with_checksum, None).unwrap(),
        encode_op_msg_request(1, &insert_msg(), Some(Compressor::Zstd)).unwrap(),
        encode_op_query(1, &hello_query()).unwrap(),
    ];
    // Cutting the first frame right after its body leaves a valid body-only OP_MSG.
    let body_only = 16 + 4 + 1 + bson_bytes(&insert_msg().body).len();
    for (i, frame) in frames.iter().enumerate() {
        for n in 0..frame.len() {
            assert!(
                decode_message(&frame[..n]).is_err(),
                "prefix of {n} bytes accepted"
            );
            // Also with the header length rewritten to match: the content is then truncated.
            if n >= 16 && !(i == 0 && n == body_only) {
                let mut t = frame[..n].to_vec();
                t[..4].copy_from_slice(&(n as i32).to_le_bytes());
                assert!(
                    decode_message(&t).is_err(),
                    "self-consistent prefix of {n} bytes accepted"
                );
            }
        }
        let mut longer = frame.clone();
        longer.push(0);
        assert!(decode_message(&longer).is_err());
    }
}

#[test]
fn bad_lengths() {
    let mut frame = encode_op_msg_request(1, &insert_msg(), None).unwrap();
    for len in [0i32, 15, -1, i32::MIN] {
        frame[..4].copy_from_slice(&len.to_le_bytes());
        assert_err(
            &frame,
            |e| matches!(e, WireError::Malformed(_)) && e.is_fatal(),
            "small length",
        );
    }
    for len in [MAX_MESSAGE_SIZE as i32 + 1, i32::MAX] {
        frame[..4].copy_from_slice(&len.to_le_bytes());
        assert_err(
            &frame,
            |e| matches!(e, WireError::MessageTooLarge(_)) && e.is_fatal(),
            "huge length",
        );
    }
    let e = WireError::MessageTooLarge(MAX_MESSAGE_SIZE + 1).to_mongo_error();
    assert_eq!(e.code, ErrorCode::ProtocolError as i32);
}

#[test]
fn nesting_depth_limit() {
    let ok = OpMsg::new(doc! { "find": "c", "filter": nested(MAX_NESTING_DEPTH - 1) });
    decode_message(&encode_op_msg_request(1, &ok, None).unwrap()).unwrap();

    let deep = OpMsg::new(doc! { "find": "c", "filter": nested(MAX_NESTING_DEPTH) });
    let frame = encode_op_msg_request(1, &deep, None).unwrap();
    assert_err(
        &frame,
        |e| matches!(e, WireError::NestingTooDeep) && !e.is_fatal(),
        "depth 101",
    );
    let err = WireError::NestingTooDeep.to_mongo_error();
    assert_eq!(err.code, ErrorCode::Overflow as i32);

    // The same inside a document sequence, and in OP_QUERY.
    let mut seq = insert_msg();
    let deep_doc = bson::to_vec(&nested(MAX_NESTING_DEPTH + 1)).unwrap();
    seq.sequences[0]
        .1
        .push(RawDocumentBuf::from_bytes(deep_doc).unwrap());
    let frame = encode_op_msg_request(1, &seq, None).unwrap();
    assert_err(
        &frame,
        |e| matches!(e, WireError::NestingTooDeep),
        "deep sequence document",
    );
    let q = OpQuery {
        query: nested(MAX_NESTING_DEPTH + 1),
        ..hello_query()
    };
    assert_err(
        &encode_op_query(1, &q).unwrap(),
        |e| matches!(e, WireError::NestingTooDeep),
        "deep query",
    );
}

#[test]
fn bad_sections() {
    let body = bson_bytes(&doc! { "ping": 1 });
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "kind 2",
            op_msg_payload(0, &[(0, body.clone()), (2, body.clone())]),
        ),
        ("kind 0xff", op_msg_payload(0, &[(0xff, body.clone())])),
        (
            "two bodies",
            op_msg_payload(0, &[(0, body.clone()), (0, body.clone())]),
        ),
        (
            "no body",
            op_msg_payload(0, &[(1, sequence_section("documents", &[doc! {}]))]),
        ),
        ("no sections", op_msg_payload(0, &[])),
        (
            "unknown required flag",
            op_msg_payload(1 << 4, &[(0, body.clone())]),
        ),
        ("sequence size too big", {
            let mut s = sequence_section("documents", &[doc! { "a": 1 }]);
            s[0] += 1;
            op_msg_payload(0, &[(0, body.clone()), (1, s)])
        }),
        ("sequence size too small", {
            let mut s = sequence_section("documents", &[doc! { "a": 1 }]);
            s[0] -= 1;
            op_msg_payload(0, &[(0, body.clone()), (1, s)])
        }),
        ("sequence size negative", {
            let mut s = sequence_section("documents", &[]);
            s[..4].copy_from_slice(&(-8i32).to_le_bytes());
            op_msg_payload(0, &[(0, body.clone()), (1, s)])
        }),
        ("unterminated identifier", {
            let mut s = 8i32.to_le_bytes().to_vec();
            s.extend_from_slice(b"docu");
            op_msg_payload(0, &[(0, body.clone()), (1, s)])
        }),
        ("body length past end", {
            let mut b = body.clone();
            b[0] += 10;
            op_msg_payload(0, &[(0, b)])
        }),
    ];
    for (what, payload) in cases {
        assert_err(
            &raw_frame(1, OP_MSG, &payload),
            |e| matches!(e, WireError::Malformed(_)) && e.is_fatal(),
            what,
        );
    }
    // Unknown optional flag bits (16-31) are ignored.
    decode_message(&raw_frame(
        1,
        OP_MSG,
        &op_msg_payload(1 << 20, &[(0, body.clone())]),
    ))
    .unwrap();
}

#[test]
fn bad_documents_are_not_fatal() {
    let mut body = bson_bytes(&doc! { "ping": "abc" });
    body[14] = 0xff; // invalid UTF-8 in the string
    let frame = raw_frame(1, OP_MSG, &op_msg_payload(0, &[(0, body)]));
    assert_err(
        &frame,
        |e| matches!(e, WireError::Bson(_)) && !e.is_fatal(),
        "bad utf-8",
    );
    assert_eq!(
        decode_message(&frame).unwrap_err().to_mongo_error().code,
        ErrorCode::InvalidBSON as i32
    );

    // Duplicate identifiers, or an identifier that repeats a body field.
    let body = bson_bytes(&doc! { "insert": "c", "documents": [] });
    let dup = op_msg_payload(
        0,
        &[(0, body), (1, sequence_section("documents", &[doc! {}]))],
    );
    assert_err(
        &raw_frame(1, OP_MSG, &dup),
        |e| matches!(e, WireError::Bson(_)),
        "duplicate with body",
    );
    let body = bson_bytes(&doc! { "insert": "c" });
    let s = sequence_section("documents", &[doc! {}]);
    let dup = op_msg_payload(0, &[(0, body), (1, s.clone()), (1, s)]);
    assert_err(
        &raw_frame(1, OP_MSG, &dup),
        |e| matches!(e, WireError::Bson(_)),
        "duplicate sequences",
    );
}

#[test]
fn oversized_document_is_not_fatal() {
    let mut big = doc! { "insert": "c" };
    let chunk = Bson::Binary(bson::Binary {
        subtype: bson::spec::BinarySubtype::Generic,
        bytes: vec![0; 1 << 20],
    });
    for i in 0..17 {
        big.insert(format!("pad{i}"), chunk.clone());
    }
    let frame = encode_op_msg_request(1, &OpMsg::new(big), None).unwrap();
    let e = decode_message(&frame).unwrap_err();
    assert!(
        matches!(e, WireError::MessageTooLarge(_)) && !e.is_fatal(),
        "{e:?}"
    );
    assert_eq!(
        e.to_mongo_error().code,
        ErrorCode::BSONObjectTooLarge as i32
    );
}

fn compressed_frame(original: i32, uncompressed_size: i32, id: u8, data: &[u8]) -> Vec<u8> {
    let mut p = original.to_le_bytes().to_vec();
    p.extend_from_slice(&uncompressed_size.to_le_bytes());
    p.push(id);
    p.extend_from_slice(data);
    raw_frame(1, OP_COMPRESSED, &p)
}

#[test]
fn decompression_bombs_and_lies() {
    let plain = encode_op_msg_request(1, &insert_msg(), None).unwrap();
    let payload = &plain[16..];
    let real = payload.len() as i32;
    for c in COMPRESSORS {
        let good = encode_compressed(&plain, c);
        let data = &good[25..];
        decode_message(&compressed_frame(OP_MSG, real, c.id(), data)).unwrap();
        for lie in [0, 1, real - 1, real + 1, real * 1000] {
            let f = compressed_frame(OP_MSG, lie, c.id(), data);
            assert_err(
                &f,
                |e| e.is_fatal(),
                &format!("{c:?} uncompressedSize {lie} instead of {real}"),
            );
        }
        for huge in [MAX_MESSAGE_SIZE as i32, i32::MAX] {
            let f = compressed_frame(OP_MSG, huge, c.id(), data);
            assert_err(
                &f,
                |e| matches!(e, WireError::MessageTooLarge(_)) && e.is_fatal(),
                "huge uncompressedSize",
            );
        }
        assert_err(
            &compressed_frame(OP_MSG, -5, c.id(), data),
            |e| e.is_fatal(),
            "negative size",
        );
        // Corrupt compressed bytes.
        let mut corrupt = data.to_vec();
        for b in corrupt.iter_mut().skip(2).step_by(3) {
            *b ^= 0x5a;
        }
        assert!(decode_message(&compressed_frame(OP_MSG, real, c.id(), &corrupt)).is_err());
    }

    // A real bomb: 40 MB of zeros compresses to a few KB; declaring less must stop early.
    let zeros = vec![0u8; 40_000_000];
    for c in COMPRESSORS {
        let inner = raw_frame(1, OP_MSG, &zeros);
        let bomb = encode_compressed(&inner, c);
        assert!(bomb.len() < 4_000_000, "{c:?}: {}", bomb.len());
        let mut lying = bomb.clone();
        lying[20..24].copy_from_slice(&1000i32.to_le_bytes());
        assert_err(
            &lying,
            |e| matches!(e, WireError::Malformed(_)),
            "bomb with a small uncompressedSize",
        );
        // Told the truth it decompresses, and fails only as the garbage OP_MSG it is.
        assert_err(
            &bomb,
            |e| matches!(e, WireError::Malformed(_)),
            "honest bomb",
        );
    }

    // Snappy whose own length header claims 40 MB from a few bytes.
    let mut snappy_lie = Vec::new();
    let mut n: u32 = 40_000_000;
    while n >= 0x80 {
        snappy_lie.push((n as u8) | 0x80);
        n >>= 7;
    }
    snappy_lie.push(n as u8);
    snappy_lie.extend_from_slice(&[0; 8]);
    assert_err(
        &compressed_frame(OP_MSG, 40_000_000, 1, &snappy_lie),
        |e| e.is_fatal(),
        "snappy lie",
    );

    assert_err(
        &compressed_frame(OP_MSG, real, 9, payload),
        |e| e.is_fatal(),
        "unknown compressor",
    );
    assert_err(
        &compressed_frame(OP_COMPRESSED, real, 0, payload),
        |e| matches!(e, WireError::Malformed(_)),
        "nested OP_COMPRESSED",
    );
    assert_err(
        &compressed_frame(2002, real, 0, payload),
        |e| matches!(e, WireError::UnsupportedOpCode(2002)),
        "OP_INSERT",
    );
}

#[test]
fn unsupported_opcodes() {
    for op in [0, 1, 2001, 2002, 2005, 2006, 2007, 2010, 2011, 9999, -1] {
        let f = raw_frame(1, op, &[0; 20]);
        assert_err(
            &f,
            |e| matches!(e, WireError::UnsupportedOpCode(o) if *o == op) && e.is_fatal(),
            "opcode",
        );
    }
}

#[tokio::test]
async fn read_message_stream() {
    let mut stream = Vec::new();
    stream.extend(encode_op_query(1, &hello_query()).unwrap());
    stream.extend(encode_op_msg_request(2, &insert_msg(), Some(Compressor::Snappy)).unwrap());
    let mut deep =
        encode_op_msg_request(3, &OpMsg::new(nested(MAX_NESTING_DEPTH + 5)), None).unwrap();
    let deep_len = deep.len();
    stream.append(&mut deep);
    stream.extend(encode_op_msg_request(4, &insert_msg(), None).unwrap());

    let mut r = stream.as_slice();
    let mut buf = Vec::new();
    let m1 = read_message(&mut r, &mut buf).await.unwrap().unwrap();
    assert!(matches!(m1.request, Request::Query(_)));
    let m2 = read_message(&mut r, &mut buf).await.unwrap().unwrap();
    assert_eq!(
        (m2.header.request_id, m2.compressor),
        (2, Some(Compressor::Snappy))
    );
    // A bad document: not fatal, the frame is in buf to answer, and the stream goes on.
    let e = read_message(&mut r, &mut buf).await.unwrap_err();
    assert!(!e.is_fatal());
    assert_eq!(buf.len(), deep_len);
    assert_eq!(MsgHeader::parse(&buf).unwrap().request_id, 3);
    let m4 = read_message(&mut r, &mut buf).await.unwrap().unwrap();
    assert_eq!(msg(m4), insert_msg());
    assert!(
        read_message(&mut r, &mut buf).await.unwrap().is_none(),
        "clean EOF"
    );
}

#[tokio::test]
async fn read_message_truncation_and_huge_lengths() {
    let frame = encode_op_msg_request(1, &insert_msg(), None).unwrap();
    for n in 1..frame.len() {
        let mut r = &frame[..n];
        let e = read_message(&mut r, &mut Vec::new()).await.unwrap_err();
        assert!(matches!(e, WireError::Io(_)) && e.is_fatal(), "{n}: {e:?}");
    }
    for len in [0i32, -1, 15, MAX_MESSAGE_SIZE as i32 + 1, i32::MAX] {
        let mut f = frame.clone();
        f[..4].copy_from_slice(&len.to_le_bytes());
        let mut buf = Vec::new();
        let e = read_message(&mut f.as_slice(), &mut buf).await.unwrap_err();
        assert!(e.is_fatal(), "{len}: {e:?}");
        assert!(
            buf.capacity() < 1024,
            "allocated {} for length {len}",
            buf.capacity()
        );
    }
    // A peer that announces the maximum and sends little costs little.
    let mut f = frame.clone();
    f[..4].copy_from_slice(&(MAX_MESSAGE_SIZE as i32).to_le_bytes());
    let mut buf = Vec::new();
    assert!(read_message(&mut f.as_slice(), &mut buf).await.is_err());
    assert!(buf.capacity() <= 2 << 20, "{}", buf.capacity());
}

/// Writes valid frames of every kind as a seed corpus for the fuzz target:
/// `WIRE_FUZZ_SEEDS=fuzz/corpus/decode_message cargo test -p wire --test codec -- --ignored`
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Ok(dir) = std::env::var("WIRE_FUZZ_SEEDS") else {
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let mut checksummed = insert_msg();
    checksummed.flags = OpMsg::CHECKSUM_PRESENT | OpMsg::EXHAUST_ALLOWED;
    let mut seeds = vec![
        (
            "msg_insert",
            encode_op_msg_request(1, &insert_msg(), None).unwrap(),
        ),
        (
            "msg_checksum",
            encode_op_msg_request(2, &checksummed, None).unwrap(),
        ),
        ("query_hello", encode_op_query(3, &hello_query()).unwrap()),
        ("reply", encode_op_reply(4, 3, &doc! { "ok": 1.0 })),
    ];
    for c in COMPRESSORS {
        seeds.push((
            c.name(),
            encode_op_msg_request(5, &checksummed, Some(c)).unwrap(),
        ));
        let q = encode_compressed(&encode_op_query(6, &hello_query()).unwrap(), c);
        seeds.push((c.name(), q));
    }
    for (i, (name, frame)) in seeds.iter().enumerate() {
        std::fs::write(format!("{dir}/seed_{i}_{name}"), frame).unwrap();
    }
}

#[test]
fn folded_sequences_encode_as_the_folded_command() {
    let m = OpMsg {
        flags: 0,
        body: doc! { "insert": "c", "ordered": false },
        sequences: vec![
            (
                "documents".into(),
                raw(&(0..12)
                    .map(|i| doc! { "_id": i, "s": "x" })
                    .collect::<Vec<_>>()),
            ),
            ("empty".into(), vec![]),
        ],
    };
    let folded = wire::fold_sequences(&m.body, &m.sequences).unwrap();
    let expected = bson::to_vec(&m.clone().into_command().unwrap()).unwrap();
    assert_eq!(folded, expected);
    let no_sequences = wire::fold_sequences(&m.body, &[]).unwrap();
    assert_eq!(no_sequences, bson::to_vec(&m.body).unwrap());
}

/// Insert documents are now stored as they arrive, checked only by `validate_document`:
/// every document it accepts must also parse, or a stored document could not be read
/// back. Byte flips of documents holding every BSON type, fixed seed, bounded count.
#[test]
fn what_the_validator_accepts_always_parses() {
    use bson::spec::BinarySubtype;
    let binary = |subtype, bytes: Vec<u8>| Bson::Binary(bson::Binary { subtype, bytes });
    let samples = [
        doc! {"_id": 1, "s": "text", "d": 1.5, "l": 7_i64, "b": true, "n": null},
        doc! {"o": {"a": [1, {"b": "c"}]}, "t": bson::Timestamp { time: 1, increment: 2 }},
        doc! {
            "bin": binary(BinarySubtype::Generic, vec![1, 2, 3]),
            "old": binary(BinarySubtype::BinaryOld, vec![4, 5]),
            "uuid": binary(BinarySubtype::Uuid, vec![0; 16]),
        },
        doc! {
            "re": bson::Regex { pattern: "a.c".into(), options: "i".into() },
            "js": Bson::JavaScriptCode("x".into()),
            "jss": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: "y".into(),
                scope: doc! {"z": 1},
            }),
            "dt": bson::DateTime::from_millis(5),
            "oid": bson::oid::ObjectId::from_bytes([1; 12]),
            "dec": bson::Decimal128::from_bytes([0; 16]),
            "min": Bson::MinKey, "max": Bson::MaxKey,
            "sym": Bson::Symbol("s".into()), "u": Bson::Undefined,
        },
    ];
    let mut s: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut accepted = 0;
    for round in 0..60_000 {
        let mut bytes = bson_bytes(&samples[round % samples.len()]);
        for _ in 0..1 + next() % 3 {
            let at = (next() as usize) % bytes.len();
            bytes[at] = match next() % 4 {
                0 => 0,
                1 => 0xFF,
                _ => next() as u8,
            };
        }
        if wire::bson_check::validate_document(&bytes, MAX_NESTING_DEPTH).is_ok() {
            accepted += 1;
            if let Err(e) = Document::from_reader(&bytes[..]) {
                panic!("validator accepted what the parser rejects ({e}): {bytes:?}");
            }
        }
    }
    // The mutations must leave some documents valid, or the check above checks nothing.
    assert!(
        accepted > 1_000,
        "only {accepted} mutated documents were valid"
    );
}
