//! What a client's write can count on when it is sent more than once: a driver, or a
//! router after a failover, sends a write again when it cannot tell whether it took
//! effect. A retryable write takes effect once per session and `txnNumber`, and a session
//! runs one command at a time (`retry`); a write's reply says what replication made of it
//! in the places drivers and routers look to decide whether to send it again: errors of a
//! member that is not primary at the top level, a replication timeout as a
//! `writeConcernError` (`write_concern`). Neither needs anything of the crate but its
//! errors.

pub mod retry;
pub mod txn;
pub mod write_concern;
