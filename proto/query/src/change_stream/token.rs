//! Resume tokens: `{_data: <hex>}`, whose bytes order events as a stream returns them.
//!
//! The first nine bytes are what MongoDB's tokens start with (KeyString's Timestamp type
//! byte, then the cluster time big-endian), so tools that read the time from a token read
//! it from ours. Then the token's type: a high-water mark (0) sorts before every event at
//! its time; an event (128) carries its position among the events of its log entry,
//! whether it is the `invalidate` that follows it, and its document key, which orders
//! events of different shards that share a time.

use crate::{ErrorCode, MongoError, MongoResult};
use bson::{doc, Bson, Document};

const TIMESTAMP_TYPE: u8 = 0x82;
const HIGH_WATER_MARK: u8 = 0;
const EVENT: u8 = 128;

/// Where an event is: its entry's cluster time and its place among the entry's events.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Token {
    pub time: u64,
    pub event: Option<EventPos>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventPos {
    pub index: u32,
    /// The `invalidate` made for the event at `index`.
    pub invalidate: bool,
    /// The event's document key as BSON, empty for DDL events.
    pub key: Vec<u8>,
}

impl Token {
    /// Before every event at `time` and after every earlier one.
    pub fn high_water_mark(time: u64) -> Token {
        Token { time, event: None }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        out.push(TIMESTAMP_TYPE);
        out.extend_from_slice(&self.time.to_be_bytes());
        match &self.event {
            None => out.push(HIGH_WATER_MARK),
            Some(e) => {
                out.push(EVENT);
                out.extend_from_slice(&e.index.to_be_bytes());
                out.push(u8::from(e.invalidate));
                out.extend_from_slice(&e.key);
            }
        }
        out
    }

    pub fn to_document(&self) -> Document {
        doc! {"_data": hex(&self.bytes())}
    }

    /// Parses a token a stream handed out (`resumeAfter`, `startAfter`, an event's `_id`).
    pub fn parse(value: &Bson) -> MongoResult<Token> {
        let Bson::Document(d) = value else {
            return Err(bad("a resume token must be an object"));
        };
        let Some(Bson::String(data)) = d.get("_data") else {
            return Err(bad("a resume token must have a string _data field"));
        };
        if d.keys().any(|k| k != "_data" && k != "_typeBits") {
            return Err(bad("unexpected field in a resume token"));
        }
        let bytes = unhex(data).ok_or_else(|| bad("a resume token's _data is not hex"))?;
        Token::from_bytes(&bytes).ok_or_else(|| bad("a resume token's _data is not one of ours"))
    }

    fn from_bytes(b: &[u8]) -> Option<Token> {
        if b.len() < 10 || b[0] != TIMESTAMP_TYPE {
            return None;
        }
        let time = u64::from_be_bytes(b[1..9].try_into().ok()?);
        match b[9] {
            HIGH_WATER_MARK if b.len() == 10 => Some(Token::high_water_mark(time)),
            EVENT if b.len() >= 15 => {
                let index = u32::from_be_bytes(b[10..14].try_into().ok()?);
                let invalidate = match b[14] {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                Some(Token {
                    time,
                    event: Some(EventPos {
                        index,
                        invalidate,
                        key: b[15..].to_vec(),
                    }),
                })
            }
            _ => None,
        }
    }
}

fn bad(why: &str) -> MongoError {
    MongoError::new(ErrorCode::InvalidResumeToken, why)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(time: u64, index: u32, key: &[u8]) -> Token {
        Token {
            time,
            event: Some(EventPos {
                index,
                invalidate: false,
                key: key.to_vec(),
            }),
        }
    }

    #[test]
    fn tokens_round_trip_and_order_as_their_hex() {
        let t = (1_700_000_000u64 << 32) | 7;
        let tokens = [
            Token::high_water_mark(t),
            event(t, 0, b"\x0e\x00"),
            event(t, 1, b""),
            event(t, 1, b"\x01"),
            Token::high_water_mark(t + 1),
        ];
        for w in tokens.windows(2) {
            let (a, b) = (w[0].to_document(), w[1].to_document());
            assert!(a.get_str("_data").unwrap() < b.get_str("_data").unwrap());
        }
        for tok in &tokens {
            let back = Token::parse(&Bson::Document(tok.to_document())).unwrap();
            assert_eq!(&back, tok);
        }
        // The prefix MongoDB's tools read the time from.
        assert!(tokens[0]
            .to_document()
            .get_str("_data")
            .unwrap()
            .starts_with("826553F10000000007"));
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in [
            Bson::Int32(1),
            Bson::Document(doc! {}),
            Bson::Document(doc! {"_data": "zz"}),
            Bson::Document(doc! {"_data": "82"}),
            Bson::Document(doc! {"_data": "8200000000000000000501"}),
            Bson::Document(doc! {"_data": "82", "x": 1}),
        ] {
            let e = Token::parse(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidResumeToken as i32);
        }
    }
}
