//! The reply to a command refused at the front of its path (`Session::shed`: the answer
//! time, the lag controller or the forward gate), built straight to BSON.
//!
//! Why: in a burst at 130% of capacity the router refuses the excess, thousands of
//! commands a second, and every microsecond a refusal takes is taken from the commands
//! it serves. A refusal cost 13.8 µs of the router's CPU, 40% of it in user space and
//! most of that building the reply as a `Document` (an ordered map whose every key is an
//! allocation of its own, grown and rehashed as the error's fields and the cluster time
//! go in), then encoding it (`docs/journal/overload-experiments.md`, "refusals built as
//! bytes"). Here the reply is
//! written field by field into one buffer: the same fields in the same order as
//! `MongoError::overloaded` and `cluster_time::stamp` give (a test compares the bytes).

use std::sync::OnceLock;

use bson::raw::RawBsonRef;
use bson::{RawArrayBuf, RawDocumentBuf, Timestamp};
use wire::ErrorCode;

/// `{ok: 0, errmsg, code: 462, codeName, errorLabels, operationTime, $clusterTime}`.
pub fn overloaded(message: &str, cluster_time: Timestamp) -> RawDocumentBuf {
    static LABELS: OnceLock<RawArrayBuf> = OnceLock::new();
    let labels = LABELS.get_or_init(|| {
        let mut a = RawArrayBuf::new();
        for label in wire::OVERLOADED_LABELS {
            a.push(label);
        }
        a
    });
    let code = ErrorCode::IngressRequestRateLimitExceeded;
    let mut reply = RawDocumentBuf::new();
    reply.append_ref("ok", RawBsonRef::Double(0.0));
    reply.append_ref("errmsg", message);
    reply.append_ref("code", RawBsonRef::Int32(code as i32));
    reply.append_ref("codeName", code.name());
    reply.append_ref("errorLabels", labels);
    crate::cluster_time::stamp_raw(&mut reply, cluster_time);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_refusal_is_the_documented_reply_byte_for_byte() {
        let ts = Timestamp {
            time: 1_796_450_000,
            increment: 77,
        };
        let message = "router overloaded: the line would take 4 ms; nothing was started, retry";
        let mut expected = wire::MongoError::overloaded(message).to_document();
        crate::cluster_time::stamp(&mut expected, ts);
        let raw = overloaded(message, ts);
        assert_eq!(raw.as_bytes(), bson::to_vec(&expected).unwrap().as_slice());
        // And a second refusal reuses the labels built once.
        assert_eq!(overloaded(message, ts).as_bytes(), raw.as_bytes());
    }
}
