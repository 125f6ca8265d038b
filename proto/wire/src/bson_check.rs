//! Validation of raw BSON bytes before they are deserialised.
//!
//! The bson crate's deserialiser recurses once per nesting level and trusts length
//! prefixes when sizing buffers. Running this iterative check first bounds both: after it
//! passes, every length prefix is consistent with its container, every string and key is
//! valid UTF-8, and nesting is at most `max_depth` levels. The walker keeps one stack entry
//! per open document, so its memory is bounded by `max_depth` and it never recurses.

use crate::wire_error::WireError;

/// Checks that `bytes` is exactly one well-formed BSON document nested at most
/// `max_depth` levels below the top (`{}` has depth 0, `{a: {}}` depth 1).
pub fn validate_document(bytes: &[u8], max_depth: usize) -> Result<(), WireError> {
    let len = read_len(bytes, 0, "document")?;
    if len != bytes.len() || len < 5 {
        return Err(invalid(format!(
            "document length {len} does not match its {} bytes",
            bytes.len()
        )));
    }
    if bytes[len - 1] != 0 {
        return Err(invalid("document does not end with EOO"));
    }
    // Index of the terminating NUL of each open document (top-level first).
    let mut open: Vec<usize> = Vec::with_capacity(8);
    open.push(len - 1);
    let mut pos = 4;
    while let Some(&end) = open.last() {
        let ty = bytes[pos];
        if ty == 0 {
            if pos != end {
                return Err(invalid("EOO before end of object"));
            }
            open.pop();
            pos += 1;
            continue;
        }
        // `bytes[end] == 0`, so a non-zero type byte means pos < end.
        pos += 1;
        let key_end =
            cstring_end(bytes, pos, end).ok_or_else(|| invalid("unterminated field name"))?;
        if std::str::from_utf8(&bytes[pos..key_end]).is_err() {
            return Err(invalid("field name is not valid UTF-8"));
        }
        pos = key_end + 1;
        pos = match ty {
            // double, UTC datetime, timestamp, int64
            0x01 | 0x09 | 0x11 | 0x12 => fixed(pos, 8, end)?,
            0x07 => fixed(pos, 12, end)?,
            0x10 => fixed(pos, 4, end)?,
            0x13 => fixed(pos, 16, end)?,
            // undefined, null, min key, max key
            0x06 | 0x0A | 0xFF | 0x7F => pos,
            0x08 => {
                let next = fixed(pos, 1, end)?;
                if bytes[pos] > 1 {
                    return Err(invalid("invalid boolean value"));
                }
                next
            }
            // string, JavaScript code, symbol
            0x02 | 0x0D | 0x0E => string(bytes, pos, end)?,
            // embedded document, array
            0x03 | 0x04 => {
                let child_end = child_document(bytes, pos, end)?;
                if open.len() > max_depth {
                    return Err(WireError::NestingTooDeep);
                }
                open.push(child_end);
                pos + 4
            }
            0x05 => binary(bytes, pos, end)?,
            0x0B => {
                let pattern_end =
                    cstring_end(bytes, pos, end).ok_or_else(|| invalid("unterminated regex"))?;
                let opts_end = cstring_end(bytes, pattern_end + 1, end)
                    .ok_or_else(|| invalid("unterminated regex options"))?;
                if std::str::from_utf8(&bytes[pos..opts_end]).is_err() {
                    return Err(invalid("regex is not valid UTF-8"));
                }
                opts_end + 1
            }
            // DBPointer: namespace string + ObjectId
            0x0C => fixed(string(bytes, pos, end)?, 12, end)?,
            // code with scope: int32 total, string, document
            0x0F => {
                let total = read_len(bytes, pos, "code with scope")?;
                if total < 14 || total > end - pos {
                    return Err(invalid("invalid code with scope size"));
                }
                let scope = string(bytes, pos + 4, pos + total)?;
                let scope_end = child_document(bytes, scope, end)?;
                if scope_end + 1 != pos + total {
                    return Err(invalid("invalid code with scope object size"));
                }
                if open.len() > max_depth {
                    return Err(WireError::NestingTooDeep);
                }
                open.push(scope_end);
                scope + 4
            }
            other => return Err(invalid(format!("unknown BSON type 0x{other:02x}"))),
        };
    }
    debug_assert_eq!(pos, len);
    Ok(())
}

/// Reads a little-endian i32 length at `pos` and rejects negatives.
fn read_len(bytes: &[u8], pos: usize, what: &str) -> Result<usize, WireError> {
    let b = bytes
        .get(pos..pos.saturating_add(4))
        .ok_or_else(|| invalid(format!("{what} length runs past the end of its container")))?;
    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    usize::try_from(v).map_err(|_| invalid(format!("negative {what} length {v}")))
}

/// Position after a fixed-size value that must end at or before `end`.
fn fixed(pos: usize, size: usize, end: usize) -> Result<usize, WireError> {
    if size > end - pos {
        return Err(invalid("element extends past end of object"));
    }
    Ok(pos + size)
}

/// Index of the NUL ending the C string at `pos`, searched in `bytes[pos..end]`.
fn cstring_end(bytes: &[u8], pos: usize, end: usize) -> Option<usize> {
    bytes
        .get(pos..end)?
        .iter()
        .position(|&b| b == 0)
        .map(|i| pos + i)
}

/// A BSON string (int32 length including the NUL, UTF-8 bytes, NUL); returns the next position.
fn string(bytes: &[u8], pos: usize, end: usize) -> Result<usize, WireError> {
    let l = read_len(bytes, pos, "string")?;
    if end < pos + 4 || l < 1 || l > end - pos - 4 {
        return Err(invalid("invalid string length"));
    }
    let data = &bytes[pos + 4..pos + 4 + l];
    if data[l - 1] != 0 {
        return Err(invalid("string is not NUL-terminated"));
    }
    if std::str::from_utf8(&data[..l - 1]).is_err() {
        return Err(invalid("string is not valid UTF-8"));
    }
    Ok(pos + 4 + l)
}

/// Checks an embedded document's length and terminator; returns the index of its NUL.
fn child_document(bytes: &[u8], pos: usize, end: usize) -> Result<usize, WireError> {
    let l = read_len(bytes, pos, "embedded document")?;
    if l < 5 || l > end - pos {
        return Err(invalid("invalid embedded document length"));
    }
    if bytes[pos + l - 1] != 0 {
        return Err(invalid("embedded document does not end with EOO"));
    }
    Ok(pos + l - 1)
}

fn binary(bytes: &[u8], pos: usize, end: usize) -> Result<usize, WireError> {
    let l = read_len(bytes, pos, "binary")?;
    if end < pos + 5 || l > end - pos - 5 {
        return Err(invalid("invalid binary length"));
    }
    let subtype = bytes[pos + 4];
    if subtype == 0x02 {
        // The deprecated "old binary" subtype repeats the length inside the payload.
        let inner = read_len(bytes, pos + 5, "old binary")?;
        if l < 4 || inner != l - 4 {
            return Err(invalid("invalid old binary length"));
        }
    }
    Ok(pos + 5 + l)
}

fn invalid(msg: impl Into<String>) -> WireError {
    WireError::Bson(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Bson, Document};

    fn bytes(d: &Document) -> Vec<u8> {
        let mut v = Vec::new();
        d.to_writer(&mut v).unwrap();
        v
    }

    /// `depth` levels of alternating documents and arrays below the top-level document.
    fn nested(depth: usize) -> Document {
        let mut v = Bson::Int32(1);
        for i in 0..depth {
            v = if i % 2 == 0 {
                Bson::Document(doc! { "a": v })
            } else {
                Bson::Array(vec![v])
            };
        }
        doc! { "top": v }
    }

    #[test]
    fn accepts_every_type() {
        let d = doc! {
            "f": 1.5, "s": "hé", "d": { "x": 1 }, "a": [1, "two"],
            "b": Bson::Binary(bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] }),
            "u": Bson::Undefined, "o": bson::oid::ObjectId::new(), "t": true,
            "dt": bson::DateTime::from_millis(5), "n": Bson::Null,
            "re": Bson::RegularExpression(bson::Regex { pattern: "^a".into(), options: "i".into() }),
            "js": Bson::JavaScriptCode("x".into()),
            "jsw": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code: "y".into(), scope: doc! { "q": 1 } }),
            "sym": Bson::Symbol("s".into()),
            "i": 1i32, "ts": Bson::Timestamp(bson::Timestamp { time: 1, increment: 2 }), "l": 2i64,
            "dec": Bson::Decimal128(bson::Decimal128::from_bytes([0; 16])),
            "min": Bson::MinKey, "max": Bson::MaxKey,
        };
        validate_document(&bytes(&d), MAX).unwrap();
        validate_document(&bytes(&doc! {}), MAX).unwrap();
    }

    const MAX: usize = crate::MAX_NESTING_DEPTH;

    #[test]
    fn nesting_limit() {
        validate_document(&bytes(&nested(MAX)), MAX).unwrap();
        assert!(matches!(
            validate_document(&bytes(&nested(MAX + 1)), MAX),
            Err(WireError::NestingTooDeep)
        ));
    }

    #[test]
    fn deep_nesting_without_recursion() {
        // 1M levels of {"":{...}} written by hand: bson would overflow the stack building it.
        let depth = 1_000_000usize;
        let mut v = Vec::with_capacity(depth * 7);
        for i in 0..depth {
            let len = ((depth - i) * 7 - 2) as i32; // len(4) type(1) key NUL(1) child EOO(1); innermost {} is 5
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&[0x03, 0]);
        }
        v.truncate(v.len() - 2);
        v.push(0);
        v.extend(std::iter::repeat_n(0, depth - 1));
        assert!(matches!(
            validate_document(&v, MAX),
            Err(WireError::NestingTooDeep)
        ));
    }

    #[test]
    fn rejects_corruption() {
        let good = bytes(&doc! { "s": "abc", "d": { "x": 1 } });
        let mut cases: Vec<Vec<u8>> = Vec::new();
        // every truncation
        for n in 0..good.len() {
            cases.push(good[..n].to_vec());
        }
        // bad string length, bad UTF-8, bad type, bad inner length, missing EOO
        let mut c = good.clone();
        c[7] = 200;
        cases.push(c);
        let mut c = good.clone();
        c[11] = 0xff;
        cases.push(c);
        let mut c = good.clone();
        c[4] = 0x42;
        cases.push(c);
        let mut c = good.clone();
        c[18] = 100;
        cases.push(c);
        let mut c = good.clone();
        let n = c.len();
        c[n - 1] = 1;
        cases.push(c);
        for (i, c) in cases.iter().enumerate() {
            assert!(
                validate_document(c, MAX).is_err(),
                "case {i} accepted: {c:?}"
            );
        }
        let mut bad_bool = bytes(&doc! { "t": true });
        bad_bool[7] = 2;
        assert!(validate_document(&bad_bool, MAX).is_err());
    }
}
