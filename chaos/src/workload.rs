//! The workload every fault runs under: clients in each site doing single-document
//! operations through their own site's router with the defaults a driver user gets
//! (`w: "majority"`, retryable writes), each recorded as an [`Event`].
//!
//! * Registers (`chaos.registers`, a few keys): linearizable reads, overwrites and
//!   compare-and-set, for the linearizability checker.
//! * Lists (`chaos.lists`): `$push` of values unique in the run, for the lost- and
//!   duplicated-write checker.
//! * The rest of the API, one worker per site and a DDL worker ([`crate::api_workload`]).
//!
//! Every worker keeps its own events and hands them over at the end: no shared counter
//! on the clients' hot path.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use mongodb::options::ReadConcern;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;
use wire::ErrorCode;

use crate::history::{Event, History, Nanos, Op, Outcome};

pub const REGISTER_KEYS: u32 = 6;
pub const LIST_KEYS: u32 = 6;
/// Longer than a failover, so most operations that fail do so with a server answer.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy)]
pub struct Shape {
    pub workers_per_site: u32,
    /// Pause between one worker's operations, bounding the history's size.
    pub think: Duration,
}

/// The clock every event is stamped with.
#[derive(Clone, Copy)]
pub struct Clock(pub Instant);

impl Clock {
    pub fn now(&self) -> Nanos {
        self.0.elapsed().as_nanos() as Nanos
    }
}

/// What a worker of the run gets: its id, its site's client, its seed, the run's clock,
/// its pause between operations, and the signal to stop.
#[derive(Clone)]
pub struct Worker {
    pub id: u32,
    pub client: mongodb::Client,
    pub seed: u64,
    pub clock: Clock,
    pub think: Duration,
    pub stop: CancellationToken,
}

/// Runs until `stop`; returns every worker's events.
pub async fn run(
    clients: Vec<mongodb::Client>,
    shape: Shape,
    seed: u64,
    clock: Clock,
    stop: CancellationToken,
) -> History {
    let mut tasks = Vec::new();
    let seeded = |id: u32| seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // The API workers' ids follow the register and list workers'.
    let mut next_id = clients.len() as u32 * shape.workers_per_site;
    for (site, client) in clients.iter().enumerate() {
        tasks.push(tokio::spawn(crate::api_workload::worker(Worker {
            id: next_id,
            client: client.clone(),
            seed: seeded(next_id),
            clock,
            think: shape.think,
            stop: stop.clone(),
        })));
        next_id += 1;
        if site == 0 {
            tasks.push(tokio::spawn(crate::api_workload::ddl_worker(
                next_id,
                client.clone(),
                clock,
                shape.think * 5,
                stop.clone(),
            )));
            next_id += 1;
        }
    }
    for (site, client) in clients.into_iter().enumerate() {
        for w in 0..shape.workers_per_site {
            let id = site as u32 * shape.workers_per_site + w;
            let db = client.database("chaos");
            let stop = stop.clone();
            tasks.push(tokio::spawn(worker(id, db, shape, seeded(id), clock, stop)));
        }
    }
    let mut history = History::default();
    for t in tasks {
        if let Ok(events) = t.await {
            history.events.extend(events);
        }
    }
    history
}

async fn worker(
    id: u32,
    db: mongodb::Database,
    shape: Shape,
    seed: u64,
    clock: Clock,
    stop: CancellationToken,
) -> Vec<Event> {
    let registers = db.collection::<Document>("registers");
    let lists = db.collection::<Document>("lists");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = Vec::new();
    let mut seq: i64 = 0;
    // The last value this worker saw in each register: its next CAS expects it.
    let mut seen = vec![None::<i64>; REGISTER_KEYS as usize];
    while !stop.is_cancelled() {
        seq += 1;
        // Unique in the run: worker id in the high bits.
        let value = ((id as i64) << 32) | seq;
        let roll: u32 = rng.gen_range(0..100);
        let invoked = clock.now();
        let (key, op, result) = if roll < 40 {
            let key = rng.gen_range(0..LIST_KEYS);
            let r = timed(
                lists
                    .update_one(doc! {"_id": key as i64}, doc! {"$push": {"vals": value}})
                    .upsert(true)
                    .into_future(),
            )
            .await;
            (key, Op::Append { value }, r.map(|_| None))
        } else {
            let key = rng.gen_range(0..REGISTER_KEYS);
            if roll < 65 {
                let r = timed(
                    registers
                        .find_one(doc! {"_id": key as i64})
                        .read_concern(ReadConcern::linearizable())
                        .into_future(),
                )
                .await;
                let read = r
                    .as_ref()
                    .ok()
                    .map(|d| d.as_ref().and_then(|d| d.get_i64("v").ok()));
                if let Some(v) = read {
                    seen[key as usize] = v;
                }
                (
                    key,
                    Op::Read {
                        value: read.flatten(),
                    },
                    r.map(|_| None),
                )
            } else if roll < 85 || seen[key as usize].is_none() {
                let r = timed(
                    registers
                        .update_one(doc! {"_id": key as i64}, doc! {"$set": {"v": value}})
                        .upsert(true)
                        .into_future(),
                )
                .await;
                (key, Op::Write { value }, r.map(|_| None))
            } else {
                let from = seen[key as usize].unwrap_or_default();
                let r = timed(
                    registers
                        .update_one(
                            doc! {"_id": key as i64, "v": from},
                            doc! {"$set": {"v": value}},
                        )
                        .into_future(),
                )
                .await;
                let swapped = r.as_ref().ok().map(|u| u.matched_count == 1);
                (
                    key,
                    Op::Cas {
                        from,
                        to: value,
                        swapped: swapped.unwrap_or(false),
                    },
                    r.map(|_| swapped),
                )
            }
        };
        let (outcome, code) = outcome(&op, &result);
        events.push(Event {
            client: id,
            key,
            op,
            outcome,
            invoked,
            completed: clock.now(),
            code,
        });
        pause(shape.think, &stop).await;
    }
    events
}

/// How an operation ended, and its error code (0: none).
pub(crate) fn outcome<T>(op: &Op, result: &Result<T, OpError>) -> (Outcome, i32) {
    match result {
        Ok(_) => (Outcome::Ok, 0),
        // A read that failed told us nothing.
        Err(e) if matches!(op, Op::Read { .. } | Op::Query { .. }) => (Outcome::Fail, e.code()),
        // A duplicate key is a definite refusal.
        Err(e) if e.code() == ErrorCode::DuplicateKey as i32 => (Outcome::Fail, e.code()),
        // A write that failed otherwise may still have happened (the driver retried, or
        // the reply was lost).
        Err(e) => (Outcome::Unknown, e.code()),
    }
}

/// Waits `think` between two operations of a worker, unless the run stops.
pub(crate) async fn pause(think: Duration, stop: &CancellationToken) {
    if !think.is_zero() {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(think) => {}
        }
    }
}

/// Why an operation did not succeed.
pub enum OpError {
    Timeout,
    Driver(mongodb::error::Error),
}

impl OpError {
    /// The server's error code, or -1.
    pub fn code(&self) -> i32 {
        match self {
            OpError::Driver(e) => match *e.kind {
                mongodb::error::ErrorKind::Command(ref c) => c.code,
                mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(
                    ref w,
                )) => w.code,
                mongodb::error::ErrorKind::Write(
                    mongodb::error::WriteFailure::WriteConcernError(ref w),
                ) => w.code,
                _ => -1,
            },
            OpError::Timeout => -1,
        }
    }
}

pub(crate) async fn timed<T>(
    f: impl std::future::Future<Output = mongodb::error::Result<T>>,
) -> Result<T, OpError> {
    match tokio::time::timeout(OP_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(OpError::Driver(e)),
        Err(_) => Err(OpError::Timeout),
    }
}

/// Every list's values, read back after the run (majority read, through one router).
pub async fn read_lists(client: &mongodb::Client) -> anyhow::Result<Vec<(u32, Vec<i64>)>> {
    use futures::TryStreamExt;
    let coll = client.database("chaos").collection::<Document>("lists");
    let docs: Vec<Document> = coll
        .find(doc! {})
        .read_concern(ReadConcern::majority())
        .await?
        .try_collect()
        .await?;
    let mut out = Vec::new();
    for d in docs {
        let key = match d.get("_id") {
            Some(bson::Bson::Int32(k)) => *k as u32,
            Some(bson::Bson::Int64(k)) => *k as u32,
            _ => continue,
        };
        let vals = d
            .get_array("vals")
            .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
            .unwrap_or_default();
        out.push((key, vals));
    }
    Ok(out)
}
