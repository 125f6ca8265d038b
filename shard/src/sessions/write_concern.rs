//! How replication outcomes show in a write command's reply.
//!
//! A statement refused or interrupted because this member is not (or stopped being) the
//! primary fails the whole command with that error at the top level, as mongod does:
//! drivers and the router look only there to decide to retry, and a retried retryable
//! write skips the statements that already took effect.
//!
//! `writeConcernError`: a write whose replication wait ran past `wtimeout` is reported as
//! MongoDB does — the command succeeds (`ok: 1`, the statement counted in `n`) with a
//! `writeConcernError` — because the write is in the primary's log and may still commit;
//! it is neither known to have failed nor known to be durable.
//!
//! Here a write is applied only once a majority has it, so a timed-out statement is the
//! last one the command ran: the statements after it are not attempted (MongoDB would run
//! them and wait once at the end).

use std::time::Duration;

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

/// A parsed write concern. Every acknowledged write on a member is applied only once a
/// majority holds it, so `w:1` and `w:"majority"` wait for the same point; `wtimeout`
/// bounds the wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteConcern {
    /// Members that must have the write (0 = the default, majority).
    pub w: u32,
    pub wtimeout: Option<Duration>,
}

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
        "codeName": ErrorCode::WriteConcernFailed.name(),
        "errmsg": "waiting for replication timed out",
        "errInfo": {"wtimeout": true, "writeConcern": concern},
    }
}

/// Codes that mean "this member is not the primary (any more)".
const STATE_CHANGES: &[ErrorCode] = &[
    ErrorCode::NotWritablePrimary,
    ErrorCode::InterruptedDueToReplStateChange,
    ErrorCode::ShutdownInProgress,
];

/// Lifts a primary-state error out of `writeErrors` to the top level; moves timed-out
/// statements into a `writeConcernError`.
pub fn from_write_errors(reply: Document, wc: &WriteConcern) -> MongoResult<Document> {
    let Ok(errors) = reply.get_array("writeErrors") else {
        return Ok(reply);
    };
    let state_change = errors.iter().filter_map(Bson::as_document).find(|d| {
        d.get_i32("code")
            .is_ok_and(|c| STATE_CHANGES.iter().any(|s| *s as i32 == c))
    });
    if let Some(d) = state_change {
        let code = d.get_i32("code").unwrap_or_default();
        let code = *STATE_CHANGES
            .iter()
            .find(|s| **s as i32 == code)
            .expect("found above");
        return Err(MongoError::new(
            code,
            d.get_str("errmsg").unwrap_or("not primary").to_string(),
        ));
    }
    Ok(timed_out(reply, wc))
}

fn timed_out(mut reply: Document, wc: &WriteConcern) -> Document {
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
        let out = from_write_errors(reply, &wc).unwrap();
        assert_eq!(out.get_i32("n"), Ok(3));
        assert!(!out.contains_key("writeErrors"));
        let wce = out.get_document("writeConcernError").unwrap();
        assert_eq!(wce.get_i32("code"), Ok(64));
        assert_eq!(
            wce.get_document("errInfo").unwrap().get_bool("wtimeout"),
            Ok(true)
        );
        let dup = doc! {"n": 0, "writeErrors": [{"index": 0, "code": 11000}]};
        assert_eq!(from_write_errors(dup.clone(), &wc).unwrap(), dup);
        let stepped = doc! {"n": 1, "writeErrors": [{"index": 1, "code": 11602, "errmsg": "y"}]};
        assert_eq!(from_write_errors(stepped, &wc).unwrap_err().code, 11602);
    }
}
