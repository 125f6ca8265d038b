//! A connection pool over raw connections ([`raw_client`](crate::raw_client)), shaped like
//! the pool of a driver with client-side operation timeouts (the Go driver's): callers
//! wait for one of `size` slots in arrival order, a slot holder takes an idle connection
//! (or opens and authenticates one), and a connection goes back to the pool only after a
//! complete exchange, so a caller that stopped waiting costs no reconnect.
//!
//! Why not the Rust driver behind a gate: at 130% of this cluster's capacity (5,900
//! lookups a second) the driver's own work per operation (server selection, implicit
//! sessions, cluster-time gossip, pool events) took 800–870 ms a second of the
//! generator's one core. The generator then read answers late, its callers timed out
//! while the members had little to do (160–260 ms a second), and the experiment measured
//! the generator instead of the cluster. An exchange here is one encode, one write and
//! one read.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bson::Document;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::raw_client::{authenticate, command, connect, Login};

pub struct RawPool {
    addr: SocketAddr,
    /// Holds the salted password after the first login, as drivers cache it.
    login: Mutex<Login>,
    slots: Arc<Semaphore>,
    idle: Mutex<VecDeque<TcpStream>>,
    /// Hands out the connection idle longest (every connection takes turns) instead of
    /// the one idle shortest (a few stay warm), as a busy pool of many spreads its load.
    rotate: bool,
}

/// The right to use one connection of the pool.
pub type Slot = OwnedSemaphorePermit;

impl RawPool {
    /// A pool of `size` connections to `addr`, all opened now: a burst then waits for
    /// the server, not for the generator's logins.
    pub async fn open(addr: SocketAddr, login: Login, size: usize) -> anyhow::Result<RawPool> {
        Self::open_with(addr, login, size, size, false).await
    }

    /// `connections` connections behind `slots` slots, each exchange on the connection
    /// idle longest: the server sees `slots` commands in flight spread over all of them.
    pub async fn open_rotating(
        addr: SocketAddr,
        login: Login,
        slots: usize,
        connections: usize,
    ) -> anyhow::Result<RawPool> {
        Self::open_with(addr, login, slots, connections, true).await
    }

    async fn open_with(
        addr: SocketAddr,
        login: Login,
        slots: usize,
        connections: usize,
        rotate: bool,
    ) -> anyhow::Result<RawPool> {
        let pool = RawPool {
            addr,
            login: Mutex::new(login),
            slots: Arc::new(Semaphore::new(slots)),
            idle: Mutex::new(VecDeque::with_capacity(connections)),
            rotate,
        };
        for _ in 0..connections {
            let conn = pool.connect().await?;
            pool.idle().push_back(conn);
        }
        Ok(pool)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, VecDeque<TcpStream>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn connect(&self) -> anyhow::Result<TcpStream> {
        let mut login = self.login.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut conn = connect(&self.addr).await?;
        authenticate(&mut conn, &mut login).await?;
        *self.login.lock().unwrap_or_else(|e| e.into_inner()) = login;
        Ok(conn)
    }

    /// Waits for a slot, first come first served (tokio's semaphore is FIFO, and a waiter
    /// that gives up leaves the queue).
    pub async fn slot(&self) -> Slot {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .expect("the pool's semaphore is never closed")
    }

    /// Runs `cmd` on a connection while `slot` is held. A connection whose exchange
    /// failed is dropped; the next caller opens a new one.
    pub async fn run(&self, slot: Slot, cmd: Document) -> anyhow::Result<Document> {
        let idle = match self.rotate {
            true => self.idle().pop_front(),
            false => self.idle().pop_back(),
        };
        let mut conn = match idle {
            Some(c) => c,
            None => self.connect().await?,
        };
        let reply = command(&mut conn, 1, cmd).await?;
        self.idle().push_back(conn);
        drop(slot);
        Ok(reply)
    }
}
