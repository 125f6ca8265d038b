//! What the workload did, as a history of operations: each one invoked by a client at
//! one time and completed (or not) at a later one. Checkers read only this.

use serde::Serialize;

/// Nanoseconds since the scenario started (one monotonic clock for every client).
pub type Nanos = u64;

/// One operation on one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum Op {
    /// Read a register; `value` is what was read (`None`: the key had no value).
    Read { value: Option<i64> },
    /// Overwrite a register.
    Write { value: i64 },
    /// Set the register to `to` if it holds `from`; `swapped` is whether it did.
    Cas { from: i64, to: i64, swapped: bool },
    /// Append a unique `value` to a list (the lost/duplicated-write workload).
    Append { value: i64 },
    /// Add `by` to counter `key` (`$inc` by update or findAndModify, some at a `wtimeout`).
    Inc { by: i64 },
    /// Insert document `id` with a unique `u` of its own.
    Insert { id: i64 },
    /// Insert document `id` with a `u` that another document holds: must fail (11000).
    DupInsert { id: i64 },
    /// Change document `id`: `$push`, `$pull`, or a move of its unique `u`.
    Modify { id: i64 },
    /// Delete document `id` (by delete or findAndModify).
    Delete { id: i64 },
    /// A read whose answer is not judged, only its error: secondary and nearest finds,
    /// aggregations.
    Query { what: &'static str },
    /// A step of the DDL worker on a scratch collection.
    Ddl { what: &'static str },
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged: it happened (for a read or a CAS, with the recorded result).
    Ok,
    /// Definitely did not happen (the server said so before doing anything).
    Fail,
    /// Timed out or the connection broke: it may or may not have happened, at any time
    /// after its invocation.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    pub client: u32,
    pub key: u32,
    pub op: Op,
    pub outcome: Outcome,
    pub invoked: Nanos,
    /// When the reply (or the error) arrived.
    pub completed: Nanos,
    /// The MongoDB error code, if any (0: none, -1: not a server error).
    #[serde(skip_serializing_if = "is_zero")]
    pub code: i32,
}

fn is_zero(c: &i32) -> bool {
    *c == 0
}

/// Every operation of a run, in no particular order.
#[derive(Debug, Default, Clone, Serialize)]
pub struct History {
    pub events: Vec<Event>,
}

impl History {
    /// The operations on one key.
    pub fn key(&self, key: u32) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(move |e| e.key == key)
    }
}
