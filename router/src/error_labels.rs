//! `errorLabels` on replies to retryable writes. Since MongoDB 4.4 the server, not the
//! driver, decides whether a failed write may be retried: drivers retry a write only when
//! its error carries `RetryableWriteError`.

use bson::{Bson, Document};

/// Whether `cmd` is a retryable write: it carries a `txnNumber` outside a transaction.
pub fn is_retryable_write(cmd: &Document) -> bool {
    cmd.contains_key("txnNumber") && !cmd.contains_key("autocommit")
}

/// Adds `RetryableWriteError` to a retryable write's reply when its error (or write
/// concern error) allows a retry; labels already present are left as they are.
pub fn label(reply: &mut Document) {
    if reply.contains_key("errorLabels") {
        return;
    }
    let failed = !matches!(reply.get("ok"), Some(Bson::Double(d)) if *d == 1.0)
        && !matches!(reply.get("ok"), Some(Bson::Int32(1)));
    let code = if failed {
        reply.get_i32("code").ok()
    } else {
        reply
            .get_document("writeConcernError")
            .ok()
            .and_then(|w| w.get_i32("code").ok())
    };
    if code
        .and_then(wire::ErrorCode::from_code)
        .is_some_and(wire::ErrorCode::is_retryable_write)
    {
        reply.insert(
            "errorLabels",
            vec![Bson::String("RetryableWriteError".into())],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn labels_retryable_errors_only() {
        let mut r = doc! {"ok": 0.0, "code": 10107};
        label(&mut r);
        assert_eq!(
            r.get_array("errorLabels").unwrap()[0].as_str(),
            Some("RetryableWriteError")
        );
        let mut r = doc! {"ok": 0.0, "code": 11000};
        label(&mut r);
        assert!(!r.contains_key("errorLabels"));
        let mut r = doc! {"ok": 1.0, "writeConcernError": {"code": 91}};
        label(&mut r);
        assert!(r.contains_key("errorLabels"));
        let mut r = doc! {"ok": 0.0, "code": 91, "errorLabels": []};
        label(&mut r);
        assert!(r.get_array("errorLabels").unwrap().is_empty());
    }
}
