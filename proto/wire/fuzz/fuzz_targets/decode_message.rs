//! Any byte string must decode to a message or an error, never a panic, hang or
//! unbounded allocation. A message that decodes must re-encode to something that decodes
//! to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::{Incoming, Request, WireError};

fn encode(m: &Incoming) -> Vec<u8> {
    match &m.request {
        Request::Msg(msg) => wire::encode_op_msg_request(m.header.request_id, msg, m.compressor),
        Request::Query(q) => wire::encode_op_query(m.header.request_id, q),
    }
    .expect("a decoded message re-encodes")
}

fuzz_target!(|data: &[u8]| {
    match wire::decode_message(data) {
        Ok(incoming) => {
            let reencoded = encode(&incoming);
            let again = wire::decode_message(&reencoded).expect("a re-encoded message decodes");
            // Compared as bytes: documents holding NaN are not equal to themselves.
            assert_eq!(encode(&again), reencoded);
        }
        Err(e) => {
            // Classification and conversion must not panic either.
            let _ = e.is_fatal();
            let _ = e.to_mongo_error();
            if let WireError::MessageTooLarge(n) = e {
                assert!(n > 0);
            }
        }
    }
    let _ = wire::decode_reply(data);
});
