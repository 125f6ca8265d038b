//! No operation fails for a reason a fault does not explain. Elections, lost connections,
//! timeouts and overload refusals are expected while a fault is on; anything else (an
//! `InternalError` from a panic, a duplicate key on a retried insert, a parse error) is a
//! bug the fault uncovered.

use serde::Serialize;
use wire::ErrorCode;

use crate::check::linearizable::describe;
use crate::history::{Event, History, Op};

/// Codes any operation may fail with while members fail, elect and catch up: -1 (no
/// server answer: a connection lost, a timeout, no server selectable), HostUnreachable,
/// HostNotFound, MaxTimeMSExpired, WriteConcernFailed (a `wtimeout`), NetworkTimeout,
/// ShutdownInProgress, NotSecondary, FailedToSatisfyReadPreference,
/// ReadConcernMajorityNotAvailableYet, PrimarySteppedDown,
/// NetworkInterfaceExceededTimeLimit, ExceededTimeLimit,
/// IngressRequestRateLimitExceeded, SocketException, NotWritablePrimary,
/// InterruptedAtShutdown, InterruptedDueToReplStateChange, NotPrimaryNoSecondaryOk,
/// NotPrimaryOrSecondary.
const TRANSIENT: &[i32] = &[
    -1,
    ErrorCode::HostUnreachable as i32,
    ErrorCode::HostNotFound as i32,
    ErrorCode::MaxTimeMSExpired as i32,
    ErrorCode::WriteConcernFailed as i32,
    ErrorCode::NetworkTimeout as i32,
    ErrorCode::ShutdownInProgress as i32,
    ErrorCode::NotSecondary as i32,
    ErrorCode::FailedToSatisfyReadPreference as i32,
    ErrorCode::ReadConcernMajorityNotAvailableYet as i32,
    ErrorCode::PrimarySteppedDown as i32,
    ErrorCode::NetworkInterfaceExceededTimeLimit as i32,
    ErrorCode::ExceededTimeLimit as i32,
    ErrorCode::IngressRequestRateLimitExceeded as i32,
    ErrorCode::SocketException as i32,
    ErrorCode::NotWritablePrimary as i32,
    ErrorCode::InterruptedAtShutdown as i32,
    ErrorCode::InterruptedDueToReplStateChange as i32,
    ErrorCode::NotPrimaryNoSecondaryOk as i32,
    ErrorCode::NotPrimaryOrSecondary as i32,
];

/// Codes a DDL step may also end with when an earlier step's outcome was unknown (it
/// happened after all): NamespaceNotFound, IndexNotFound, NamespaceExists.
const DDL_AFTER_UNKNOWN: &[i32] = &[
    ErrorCode::NamespaceNotFound as i32,
    ErrorCode::IndexNotFound as i32,
    ErrorCode::NamespaceExists as i32,
];

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub failures: usize,
    pub unexplained: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.unexplained.is_empty()
    }
}

fn explained(e: &Event) -> bool {
    e.code == 0
        || TRANSIENT.contains(&e.code)
        || (matches!(e.op, Op::DupInsert { .. }) && e.code == ErrorCode::DuplicateKey as i32)
        || (matches!(e.op, Op::Ddl { .. }) && DDL_AFTER_UNKNOWN.contains(&e.code))
}

pub fn check(history: &History) -> Report {
    let mut r = Report::default();
    for e in &history.events {
        if e.code != 0 {
            r.failures += 1;
        }
        if !explained(e) {
            r.unexplained
                .push(format!("code {}: {}", e.code, describe(e)));
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Outcome;

    fn ev(op: Op, code: i32) -> Event {
        Event {
            client: 1,
            key: 0,
            op,
            outcome: Outcome::Unknown,
            invoked: 0,
            completed: 1,
            code,
        }
    }

    #[test]
    fn only_faults_explain_failures() {
        let h = History {
            events: vec![
                ev(Op::Write { value: 1 }, 10107),
                ev(Op::DupInsert { id: 1 }, 11000),
                ev(Op::Ddl { what: "drop" }, 26),
            ],
        };
        assert!(check(&h).ok());
        let h = History {
            events: vec![
                ev(Op::Insert { id: 1 }, 11000),
                ev(Op::Write { value: 1 }, 1),
                ev(Op::Append { value: 1 }, 26),
            ],
        };
        assert_eq!(check(&h).unexplained.len(), 3);
    }
}
