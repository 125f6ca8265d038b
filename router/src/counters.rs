//! Operation counters for `serverStatus`. Each connection counts into its own striped
//! slot (chosen by connection id), so no single cache line is shared by every request:
//! shared atomics on a hot path stop multi-core scaling (every increment moves the cache
//! line between cores). Totals are summed only when someone asks.

use std::sync::atomic::{AtomicU64, Ordering};

const STRIPES: usize = 32;

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Insert,
    Query,
    Update,
    Delete,
    GetMore,
    Command,
    AuthSucceeded,
    AuthFailed,
    /// Commands dropped because their client closed the connection while they ran.
    CancelledByDisconnect,
    /// Commands answered overloaded (462) at once because the runtime's lag would have
    /// eaten their deadline.
    ShedByRouter,
    /// Commands answered overloaded (462) at once because their whole deadline was shorter
    /// than the router's answers take (`answer_time`).
    ShedByAnswerTime,
    /// Commands answered overloaded (462) at once because the line for a shard's slots
    /// would have kept them too long (`forward_gate`).
    ShedByForwardGate,
}

const OPS: usize = 12;

/// One `T` per stripe, each on cache lines of its own; a connection always uses the
/// stripe its id picks, so connections on different cores rarely share one.
pub struct Striped<T> {
    stripes: Vec<Padded<T>>,
}

#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Striped {
            stripes: (0..STRIPES).map(|_| Padded::default()).collect(),
        }
    }
}

impl<T> Striped<T> {
    /// The stripe of connection `conn_id`.
    pub fn of(&self, conn_id: u64) -> &T {
        &self.stripes[conn_id as usize % STRIPES].0
    }

    /// Every stripe, for summing.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|p| &p.0)
    }
}

#[derive(Default)]
pub struct OpCounters {
    stripes: Striped<[AtomicU64; OPS]>,
}

impl OpCounters {
    pub fn add(&self, conn_id: u64, op: Op, n: u64) {
        self.stripes.of(conn_id)[op as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn total(&self, op: Op) -> i64 {
        self.stripes
            .all()
            .map(|s| s[op as usize].load(Ordering::Relaxed))
            .sum::<u64>() as i64
    }
}
