//! The operations in progress on a member, for `currentOp` and `killOp`.
//!
//! Each command the service runs is registered for as long as it runs. Its entry says
//! which phase it is in (queued for a ticket, running, waiting for replication) and since
//! when, so `currentOp` shows every wait while it is happening, not only after.
//!
//! A command is stopped by setting its kill flag: `killOp`, or the caller going away (a
//! router whose client hung up drops the call). A queued command leaves the queue at
//! once; a running one stops at its next yield point, because every `Deadline::check`
//! (scans, sorts, batches, before a write is proposed) also checks the flag of the
//! thread's current operation.
//!
//! The registry is striped by the registering thread, so the two lock operations per
//! command rarely meet another core's (a lock every core takes is a cache line every core
//! fights over).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bson::{doc, Document};
use parking_lot::Mutex;
use tokio::sync::Notify;
use wire::{op_display, ErrorCode, MongoError, MongoResult};

use super::admission::{Class, Ticket};

const STRIPES: usize = 16;

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Waiting for a read or write ticket.
    Queued = 0,
    Running = 1,
    /// Waiting for its write to be replicated to the members its write concern needs.
    Replicating = 2,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Queued,
            2 => Phase::Replicating,
            _ => Phase::Running,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Running => "running",
            Phase::Replicating => "replicating",
        }
    }
}

/// Why an operation was told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kill {
    None = 0,
    /// `killOp`.
    Killed = 1,
    /// Its caller went away.
    CallerGone = 2,
}

/// What a command declares when it registers.
pub struct Describe {
    /// The command's name (its first field).
    pub name: String,
    /// The router's id for the operation (0 when the caller has none).
    pub router_op: u64,
    /// The client the router serves (address), for logs and `currentOp`.
    pub client: String,
    pub db: String,
    /// The command document as received (shared, not copied).
    pub command: bytes::Bytes,
    /// When the caller stops waiting (checked again before each write is proposed).
    pub deadline: Option<Instant>,
}

/// One operation in progress.
pub struct Op {
    pub opid: u64,
    pub describe: Describe,
    arrived: Instant,
    arrived_wall: SystemTime,
    phase: AtomicU8,
    /// Microseconds spent in each phase before the current one (indexed by `Phase`).
    spent_us: [AtomicU64; 3],
    /// Microseconds after arrival when the current phase began.
    phase_since_us: AtomicU64,
    kill: AtomicU8,
    killed: Notify,
    /// The ticket the operation runs with, while it has one.
    ticket: Mutex<Option<Ticket>>,
    /// Times it gave its ticket back for others to run and queued again.
    yields: AtomicU64,
}

impl Op {
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    pub fn kill_reason(&self) -> Kill {
        match self.kill.load(Ordering::Relaxed) {
            1 => Kill::Killed,
            2 => Kill::CallerGone,
            _ => Kill::None,
        }
    }

    /// Tells the operation to stop (the first reason given sticks).
    pub fn kill(&self, why: Kill) {
        if self
            .kill
            .compare_exchange(0, why as u8, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.killed.notify_waiters();
        }
    }

    /// Resolves once the operation is told to stop.
    pub async fn killed(&self) {
        let notified = self.killed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.kill_reason() != Kill::None {
            return;
        }
        notified.await;
    }

    fn since_arrival_us(&self) -> u64 {
        self.arrived.elapsed().as_micros() as u64
    }

    /// Times the operation gave its ticket back at a yield point.
    pub fn yields(&self) -> u64 {
        self.yields.load(Ordering::Relaxed)
    }

    /// Moves to `next`, closing the time spent in the current phase.
    fn enter(&self, next: Phase) {
        let now = self.since_arrival_us();
        let since = self.phase_since_us.swap(now, Ordering::Relaxed);
        let current = self.phase();
        self.spent_us[current as usize].fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        self.phase.store(next as u8, Ordering::Relaxed);
    }

    /// The ticket was granted (`None` for commands that need none): the operation runs
    /// with it from now until [`Op::release_ticket`].
    pub fn granted(&self, ticket: Option<Ticket>) {
        *self.ticket.lock() = ticket;
        self.enter(Phase::Running);
    }

    /// Gives the ticket back (the operation's work is done).
    pub fn release_ticket(&self) {
        self.ticket.lock().take();
    }

    /// The error a stopped operation answers with (MongoDB's codes).
    pub fn interrupted(&self) -> Option<MongoError> {
        match self.kill_reason() {
            Kill::None => None,
            Kill::Killed => Some(MongoError::new(
                ErrorCode::Interrupted,
                "operation was interrupted",
            )),
            Kill::CallerGone => Some(MongoError::new(
                ErrorCode::ClientDisconnect,
                "operation was interrupted because a client disconnected",
            )),
        }
    }

    /// Where the operation's time went so far: queued, running, replicating (µs).
    pub fn waits(&self) -> (u64, u64, u64) {
        let mut spent: [u64; 3] = std::array::from_fn(|i| self.spent_us[i].load(Ordering::Relaxed));
        let since = self.phase_since_us.load(Ordering::Relaxed);
        spent[self.phase() as usize] += self.since_arrival_us().saturating_sub(since);
        (spent[0], spent[1], spent[2])
    }

    /// The `currentOp` entry, in mongod's shape plus where the operation waits.
    pub fn to_document(&self, host: &str) -> Document {
        let command = op_display::summarize(&self.describe.command);
        let name = &self.describe.name;
        let ns = op_display::namespace(&self.describe.db, &command);
        let (queued, running, replicating) = self.waits();
        let micros = self.arrived.elapsed().as_micros() as i64;
        let mut d = doc! {
            "type": "op",
            "host": host,
            "active": true,
            "opid": self.opid as i64,
            "currentOpTime": bson::DateTime::from_system_time(SystemTime::now()).try_to_rfc3339_string().unwrap_or_default(),
            "startedAt": bson::DateTime::from_system_time(self.arrived_wall),
            "secs_running": micros / 1_000_000,
            "microsecs_running": micros,
            "op": op_display::op_kind(name),
            "ns": ns,
            "command": command,
            "client": self.describe.client.as_str(),
            "phase": self.phase().name(),
            "waits": {
                "shardQueueMicros": queued as i64,
                "shardExecMicros": running as i64,
                "replicationMicros": replicating as i64,
            },
            "killPending": self.kill_reason() != Kill::None,
            "numYields": self.yields.load(Ordering::Relaxed) as i64,
        };
        if self.describe.router_op != 0 {
            d.insert("routerOpid", self.describe.router_op as i64);
        }
        d
    }
}

struct Stripe {
    next: u64,
    ops: HashMap<u64, Arc<Op>>,
}

/// Every operation in progress on the member.
pub struct Registry {
    stripes: Vec<Mutex<Stripe>>,
    /// Operations that stopped because they were told to (`killOp`, caller gone).
    interrupted: AtomicUsize,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            stripes: (0..STRIPES)
                .map(|_| {
                    Mutex::new(Stripe {
                        next: 1,
                        ops: HashMap::new(),
                    })
                })
                .collect(),
            interrupted: AtomicUsize::new(0),
        }
    }
}

thread_local! {
    /// The stripe this thread registers in.
    static STRIPE: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES
    };
    /// The operation this thread is running.
    static CURRENT: RefCell<Option<Arc<Op>>> = const { RefCell::new(None) };
    /// The kind of thread running the current operation.
    static RUNS_ON: Cell<RunsOn> = const { Cell::new(RunsOn::Blocking) };
}

/// The kind of thread an operation runs on, which decides whether it may block at a
/// yield point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunsOn {
    /// A blocking-pool thread: it may block to queue for its ticket again.
    Blocking,
    /// A runtime worker (point reads run inline, see `point_read`). Blocking it would
    /// stall every task the worker runs, and tokio panics on `block_on` there, so the
    /// operation keeps its ticket to the end: a point read's end is near.
    Worker,
}

/// [`blocking_wait`] for a wait given as `&mut dyn FnMut` (storage's waits for prepared
/// transactions, `storage::prepare_wait::set_blocker`).
pub fn blocking_wait_dyn(wait: &mut dyn FnMut()) {
    blocking_wait(wait)
}

/// Runs `wait`, a wait that may last (for another thread's outcome), from an operation on
/// any thread. On a runtime worker it runs under `block_in_place`: the worker's other
/// tasks move to another thread meanwhile. Those include this member's Raft traffic, which
/// the awaited outcome may need, so blocking the worker outright could wait for itself.
pub fn blocking_wait<R>(wait: impl FnOnce() -> R) -> R {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if RUNS_ON.with(Cell::get) == RunsOn::Worker && multi_thread {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}

/// An operation's place in the registry; dropping the last handle removes it.
pub struct Registered {
    registry: Arc<Registry>,
    pub op: Arc<Op>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let stripe = (self.op.opid % STRIPES as u64) as usize;
        self.registry.stripes[stripe]
            .lock()
            .ops
            .remove(&self.op.opid);
    }
}

impl Registry {
    /// Registers an arriving operation (phase: queued).
    pub fn register(self: &Arc<Self>, describe: Describe) -> Arc<Registered> {
        let stripe = STRIPE.with(|s| *s);
        let mut s = self.stripes[stripe].lock();
        let opid = s.next * STRIPES as u64 + stripe as u64;
        s.next += 1;
        let op = Arc::new(Op {
            opid,
            describe,
            arrived: Instant::now(),
            arrived_wall: SystemTime::now(),
            phase: AtomicU8::new(Phase::Queued as u8),
            spent_us: Default::default(),
            phase_since_us: AtomicU64::new(0),
            kill: AtomicU8::new(Kill::None as u8),
            killed: Notify::new(),
            ticket: Mutex::new(None),
            yields: AtomicU64::new(0),
        });
        s.ops.insert(opid, op.clone());
        Arc::new(Registered {
            registry: self.clone(),
            op,
        })
    }

    /// Every operation in progress, oldest first.
    pub fn all(&self) -> Vec<Arc<Op>> {
        let mut ops: Vec<Arc<Op>> = self
            .stripes
            .iter()
            .flat_map(|s| s.lock().ops.values().cloned().collect::<Vec<_>>())
            .collect();
        ops.sort_by_key(|o| o.arrived);
        ops
    }

    /// Tells operation `opid` to stop; false when no such operation is running.
    pub fn kill(&self, opid: u64) -> bool {
        let stripe = (opid % STRIPES as u64) as usize;
        let op = self.stripes[stripe].lock().ops.get(&opid).cloned();
        match op {
            Some(op) => {
                op.kill(Kill::Killed);
                true
            }
            None => false,
        }
    }

    /// How many operations stopped early because they were told to.
    pub fn interrupted_total(&self) -> usize {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// Counts one operation that stopped because it was told to.
    pub fn count_interrupted(&self) {
        self.interrupted.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `f` with `op` as this thread's current operation (its kill flag is then checked
/// at every `Deadline::check`), on a thread of the kind `runs_on` says. The previous
/// operation is put back even if `f` panics: point reads run on a runtime worker
/// (`point_read`), which goes on to run other tasks.
pub fn run_as<R>(op: &Arc<Registered>, runs_on: RunsOn, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<Op>>, RunsOn);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = old);
            RUNS_ON.with(|r| r.set(self.1));
        }
    }
    let _restore = Restore(
        CURRENT.with(|c| c.replace(Some(op.op.clone()))),
        RUNS_ON.with(|r| r.replace(runs_on)),
    );
    f()
}

/// The thread's current operation was told to stop: its error.
pub fn check_interrupted() -> MongoResult<()> {
    CURRENT.with(
        |c| match c.borrow().as_ref().and_then(|op| op.interrupted()) {
            Some(e) => Err(e),
            None => Ok(()),
        },
    )
}

/// Before a write is proposed: the current operation must not have been told to stop,
/// nor have run out of time (a write nobody waits for is not replicated).
pub fn check_before_write() -> MongoResult<()> {
    CURRENT.with(|c| {
        let current = c.borrow();
        let Some(op) = current.as_ref() else {
            return Ok(());
        };
        if let Some(e) = op.interrupted() {
            return Err(e);
        }
        match op.describe.deadline {
            Some(t) if Instant::now() >= t => Err(MongoError::new(
                ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit before its write was replicated",
            )),
            _ => Ok(()),
        }
    })
}

/// Runs `f` (a wait for replication) as the current operation's replicating phase.
pub fn replicating<R>(f: impl FnOnce() -> R) -> R {
    let op = CURRENT.with(|c| c.borrow().clone());
    let Some(op) = op else {
        return f();
    };
    op.enter(Phase::Replicating);
    let r = f();
    op.enter(Phase::Running);
    r
}

/// How long a read holds its ticket before it lets queued operations go first.
pub const YIELD_AFTER: Duration = Duration::from_millis(10);

/// A yield point of a long read: once the current operation has held its read ticket for
/// [`YIELD_AFTER`] and others are queued for one, it gives the ticket back and queues
/// again at the back of the line, so a short read never waits for a whole long scan
/// (mongod's scans yield the same way). Writes never yield here: a write may hold a
/// collection lock, and a lock holder waiting for a ticket could wait for itself. An
/// operation on a runtime worker ([`RunsOn::Worker`]) never yields either.
pub fn yield_point() -> MongoResult<()> {
    let Some(op) = CURRENT.with(|c| c.borrow().clone()) else {
        return Ok(());
    };
    if RUNS_ON.with(Cell::get) == RunsOn::Worker {
        return Ok(());
    }
    let pool = {
        let mut slot = op.ticket.lock();
        let due = slot.as_ref().is_some_and(|t| {
            t.class() == Class::Read && t.held() >= YIELD_AFTER && t.pool().queued() > 0
        });
        if !due {
            return Ok(());
        }
        let ticket = slot.take().expect("checked above");
        let pool = ticket.pool().clone();
        drop(ticket);
        pool
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(());
    };
    op.enter(Phase::Queued);
    op.yields.fetch_add(1, Ordering::Relaxed);
    let deadline = crate::control::deadline::Deadline(op.describe.deadline);
    let again = runtime.block_on(async {
        tokio::select! {
            t = pool.readmit(deadline) => t,
            _ = op.killed() => Err(op.interrupted().expect("killed operations have a reason")),
        }
    })?;
    op.granted(Some(again));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(cmd: Document) -> Describe {
        Describe {
            name: cmd.keys().next().cloned().unwrap_or_default(),
            router_op: 7,
            client: "127.0.0.1:1".into(),
            db: "test".into(),
            command: bson::to_vec(&cmd).unwrap().into(),
            deadline: None,
        }
    }

    #[test]
    fn an_operation_is_listed_while_it_runs_and_gone_after() {
        let registry = Arc::new(Registry::default());
        let op = registry.register(describe(doc! {"find": "c", "filter": {"a": 1}}));
        let listed = registry.all();
        assert_eq!(listed.len(), 1);
        let d = listed[0].to_document("me");
        assert_eq!(d.get_str("ns").unwrap(), "test.c");
        assert_eq!(d.get_str("op").unwrap(), "query");
        assert_eq!(d.get_str("phase").unwrap(), "queued");
        assert_eq!(d.get_i64("routerOpid").unwrap(), 7);
        op.op.granted(None);
        assert_eq!(registry.all()[0].phase(), Phase::Running);
        drop(listed);
        drop(op);
        assert!(registry.all().is_empty());
    }

    #[test]
    fn a_killed_operation_stops_at_its_next_check() {
        let registry = Arc::new(Registry::default());
        let op = registry.register(describe(doc! {"find": "c"}));
        run_as(&op, RunsOn::Blocking, || {
            assert!(check_interrupted().is_ok());
            assert!(registry.kill(op.op.opid));
            let e = check_interrupted().unwrap_err();
            assert_eq!(e.code, ErrorCode::Interrupted as i32);
        });
        // Outside the operation, nothing is interrupted.
        assert!(check_interrupted().is_ok());
        assert!(!registry.kill(op.op.opid + 1));
    }

    #[test]
    fn a_panicking_operation_leaves_the_thread_as_it_found_it() {
        let registry = Arc::new(Registry::default());
        let op = registry.register(describe(doc! {"find": "c"}));
        assert!(registry.kill(op.op.opid));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_as(&op, RunsOn::Blocking, || panic!("a bug in a command"))
        }));
        assert!(panicked.is_err());
        // The killed operation is no longer this thread's: the next command run here
        // (a runtime worker runs point reads) is not taken for it.
        assert!(check_interrupted().is_ok());
    }

    #[test]
    fn replication_time_is_its_own_wait() {
        let registry = Arc::new(Registry::default());
        let op = registry.register(describe(doc! {"insert": "c"}));
        op.op.granted(None);
        run_as(&op, RunsOn::Blocking, || {
            replicating(|| std::thread::sleep(std::time::Duration::from_millis(20)))
        });
        let (_, _, replicated) = op.op.waits();
        assert!(replicated >= 20_000, "{replicated}");
        assert_eq!(op.op.phase(), Phase::Running);
    }

    /// A ticket from a one-ticket `class` pool, held by a new registered operation.
    async fn holding(
        class: Class,
    ) -> (
        Arc<Registry>,
        Arc<Registered>,
        Arc<crate::control::admission::Pool>,
    ) {
        let pool = crate::control::admission::Pool::new(class, 1);
        let registry = Arc::new(Registry::default());
        let op = registry.register(describe(doc! {"find": "big"}));
        let t = pool
            .admit(crate::control::deadline::Deadline::default())
            .await
            .unwrap();
        op.op.granted(Some(t));
        (registry, op, pool)
    }

    /// Spawns a command that queues for `pool`'s ticket; waits until it is queued.
    async fn queue_behind(
        pool: &Arc<crate::control::admission::Pool>,
    ) -> tokio::task::JoinHandle<()> {
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move {
                drop(
                    pool.admit(crate::control::deadline::Deadline::default())
                        .await
                        .unwrap(),
                );
            })
        };
        while pool.queued() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        waiter
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_wait_on_the_only_worker_lets_the_runtime_go_on() {
        let (_registry, op, _pool) = holding(Class::Read).await;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // The outcome comes from a task that needs a worker, as a member's Raft traffic
        // does: blocking the only worker outright would wait forever.
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            tx.send(()).unwrap();
        });
        let waited = tokio::spawn(async move {
            run_as(&op, RunsOn::Worker, || {
                blocking_wait(|| rx.recv_timeout(std::time::Duration::from_secs(60)))
            })
        });
        assert_eq!(waited.await.unwrap(), Ok(()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_read_lets_a_queued_read_go_first() {
        let (_registry, long, pool) = holding(Class::Read).await;
        let short = queue_behind(&pool).await;
        let yields = {
            let long = long.clone();
            tokio::task::spawn_blocking(move || {
                run_as(&long, RunsOn::Blocking, || {
                    // Not yet due while held for less than YIELD_AFTER. On a loaded
                    // machine this thread may start later than that, and then this
                    // point yields instead of the next: once either way.
                    let held = long.op.ticket.lock().as_ref().map(|t| t.held());
                    yield_point().unwrap();
                    if held.is_some_and(|h| h < YIELD_AFTER / 2) {
                        let early = long.op.yields.load(Ordering::Relaxed);
                        assert_eq!(early, 0, "yielded before it was due");
                    }
                    std::thread::sleep(YIELD_AFTER);
                    yield_point().unwrap();
                });
                long.op.yields.load(Ordering::Relaxed)
            })
            .await
            .unwrap()
        };
        assert_eq!(yields, 1);
        // The long read holds the only ticket again, so the queued one can finish only if
        // it ran while the long one yielded. Awaited, not polled once: its task may still
        // be completing when the long read is back (CI saw `is_finished()` false).
        assert!(
            long.op.ticket.lock().is_some(),
            "the long read got a ticket back"
        );
        let ran = tokio::time::timeout(std::time::Duration::from_secs(30), short).await;
        assert!(
            ran.is_ok_and(|r| r.is_ok()),
            "the queued read ran while the long one yielded"
        );
        assert_eq!(long.op.phase(), Phase::Running);
        assert!(long.op.waits().0 > 0, "its second wait is queue time");
    }

    /// Holds a `class` ticket past [`YIELD_AFTER`] with another operation queued, reaches
    /// a yield point on a thread of kind `runs_on`, and checks that the ticket was kept.
    async fn keeps_its_ticket(class: Class, runs_on: RunsOn) {
        let (_registry, long, pool) = holding(class).await;
        let queued = queue_behind(&pool).await;
        let long2 = long.clone();
        let hold = move || {
            run_as(&long2, runs_on, || {
                std::thread::sleep(YIELD_AFTER * 2);
                yield_point().unwrap();
            })
        };
        match runs_on {
            RunsOn::Blocking => tokio::task::spawn_blocking(hold).await,
            RunsOn::Worker => tokio::spawn(async move { hold() }).await,
        }
        .unwrap();
        assert_eq!(long.op.yields.load(Ordering::Relaxed), 0);
        assert!(!queued.is_finished());
        long.op.release_ticket();
        queued.await.unwrap();
    }

    /// A point read runs on a runtime worker: there it must not queue again, which would
    /// block the worker (tokio panics; CI's migration test hit it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_on_a_runtime_worker_keeps_its_ticket() {
        keeps_its_ticket(Class::Read, RunsOn::Worker).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_never_yields_its_ticket() {
        keeps_its_ticket(Class::Write, RunsOn::Blocking).await;
    }
}
