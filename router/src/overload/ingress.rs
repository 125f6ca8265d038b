//! Connection-establishment admission: at most `max_concurrent_handshakes` new
//! connections run their handshake (hello, SCRAM) at once; the rest wait, **newest
//! first**, in a bounded queue, and are closed once they have waited too long. A full
//! queue closes its oldest waiter to make room: under a storm the oldest is the one whose
//! client has most likely given up.
//!
//! Why LIFO: in a connection storm every client has a short timeout (500 ms in
//! `bulwark chaos connection-storm`). Served oldest first, or all at once as plain task
//! scheduling would, each handshake finishes after its client has given up, and the
//! router burns all its CPU on answers nobody reads: goodput falls to zero and stays
//! there (the avalanche). Served newest first, the connections with the most time left
//! complete, and the old ones are either gone (their client hung up, which costs one
//! failed read) or closed by the queue-wait bound. MongoDB 8's ingress limiter bounds the
//! same queue with a token bucket; a concurrency bound adapts to however fast the machine
//! is.
//!
//! The queue's lock is taken once per connection, never per command.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

pub struct HandshakeGate {
    limit: usize,
    max_queue: usize,
    max_wait: Duration,
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    active: usize,
    /// Waiting connections, oldest at the front; the newest (back) is served first.
    waiters: VecDeque<oneshot::Sender<()>>,
    stats: IngressStats,
}

/// `serverStatus.bulwark.ingress`.
#[derive(Default, Clone, Copy, Debug)]
pub struct IngressStats {
    pub admitted_at_once: u64,
    pub admitted_after_queueing: u64,
    /// Closed while waiting, to make room for a newer connection in a full queue.
    pub evicted_oldest: u64,
    /// Closed after waiting `max_wait`.
    pub rejected_waited_too_long: u64,
    pub queued_now: u64,
    pub handshaking_now: u64,
}

/// Held while a connection handshakes; dropping it admits the newest waiter.
pub struct HandshakePass {
    gate: Arc<HandshakeGate>,
}

impl HandshakeGate {
    pub fn new(limit: usize, max_queue: usize, max_wait: Duration) -> Arc<HandshakeGate> {
        Arc::new(HandshakeGate {
            limit: limit.max(1),
            max_queue,
            max_wait,
            state: Mutex::new(GateState::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a handshake slot; `None`: the connection should be closed.
    pub async fn enter(self: &Arc<Self>) -> Option<HandshakePass> {
        let mut rx = {
            let mut s = self.lock();
            if s.active < self.limit {
                s.active += 1;
                s.stats.admitted_at_once += 1;
                return Some(HandshakePass { gate: self.clone() });
            }
            if self.max_queue == 0 {
                s.stats.evicted_oldest += 1;
                return None;
            }
            while s.waiters.len() >= self.max_queue {
                // Dropping its sender wakes the oldest waiter with "refused".
                let oldest = s.waiters.pop_front();
                if oldest.is_some_and(|w| !w.is_closed()) {
                    s.stats.evicted_oldest += 1;
                }
            }
            let (tx, rx) = oneshot::channel();
            s.waiters.push_back(tx);
            rx
        };
        // A slot handed over is this connection's from the moment it is sent.
        let granted = match tokio::time::timeout(self.max_wait, &mut rx).await {
            Ok(Ok(())) => true,
            // Evicted from a full queue (counted then).
            Ok(Err(_)) => return None,
            Err(_) => {
                rx.close();
                rx.try_recv().is_ok()
            }
        };
        let mut s = self.lock();
        if granted {
            s.stats.admitted_after_queueing += 1;
            Some(HandshakePass { gate: self.clone() })
        } else {
            s.stats.rejected_waited_too_long += 1;
            None
        }
    }

    pub fn stats(&self) -> IngressStats {
        let s = self.lock();
        IngressStats {
            queued_now: s.waiters.iter().filter(|w| !w.is_closed()).count() as u64,
            handshaking_now: s.active as u64,
            ..s.stats
        }
    }
}

impl Drop for HandshakePass {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        // Hand the slot to the newest waiter still waiting.
        while let Some(w) = s.waiters.pop_back() {
            if w.send(()).is_ok() {
                return;
            }
        }
        s.active -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn newest_waiter_goes_first_and_a_full_queue_drops_its_oldest() {
        let gate = HandshakeGate::new(1, 2, Duration::from_secs(5));
        let first = gate.enter().await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (g, o) = (gate.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let pass = g.enter().await;
                o.lock().unwrap().push((i, pass.is_some()));
                drop(pass);
            }));
            // Let each waiter queue before the next.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The queue holds two: the third waiter pushed the first out.
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            vec![(0, false), (2, true), (1, true)]
        );
        let s = gate.stats();
        assert_eq!(
            (
                s.admitted_at_once,
                s.admitted_after_queueing,
                s.evicted_oldest
            ),
            (1, 2, 1)
        );
        assert_eq!((s.handshaking_now, s.queued_now), (0, 0));
    }

    #[tokio::test]
    async fn a_waiter_that_waited_too_long_is_refused_and_frees_nothing() {
        let gate = HandshakeGate::new(1, 10, Duration::from_millis(100));
        let first = gate.enter().await.unwrap();
        assert!(gate.enter().await.is_none());
        assert_eq!(gate.stats().rejected_waited_too_long, 1);
        drop(first);
        // The slot came back: the next connection is admitted at once.
        let again = gate.enter().await;
        assert!(again.is_some());
        assert_eq!(gate.stats().handshaking_now, 1);
    }
}
