//! Histograms of where forwarded commands spent their time, for `serverStatus`: waiting
//! in the router's line for one of the shard's slots (`forward_gate`), waiting for a
//! ticket on the shard, running on the shard (replication wait included), waiting
//! for replication alone, and the whole command as the router saw it. Buckets are powers of ten in microseconds.
//!
//! Striped by connection like `counters`, so recording takes no shared cache line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bson::{doc, Document};

use crate::counters::Striped;

/// Upper bounds of the buckets (the last one is open).
const BOUNDS_US: [u64; 6] = [100, 1_000, 10_000, 100_000, 1_000_000, u64::MAX];
const LABELS: [&str; 6] = ["lt100us", "lt1ms", "lt10ms", "lt100ms", "lt1s", "ge1s"];
const KINDS: usize = 5;

/// Which wait a sample measures.
#[derive(Clone, Copy)]
pub enum Wait {
    ShardQueue = 0,
    ShardExec = 1,
    Total = 2,
    /// Of the shard's execution, waiting for the write to replicate.
    Replication = 3,
    /// In the router's line for one of the shard's slots.
    RouterQueue = 4,
}

#[derive(Default)]
pub struct WaitHistograms {
    stripes: Striped<[[AtomicU64; 6]; KINDS]>,
}

impl WaitHistograms {
    pub fn record(&self, conn_id: u64, wait: Wait, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let bucket = BOUNDS_US.iter().position(|b| us < *b).unwrap_or(5);
        self.stripes.of(conn_id)[wait as usize][bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn sum(&self, wait: Wait) -> Document {
        let mut d = Document::new();
        for (i, label) in LABELS.iter().enumerate() {
            let n: u64 = self
                .stripes
                .all()
                .map(|s| s[wait as usize][i].load(Ordering::Relaxed))
                .sum();
            d.insert(*label, n as i64);
        }
        d
    }

    /// `{shardQueue: {lt100us: n, ...}, shardExec: {...}, replication: {...}, total: {...}}`.
    pub fn to_document(&self) -> Document {
        doc! {
            "routerQueue": self.sum(Wait::RouterQueue),
            "shardQueue": self.sum(Wait::ShardQueue),
            "shardExec": self.sum(Wait::ShardExec),
            "replication": self.sum(Wait::Replication),
            "total": self.sum(Wait::Total),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_bucket() {
        let h = WaitHistograms::default();
        h.record(1, Wait::ShardQueue, Duration::from_micros(50));
        h.record(2, Wait::ShardQueue, Duration::from_millis(5));
        h.record(3, Wait::Total, Duration::from_secs(2));
        let d = h.to_document();
        let q = d.get_document("shardQueue").unwrap();
        assert_eq!(q.get_i64("lt100us"), Ok(1));
        assert_eq!(q.get_i64("lt10ms"), Ok(1));
        assert_eq!(d.get_document("total").unwrap().get_i64("ge1s"), Ok(1));
    }
}
