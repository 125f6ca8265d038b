//! `writeConcernError`: a write whose replication wait ran past `wtimeout` is reported as
//! MongoDB does — the command succeeds (`ok: 1`, the statement counted in `n`) with a
//! `writeConcernError` — because the write is in the primary's log and may still commit;
//! it is neither known to have failed nor known to be durable.
//!
//! Here a write is applied only once a majority has it, so a timed-out statement is the
//! last one the command ran: the statements after it are not attempted (MongoDB would run
//! them and wait once at the end).

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::node::WriteConcern;

fn is_timeout(code: i32) -> bool {
    code == ErrorCode::WriteConcernFailed as i32
}

fn error_document(wc: &WriteConcern) -> Document {
    let mut concern = doc! {"w": if wc.w == 0 { Bson::String("majority".into()) } else { Bson::Int32(wc.w as i32) }};
    if let Some(t) = wc.wtimeout {
        concern.insert("wtimeout", t.as_millis() as i64);
    }
    doc! {
        "code": ErrorCode::WriteConcernFailed as i32,
        "codeName": "WriteConcernFailed",
        "errmsg": "waiting for replication timed out",
        "errInfo": {"wtimeout": true, "writeConcern": concern},
    }
}

/// Moves timed-out statements out of `writeErrors` into a `writeConcernError`.
pub fn from_write_errors(mut reply: Document, wc: &WriteConcern) -> Document {
    let Ok(errors) = reply.get_array("writeErrors") else {
        return reply;
    };
    let (timed_out, rest): (Vec<&Bson>, Vec<&Bson>) = errors.iter().partition(|e| {
        e.as_document()
            .and_then(|d| d.get_i32("code").ok())
            .is_some_and(is_timeout)
    });
    if timed_out.is_empty() {
        return reply;
    }
    let rest: Vec<Bson> = rest.into_iter().cloned().collect();
    let n = reply.get_i32("n").unwrap_or(0) + timed_out.len() as i32;
    reply.insert("n", n);
    if rest.is_empty() {
        reply.remove("writeErrors");
    } else {
        reply.insert("writeErrors", rest);
    }
    reply.insert("writeConcernError", error_document(wc));
    reply
}

/// A command that failed only because its replication wait timed out succeeds with a
/// `writeConcernError`.
pub fn from_error(e: MongoError, wc: &WriteConcern) -> MongoResult<Document> {
    if is_timeout(e.code) {
        return Ok(doc! {"writeConcernError": error_document(wc)});
    }
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_out_statements_become_a_write_concern_error() {
        let wc = WriteConcern {
            w: 0,
            wtimeout: Some(std::time::Duration::from_millis(500)),
        };
        let reply = doc! {"n": 2, "writeErrors": [{"index": 2, "code": 64, "errmsg": "x"}]};
        let out = from_write_errors(reply, &wc);
        assert_eq!(out.get_i32("n"), Ok(3));
        assert!(!out.contains_key("writeErrors"));
        let wce = out.get_document("writeConcernError").unwrap();
        assert_eq!(wce.get_i32("code"), Ok(64));
        assert_eq!(
            wce.get_document("errInfo").unwrap().get_bool("wtimeout"),
            Ok(true)
        );
        let dup = doc! {"n": 0, "writeErrors": [{"index": 0, "code": 11000}]};
        assert_eq!(from_write_errors(dup.clone(), &wc), dup);
    }
}
