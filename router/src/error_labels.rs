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

/// Errors after which a transaction may be run again from its start: it was aborted
/// (a conflict, a failover, its snapshot gone, stale routing) and nothing of it took
/// effect. MongoDB's `isTransientTransactionError`.
const TRANSIENT: &[wire::ErrorCode] = &[
    wire::ErrorCode::WriteConflict,
    wire::ErrorCode::LockTimeout,
    wire::ErrorCode::PreparedTransactionInProgress,
    wire::ErrorCode::SnapshotUnavailable,
    wire::ErrorCode::SnapshotTooOld,
    wire::ErrorCode::StaleConfig,
    wire::ErrorCode::StaleDbVersion,
];

/// Write concern errors after which a commit certainly did not reach what was asked,
/// and sending it again cannot help: the write concern itself is wrong for the set.
const HOPELESS_WRITE_CONCERN: &[wire::ErrorCode] = &[
    wire::ErrorCode::UnknownReplWriteConcern,
    wire::ErrorCode::UnsatisfiableWriteConcern,
];

/// Adds the labels a driver's transaction loop looks for to the reply of a command in a
/// transaction: `TransientTransactionError` when the whole transaction may run again,
/// and on `commitTransaction`, `UnknownTransactionCommitResult` when the commit may or
/// may not have happened (the driver then sends the commit again).
pub fn label_transaction(reply: &mut Document, name: &str) {
    if reply.contains_key("errorLabels") {
        return;
    }
    let failed = !matches!(reply.get("ok"), Some(Bson::Double(d)) if *d == 1.0)
        && !matches!(reply.get("ok"), Some(Bson::Int32(1)));
    let code = |d: &Document| d.get_i32("code").ok().and_then(wire::ErrorCode::from_code);
    let wce = reply.get_document("writeConcernError").ok().map(code);
    let commit = name == "commitTransaction";
    let label = match (failed, code(reply)) {
        (true, Some(c)) if TRANSIENT.contains(&c) => Some("TransientTransactionError"),
        (true, Some(wire::ErrorCode::NoSuchTransaction)) if wce.is_none() => {
            Some("TransientTransactionError")
        }
        (true, Some(c)) if commit && unsure(c) => Some("UnknownTransactionCommitResult"),
        (true, Some(c)) if !commit && c.is_retryable_write() => Some("TransientTransactionError"),
        (false, _) if commit => match wce {
            Some(Some(c)) if HOPELESS_WRITE_CONCERN.contains(&c) => None,
            Some(_) => Some("UnknownTransactionCommitResult"),
            None => None,
        },
        _ => None,
    };
    if let Some(label) = label {
        reply.insert("errorLabels", vec![Bson::String(label.into())]);
    }
}

/// Errors of a commit that may or may not have happened.
fn unsure(c: wire::ErrorCode) -> bool {
    c.is_retryable_write()
        || matches!(
            c,
            wire::ErrorCode::WriteConcernFailed | wire::ErrorCode::MaxTimeMSExpired
        )
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

    fn labelled(mut r: Document, name: &str) -> Option<String> {
        label_transaction(&mut r, name);
        r.get_array("errorLabels")
            .ok()
            .and_then(|l| l.first()?.as_str().map(str::to_string))
    }

    #[test]
    fn transactions_are_labelled_transient_or_unknown_commit() {
        let conflict = doc! {"ok": 0.0, "code": 112};
        assert_eq!(
            labelled(conflict.clone(), "insert").unwrap(),
            "TransientTransactionError"
        );
        assert_eq!(
            labelled(conflict, "commitTransaction").unwrap(),
            "TransientTransactionError"
        );
        let not_primary = doc! {"ok": 0.0, "code": 10107};
        assert_eq!(
            labelled(not_primary.clone(), "find").unwrap(),
            "TransientTransactionError"
        );
        assert_eq!(
            labelled(not_primary, "commitTransaction").unwrap(),
            "UnknownTransactionCommitResult"
        );
        let wce = doc! {"ok": 1.0, "writeConcernError": {"code": 64}};
        assert_eq!(
            labelled(wce.clone(), "commitTransaction").unwrap(),
            "UnknownTransactionCommitResult"
        );
        assert_eq!(labelled(wce, "insert"), None);
        let hopeless = doc! {"ok": 1.0, "writeConcernError": {"code": 100}};
        assert_eq!(labelled(hopeless, "commitTransaction"), None);
        assert_eq!(labelled(doc! {"ok": 0.0, "code": 11000}, "insert"), None);
    }
}
