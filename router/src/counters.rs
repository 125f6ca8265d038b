//! Operation counters for `serverStatus`. Each connection counts into its own striped
//! slot (chosen by connection id), so no single cache line is shared by every request:
//! shared atomics on a hot path stop multi-core scaling (field report on WiredTiger's
//! cursor counter). Totals are summed only when someone asks.

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
}

const OPS: usize = 9;

#[repr(align(128))]
#[derive(Default)]
struct Stripe([AtomicU64; OPS]);

pub struct OpCounters {
    stripes: Vec<Stripe>,
}

impl Default for OpCounters {
    fn default() -> Self {
        OpCounters {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
        }
    }
}

impl OpCounters {
    pub fn add(&self, conn_id: u64, op: Op, n: u64) {
        self.stripes[conn_id as usize % STRIPES].0[op as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn total(&self, op: Op) -> i64 {
        self.stripes
            .iter()
            .map(|s| s.0[op as usize].load(Ordering::Relaxed))
            .sum::<u64>() as i64
    }
}
