//! Elle's list-append workload over a cluster, for the transaction tests: clients run
//! transactions that read whole lists and append values unique in the run, and the
//! history goes through the snapshot-isolation checker (`chaos::check::txn_lists`).

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use chaos::check::si::{MicroOp, Txn};
use chaos::history::Outcome;
use rand::{Rng, SeedableRng};

/// A run: its keys, its start (history times count from it), and how many transactions
/// its clients have finished.
pub struct Run {
    pub keys: u32,
    pub start: Instant,
    pub done: Arc<AtomicUsize>,
    next_value: Arc<AtomicI64>,
    latest: Arc<Latest>,
}

/// The newest operation time of a committed transaction, over every client: the final
/// reads start after it. A transaction through one router reads at a time its first
/// shard picks, and without it could predate a commit acknowledged through another
/// router on another shard moments before (as a new MongoDB session without causal
/// consistency could); a client passes such a time on to read its writes.
#[derive(Default)]
struct Latest(std::sync::Mutex<Option<bson::Timestamp>>);

impl Latest {
    fn advance(&self, t: Option<bson::Timestamp>) {
        let Some(t) = t else { return };
        let mut latest = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if latest.is_none_or(|l| (l.time, l.increment) < (t.time, t.increment)) {
            *latest = Some(t);
        }
    }

    fn get(&self) -> Option<bson::Timestamp> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Run {
    pub fn new(keys: u32) -> Run {
        Run {
            keys,
            start: Instant::now(),
            done: Arc::default(),
            next_value: Arc::new(AtomicI64::new(1)),
            latest: Arc::default(),
        }
    }

    /// The lists, empty, to insert before the run.
    pub fn empty_lists(&self) -> Vec<Document> {
        (0..self.keys)
            .map(|k| doc! {"_id": i64::from(k), "l": []})
            .collect()
    }

    /// Runs `attempts` transactions on `coll` from each of `clients` (client `c` is
    /// history client `c`); their histories.
    pub fn spawn(
        &self,
        clients: &[mongodb::Client],
        coll: (&str, &str),
        attempts: usize,
        seed: u64,
    ) -> Vec<tokio::task::JoinHandle<Vec<Txn>>> {
        clients
            .iter()
            .enumerate()
            .map(|(c, client)| {
                let coll = client.database(coll.0).collection::<Document>(coll.1);
                let (client, keys, start) = (client.clone(), self.keys, self.start);
                let (done, next_value) = (self.done.clone(), self.next_value.clone());
                let latest = self.latest.clone();
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 31 + c as u64);
                    let mut history = Vec::new();
                    for _ in 0..attempts {
                        let plan: Vec<(bool, u32)> = (0..rng.gen_range(1..=4))
                            .map(|_| (rng.gen_bool(0.5), rng.gen_range(0..keys)))
                            .collect();
                        let invoked = start.elapsed().as_nanos() as u64;
                        let mut values =
                            std::iter::from_fn(|| Some(next_value.fetch_add(1, Ordering::Relaxed)));
                        let (ops, outcome) = match client.start_session().await {
                            Ok(mut s) => {
                                let txn = chaos::txn_workload::one_txn_in(
                                    &mut s,
                                    &coll,
                                    &plan,
                                    &mut values,
                                );
                                let (ops, outcome) = txn.await;
                                if outcome == Outcome::Ok {
                                    latest.advance(s.operation_time());
                                }
                                (ops, outcome)
                            }
                            Err(_) => (Vec::new(), Outcome::Fail),
                        };
                        history.push(Txn {
                            client: c as u32,
                            ops,
                            outcome,
                            invoked,
                            completed: start.elapsed().as_nanos() as u64,
                        });
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    history
                })
            })
            .collect()
    }

    /// Waits until the clients have finished `count` transactions (or 60 s).
    pub async fn after(&self, count: usize) -> usize {
        for _ in 0..1200 {
            if self.done.load(Ordering::Relaxed) >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.done.load(Ordering::Relaxed)
    }

    /// The clients' histories, each bounded to 300 s.
    pub async fn histories(tasks: Vec<tokio::task::JoinHandle<Vec<Txn>>>) -> Vec<Txn> {
        let mut history = Vec::new();
        for t in tasks {
            let h = tokio::time::timeout(Duration::from_secs(300), t)
                .await
                .expect("a client's transactions end in bounded time")
                .expect("a client's task");
            history.extend(h);
        }
        history
    }

    /// The lists after the run, read in one transaction through `client`: the history's
    /// last transaction (client `id`).
    pub async fn final_reads(&self, client: &mongodb::Client, coll: (&str, &str), id: u32) -> Txn {
        let coll = client.database(coll.0).collection::<Document>(coll.1);
        let mut s = client.start_session().await.unwrap();
        if let Some(t) = self.latest.get() {
            s.advance_operation_time(t);
        }
        s.start_transaction().await.unwrap();
        let mut reads = Vec::new();
        for k in 0..self.keys {
            let d = coll
                .find_one(doc! {"_id": i64::from(k)})
                .session(&mut s)
                .await
                .unwrap();
            reads.push(MicroOp::Read {
                key: k,
                value: Some(chaos::txn_workload::list_of(d.as_ref())),
            });
        }
        s.commit_transaction().await.unwrap();
        let now = self.start.elapsed().as_nanos() as u64;
        Txn {
            client: id,
            ops: reads,
            outcome: Outcome::Ok,
            invoked: now,
            completed: now,
        }
    }
}

/// Checks a run's history with its final reads: valid under snapshot isolation, no
/// committed append lost, and at least `min_commits` commits, half of them with appends
/// (so that a workload whose writes all fail cannot pass on its reads alone).
pub fn assert_valid(history: Vec<Txn>, last: Txn, seed: u64, min_commits: usize) {
    let report = chaos::check::txn_lists::check(history, last);
    let writers = report.committed_writers;
    println!("{}", report.summary());
    assert!(report.ok(), "seed {seed}: {}", report.summary());
    assert!(
        report.si.committed >= min_commits && writers >= min_commits / 2,
        "seed {seed}: too few commits ({writers} with appends): {}",
        report.summary()
    );
}
