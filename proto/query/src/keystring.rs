//! Order-preserving byte encoding of BSON values (owner: query-core helper).
//! `encode(a) < encode(b)` (bytewise) exactly when `order::compare(a, b) == Less`.
//!
//! Layout (every encoding is prefix-free, so concatenations order lexicographically and
//! inverting the bytes of a component reverses its order):
//!
//! * one type byte per canonical type (numbers share one, string and symbol share one);
//! * numbers: 8 bytes of the order-preserving f64 nearest to the value (NaN below -inf),
//!   then a residual marker: `0x02` when the f64 is exact, `0x01`/`0x03` + 8 bytes of the
//!   signed difference for Int64 values a double cannot represent. Decimal128 values that
//!   are not integral i64s are approximated by the nearest f64 (same as
//!   [`crate::order::compare`]), so decimals differing beyond double precision collide;
//! * strings, field names, regex pattern/flags, code: bytes escaped (`0x00`→`01 01`,
//!   `0x01`→`01 02`) and terminated by `0x00`;
//! * documents: per field `[value type byte][escaped name][value body]`, then `0x00`;
//! * arrays: per element `[type byte][body]`, then `0x00`;
//! * binData: 4-byte big-endian length, subtype, bytes; ObjectId: 12 bytes; bool: 1 byte;
//!   date: i64 with the sign bit flipped; timestamp: u64 big-endian.
//!
//! Decoding is lossy for numeric types (the type is not stored): see [`decode_value`].
// MongoError is the shared, deliberately rich error type; boxing it is a crate-wide decision.
use bson::{
    oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Document, JavaScriptCodeWithScope,
    Regex, Timestamp,
};

use crate::order::{self, NumKey};
use crate::{MongoError, MongoResult};

mod tag {
    pub const MIN_KEY: u8 = 10;
    pub const UNDEFINED: u8 = 15;
    pub const NULL: u8 = 20;
    pub const NUMBER: u8 = 30;
    pub const STRING: u8 = 40;
    pub const DOCUMENT: u8 = 50;
    pub const ARRAY: u8 = 60;
    pub const BINARY: u8 = 70;
    pub const OBJECT_ID: u8 = 80;
    pub const BOOLEAN: u8 = 90;
    pub const DATE: u8 = 100;
    pub const TIMESTAMP: u8 = 110;
    pub const REGEX: u8 = 120;
    pub const DB_POINTER: u8 = 130;
    pub const CODE: u8 = 140;
    pub const CODE_W_SCOPE: u8 = 150;
    pub const MAX_KEY: u8 = 240;
}

const RESIDUAL_NEG: u8 = 0x01;
const RESIDUAL_NONE: u8 = 0x02;
const RESIDUAL_POS: u8 = 0x03;
const END: u8 = 0x00;

fn type_tag(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => tag::MIN_KEY,
        Bson::Undefined => tag::UNDEFINED,
        Bson::Null => tag::NULL,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => tag::NUMBER,
        Bson::String(_) | Bson::Symbol(_) => tag::STRING,
        Bson::Document(_) => tag::DOCUMENT,
        Bson::Array(_) => tag::ARRAY,
        Bson::Binary(_) => tag::BINARY,
        Bson::ObjectId(_) => tag::OBJECT_ID,
        Bson::Boolean(_) => tag::BOOLEAN,
        Bson::DateTime(_) => tag::DATE,
        Bson::Timestamp(_) => tag::TIMESTAMP,
        Bson::RegularExpression(_) => tag::REGEX,
        Bson::DbPointer(_) => tag::DB_POINTER,
        Bson::JavaScriptCode(_) => tag::CODE,
        Bson::JavaScriptCodeWithScope(_) => tag::CODE_W_SCOPE,
        Bson::MaxKey => tag::MAX_KEY,
    }
}

/// Appends the order-preserving encoding of `v` to `out`.
pub fn encode_value(out: &mut Vec<u8>, v: &Bson) {
    out.push(type_tag(v));
    encode_body(out, v);
}

/// The encoding of one value as a fresh vector.
pub fn encode(v: &Bson) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, v);
    out
}

/// Encodes a compound index key: each component encoded in turn, with the bytes of
/// descending components inverted. `descending` may be shorter than `values` (missing
/// entries mean ascending).
pub fn encode_key(values: &[Bson], descending: &[bool]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let start = out.len();
        encode_value(&mut out, v);
        if descending.get(i).copied().unwrap_or(false) {
            for b in &mut out[start..] {
                *b = !*b;
            }
        }
    }
    out
}

fn encode_f64(out: &mut Vec<u8>, d: f64) {
    let bits = d.to_bits();
    let enc = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    out.extend_from_slice(&enc.to_be_bytes());
}

fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            0 => out.extend_from_slice(&[1, 1]),
            1 => out.extend_from_slice(&[1, 2]),
            _ => out.push(b),
        }
    }
    out.push(END);
}

fn encode_doc_fields(out: &mut Vec<u8>, d: &Document) {
    for (k, v) in d {
        out.push(type_tag(v));
        encode_str(out, k.as_bytes());
        encode_body(out, v);
    }
    out.push(END);
}

fn encode_body(out: &mut Vec<u8>, v: &Bson) {
    match v {
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {}
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            match order::num_key(v).unwrap_or(NumKey::NaN) {
                NumKey::NaN => {
                    out.extend_from_slice(&[0; 8]);
                    out.push(RESIDUAL_NONE);
                }
                NumKey::Val { approx, residual } => {
                    encode_f64(out, approx);
                    match residual.cmp(&0) {
                        std::cmp::Ordering::Equal => out.push(RESIDUAL_NONE),
                        std::cmp::Ordering::Less => {
                            out.push(RESIDUAL_NEG);
                            out.extend_from_slice(&((residual as u64) ^ (1 << 63)).to_be_bytes());
                        }
                        std::cmp::Ordering::Greater => {
                            out.push(RESIDUAL_POS);
                            out.extend_from_slice(&((residual as u64) ^ (1 << 63)).to_be_bytes());
                        }
                    }
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => {
            encode_str(out, s.as_bytes())
        }
        Bson::Document(d) => encode_doc_fields(out, d),
        Bson::Array(a) => {
            for e in a {
                encode_value(out, e);
            }
            out.push(END);
        }
        Bson::Binary(b) => {
            out.extend_from_slice(&(b.bytes.len() as u32).to_be_bytes());
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&b.bytes);
        }
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Boolean(b) => out.push(*b as u8),
        Bson::DateTime(d) => {
            out.extend_from_slice(&((d.timestamp_millis() as u64) ^ (1 << 63)).to_be_bytes())
        }
        Bson::Timestamp(t) => {
            out.extend_from_slice(&t.time.to_be_bytes());
            out.extend_from_slice(&t.increment.to_be_bytes());
        }
        Bson::RegularExpression(r) => {
            encode_str(out, r.pattern.as_bytes());
            encode_str(out, r.options.as_bytes());
        }
        Bson::DbPointer(_) => {
            let (ns, id) = order::db_pointer_parts(v);
            out.extend_from_slice(&(ns.len() as u32).to_be_bytes());
            encode_str(out, ns.as_bytes());
            encode_str(out, id.as_bytes());
        }
        Bson::JavaScriptCodeWithScope(c) => {
            encode_str(out, c.code.as_bytes());
            encode_doc_fields(out, &c.scope);
        }
    }
}

fn corrupt() -> MongoError {
    MongoError::internal("corrupt keystring")
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    invert: bool,
    /// Open documents and arrays: a corrupt key must not recurse without bound.
    depth: usize,
}

/// Deepest value a key decodes to (keys come from documents of bounded depth).
const MAX_DECODE_DEPTH: usize = 2 * crate::depth::MAX_VALUE_DEPTH;

impl Reader<'_> {
    fn byte(&mut self) -> MongoResult<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(corrupt)?;
        self.pos += 1;
        Ok(if self.invert { !b } else { b })
    }

    fn bytes<const N: usize>(&mut self) -> MongoResult<[u8; N]> {
        let mut a = [0u8; N];
        for x in &mut a {
            *x = self.byte()?;
        }
        Ok(a)
    }

    fn str_bytes(&mut self) -> MongoResult<Vec<u8>> {
        let mut s = Vec::new();
        loop {
            match self.byte()? {
                END => return Ok(s),
                1 => match self.byte()? {
                    1 => s.push(0),
                    2 => s.push(1),
                    _ => return Err(corrupt()),
                },
                b => s.push(b),
            }
        }
    }

    fn string(&mut self) -> MongoResult<String> {
        String::from_utf8(self.str_bytes()?).map_err(|_| corrupt())
    }

    fn value(&mut self) -> MongoResult<Bson> {
        let t = self.byte()?;
        self.body(t)
    }

    fn enter(&mut self) -> MongoResult<()> {
        self.depth += 1;
        if self.depth > MAX_DECODE_DEPTH {
            return Err(corrupt());
        }
        Ok(())
    }

    fn doc_fields(&mut self) -> MongoResult<Document> {
        self.enter()?;
        let mut d = Document::new();
        loop {
            let t = self.byte()?;
            if t == END {
                self.depth -= 1;
                return Ok(d);
            }
            let k = self.string()?;
            let v = self.body(t)?;
            d.insert(k, v);
        }
    }

    /// Containers recurse here, in a small frame; scalars are decoded in `scalar`.
    fn body(&mut self, t: u8) -> MongoResult<Bson> {
        match t {
            tag::DOCUMENT => Ok(Bson::Document(self.doc_fields()?)),
            tag::ARRAY => {
                self.enter()?;
                let mut a = Vec::new();
                loop {
                    let t = self.byte()?;
                    if t == END {
                        break;
                    }
                    a.push(self.body(t)?);
                }
                self.depth -= 1;
                Ok(Bson::Array(a))
            }
            _ => self.scalar(t),
        }
    }

    #[inline(never)]
    fn scalar(&mut self, t: u8) -> MongoResult<Bson> {
        Ok(match t {
            tag::MIN_KEY => Bson::MinKey,
            tag::MAX_KEY => Bson::MaxKey,
            tag::NULL => Bson::Null,
            tag::UNDEFINED => Bson::Undefined,
            tag::NUMBER => {
                let raw = u64::from_be_bytes(self.bytes::<8>()?);
                let marker = self.byte()?;
                if raw == 0 {
                    return Ok(Bson::Double(f64::NAN));
                }
                let bits = if raw >> 63 == 1 {
                    raw ^ (1 << 63)
                } else {
                    !raw
                };
                let approx = f64::from_bits(bits);
                match marker {
                    RESIDUAL_NONE => {
                        if approx.fract() == 0.0 && approx.abs() < 2f64.powi(31) {
                            Bson::Int32(approx as i32)
                        } else if approx.fract() == 0.0 && approx.abs() < 2f64.powi(53) {
                            Bson::Int64(approx as i64)
                        } else {
                            Bson::Double(approx)
                        }
                    }
                    RESIDUAL_NEG | RESIDUAL_POS => {
                        let r = (u64::from_be_bytes(self.bytes::<8>()?) ^ (1 << 63)) as i64;
                        let v = approx as i128 + r as i128;
                        Bson::Int64(i64::try_from(v).map_err(|_| corrupt())?)
                    }
                    _ => return Err(corrupt()),
                }
            }
            tag::STRING => Bson::String(self.string()?),
            tag::CODE => Bson::JavaScriptCode(self.string()?),
            tag::BINARY => {
                let len = u32::from_be_bytes(self.bytes::<4>()?) as usize;
                let subtype = BinarySubtype::from(self.byte()?);
                // The length is read from the key: never reserve more than remains.
                let mut bytes = Vec::with_capacity(len.min(self.buf.len() - self.pos));
                for _ in 0..len {
                    bytes.push(self.byte()?);
                }
                Bson::Binary(Binary { subtype, bytes })
            }
            tag::OBJECT_ID => Bson::ObjectId(ObjectId::from_bytes(self.bytes::<12>()?)),
            tag::BOOLEAN => Bson::Boolean(self.byte()? != 0),
            tag::DATE => {
                let raw = u64::from_be_bytes(self.bytes::<8>()?) ^ (1 << 63);
                Bson::DateTime(DateTime::from_millis(raw as i64))
            }
            tag::TIMESTAMP => {
                let time = u32::from_be_bytes(self.bytes::<4>()?);
                let increment = u32::from_be_bytes(self.bytes::<4>()?);
                Bson::Timestamp(Timestamp { time, increment })
            }
            tag::REGEX => {
                let pattern = self.string()?;
                let options = self.string()?;
                Bson::RegularExpression(Regex { pattern, options })
            }
            tag::CODE_W_SCOPE => {
                let code = self.string()?;
                let scope = self.doc_fields()?;
                Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope })
            }
            tag::DB_POINTER => {
                // DBPointer cannot be rebuilt through the bson crate's public API.
                return Err(MongoError::internal("cannot decode a DBPointer key"));
            }
            _ => return Err(corrupt()),
        })
    }
}

/// Decodes one value from the front of `buf`, returning it and the number of bytes
/// consumed. Numbers come back canonicalized (their original BSON type is not stored):
/// integral values below 2^31 as Int32, integral values below 2^53 or needing a residual
/// as Int64, everything else as Double (Decimal128 comes back as its f64 approximation).
/// Symbols come back as strings.
pub fn decode_value(buf: &[u8]) -> MongoResult<(Bson, usize)> {
    let mut r = Reader {
        buf,
        pos: 0,
        invert: false,
        depth: 0,
    };
    let v = r.value()?;
    Ok((v, r.pos))
}

/// Decodes a compound key produced by [`encode_key`] with the same `descending` flags.
pub fn decode_key(buf: &[u8], descending: &[bool], count: usize) -> MongoResult<Vec<Bson>> {
    let mut pos = 0;
    let mut out = Vec::with_capacity(count.min(buf.len()));
    for i in 0..count {
        let invert = descending.get(i).copied().unwrap_or(false);
        let mut r = Reader {
            buf,
            pos,
            invert,
            depth: 0,
        };
        out.push(r.value()?);
        pos = r.pos;
    }
    if pos != buf.len() {
        return Err(corrupt());
    }
    Ok(out)
}

/// Hashed index value: a stable 64-bit hash of the value's canonical encoding, so that
/// 1, 1i64 and 1.0 hash alike (as in MongoDB). Hashed shard keys use it too, so routers
/// and shards must agree on it forever: it is part of the on-disk format.
pub fn hashed_value(v: &Bson) -> Bson {
    let mut enc = Vec::new();
    encode_value(&mut enc, v);
    // FNV-1a: stable across processes and versions, unlike std's RandomState.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in enc {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    Bson::Int64(h as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::compare;
    use bson::{doc, Decimal128};
    use std::cmp::Ordering;
    use std::str::FromStr;

    fn values() -> Vec<Bson> {
        let mut v = crate::order::tests::ascending_values();
        v.extend([
            Bson::Int32(1),
            Bson::Int64(1),
            Bson::Double(1.0),
            Bson::Decimal128(Decimal128::from_str("1.0").unwrap()),
            Bson::Decimal128(Decimal128::from_str("0.5").unwrap()),
            Bson::Double(-0.0),
            Bson::Int64(-9_007_199_254_740_993),
            Bson::Int64(i64::MAX - 1),
            Bson::Symbol("a".into()),
            Bson::Document(doc! {"a": [1, {"b": "c\u{0}"}]}),
            Bson::Document(doc! {"a\u{0}": 1}),
            Bson::Document(doc! {"a": 1.0, "b": 1}),
            Bson::Array(vec![Bson::String("a".into()), Bson::Int32(1)]),
            Bson::Array(vec![Bson::String("a\u{0}".into())]),
            Bson::Array(vec![Bson::Array(vec![])]),
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "x".into(),
                scope: doc! {"a": 1},
            }),
        ]);
        v
    }

    #[test]
    fn bytewise_order_matches_compare() {
        let vals = values();
        for a in &vals {
            for b in &vals {
                let (ea, eb) = (encode(a), encode(b));
                assert_eq!(ea.cmp(&eb), compare(a, b), "{a:?} vs {b:?}: {ea:?} {eb:?}");
            }
        }
    }

    #[test]
    fn equal_numbers_encode_identically() {
        let e = encode(&Bson::Int32(7));
        assert_eq!(encode(&Bson::Int64(7)), e);
        assert_eq!(encode(&Bson::Double(7.0)), e);
        assert_eq!(
            encode(&Bson::Decimal128(Decimal128::from_str("7.00").unwrap())),
            e
        );
        assert_eq!(encode(&Bson::Double(-0.0)), encode(&Bson::Int32(0)));
    }

    #[test]
    fn compound_keys_order_lexicographically_with_directions() {
        let vals = values();
        for dirs in [[false, false], [false, true], [true, false], [true, true]] {
            for a1 in vals.iter().step_by(3) {
                for a2 in vals.iter().step_by(5) {
                    for b1 in vals.iter().step_by(3) {
                        for b2 in vals.iter().step_by(5) {
                            let ka = encode_key(&[a1.clone(), a2.clone()], &dirs);
                            let kb = encode_key(&[b1.clone(), b2.clone()], &dirs);
                            let c1 = compare(a1, b1);
                            let c1 = if dirs[0] { c1.reverse() } else { c1 };
                            let c2 = compare(a2, b2);
                            let c2 = if dirs[1] { c2.reverse() } else { c2 };
                            assert_eq!(
                                ka.cmp(&kb),
                                c1.then(c2),
                                "{a1:?},{a2:?} vs {b1:?},{b2:?} {dirs:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn decode_round_trips() {
        for v in values() {
            if matches!(v, Bson::DbPointer(_)) {
                continue;
            }
            let e = encode(&v);
            let (d, n) = decode_value(&e).unwrap();
            assert_eq!(n, e.len());
            assert_eq!(compare(&d, &v), Ordering::Equal, "{v:?} -> {d:?}");
            assert_eq!(encode(&d), e);
        }
        let key = encode_key(
            &[Bson::String("x".into()), Bson::Int64(i64::MAX)],
            &[true, false],
        );
        let back = decode_key(&key, &[true, false], 2).unwrap();
        assert_eq!(back, vec![Bson::String("x".into()), Bson::Int64(i64::MAX)]);
        assert!(decode_value(&[tag::STRING, b'a']).is_err());
    }
}
