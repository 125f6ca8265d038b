//! The rest of the API under the same faults: what applications do besides single-key
//! registers and lists. One worker per site on `chaos.counters` and `chaos.docs`, and one
//! DDL worker on scratch collections in `chaos_api`.
//!
//! * Counters: `$inc` by update (upsert), by findAndModify, and at `wtimeout: 1` (whose
//!   writeConcernError leaves the outcome unknown, as MongoDB's does).
//! * Documents with a unique index on `u` and a multikey index on `tags`: inserts,
//!   inserts of a `u` another document holds (each must fail with 11000), `$push`,
//!   `$pull`, moves of `u` to a new value, deletes by delete and by findAndModify.
//! * Reads: finds on secondaries and on the nearest member, and aggregations.
//! * DDL: create a collection, index it, write to it, drop the index, drop it.
//!
//! [`crate::check::effects`] judges the counters and documents after the run, and
//! [`crate::check::errors`] every failure's code.

use std::future::IntoFuture;
use std::time::Duration;

use bson::{doc, Document};
use mongodb::options::{
    Acknowledgment, ReadPreference, ReadPreferenceOptions, ReturnDocument, SelectionCriteria,
    WriteConcern,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::history::{Event, Op};
use crate::workload::{outcome, pause, timed, Clock, OpError, Worker};

pub const DB: &str = "chaos";
pub const COUNTERS: &str = "counters";
pub const DOCS: &str = "docs";
pub const COUNTER_KEYS: u32 = 4;
/// The DDL worker's database (dropped before the run).
pub const DDL_DB: &str = "chaos_api";
const DDL_COLLECTIONS: u32 = 3;

/// One worker's view of its own documents: what it may delete, change or collide with.
struct Mine {
    id: i64,
    /// The document's `u`, while it is certain: its insert and every move of `u` were
    /// acknowledged (an unknown-outcome move may still land later, so after one the
    /// document is never collided with again).
    u: Option<i64>,
}

/// What one operation did: the key it is filed under, what it was, how it ended.
type Done = (u32, Op, Result<(), OpError>);

/// The API worker of one site: its collections, its random choices and its documents.
struct ApiWorker {
    id: u32,
    counters: mongodb::Collection<Document>,
    docs: mongodb::Collection<Document>,
    rng: StdRng,
    mine: Vec<Mine>,
    seq: i64,
}

/// The API worker of one site: runs until `stop`, returns its events.
pub async fn worker(spec: Worker) -> Vec<Event> {
    let db = spec.client.database(DB);
    let mut w = ApiWorker {
        id: spec.id,
        counters: db.collection(COUNTERS),
        docs: db.collection(DOCS),
        rng: StdRng::seed_from_u64(spec.seed),
        mine: Vec::new(),
        seq: 0,
    };
    let mut events = Vec::new();
    while !spec.stop.is_cancelled() {
        let roll: u32 = w.rng.gen_range(0..100);
        let invoked = spec.clock.now();
        let done = match roll {
            0..=24 => w.increment().await,
            25..=44 => w.insert().await,
            45..=52 => match w.insert_duplicate().await {
                Some(done) => done,
                None => continue,
            },
            53..=69 if !w.mine.is_empty() => w.modify().await,
            70..=77 if !w.mine.is_empty() => w.delete().await,
            78..=91 => w.find_elsewhere().await,
            _ => w.aggregate().await,
        };
        let (key, op, result) = done;
        events.push(event(spec.id, key, op, invoked, spec.clock.now(), &result));
        pause(spec.think, &spec.stop).await;
    }
    events
}

impl ApiWorker {
    /// A value unique in the run: the worker's id in the high bits.
    fn fresh(&mut self) -> i64 {
        self.seq += 1;
        ((self.id as i64) << 32) | self.seq
    }

    /// `$inc` of a counter: by update, by findAndModify, or at `wtimeout: 1`.
    async fn increment(&mut self) -> Done {
        let key = self.rng.gen_range(0..COUNTER_KEYS);
        let filter = doc! {"_id": key as i64};
        let inc = doc! {"$inc": {"n": 1}};
        let c = &self.counters;
        let r = match self.rng.gen_range(0..3) {
            0 => timed(c.update_one(filter, inc).upsert(true).into_future())
                .await
                .map(drop),
            1 => {
                let modify = c
                    .find_one_and_update(filter, inc)
                    .upsert(true)
                    .return_document(ReturnDocument::After);
                timed(modify.into_future()).await.map(drop)
            }
            _ => {
                let wc = WriteConcern::builder()
                    .w(Acknowledgment::Majority)
                    .w_timeout(Duration::from_millis(1))
                    .build();
                let update = c.update_one(filter, inc).upsert(true).write_concern(wc);
                timed(update.into_future()).await.map(drop)
            }
        };
        (key, Op::Inc { by: 1 }, r)
    }

    async fn insert(&mut self) -> Done {
        let id = self.fresh();
        let doc = doc! {"_id": id, "u": id, "tags": ["a"]};
        let r = timed(self.docs.insert_one(doc).into_future())
            .await
            .map(drop);
        self.mine.push(Mine {
            id,
            u: r.is_ok().then_some(id),
        });
        (0, Op::Insert { id }, r)
    }

    /// An insert of a `u` one of this worker's documents certainly holds (`None` while
    /// there is none).
    async fn insert_duplicate(&mut self) -> Option<Done> {
        let u = self.mine.iter().rev().find_map(|m| m.u)?;
        let id = self.fresh();
        let r = timed(self.docs.insert_one(doc! {"_id": id, "u": u}).into_future())
            .await
            .map(drop);
        Some((0, Op::DupInsert { id }, r))
    }

    /// `$push`, `$pull`, or a move of `u`, on one of this worker's documents.
    async fn modify(&mut self) -> Done {
        let i = self.rng.gen_range(0..self.mine.len());
        let target = self.mine[i].id;
        let (update, moved) = match self.rng.gen_range(0..3) {
            0 => (doc! {"$push": {"tags": self.rng.gen_range(0..50i64)}}, None),
            1 => (doc! {"$pull": {"tags": "a"}}, None),
            _ => {
                let u = self.fresh();
                (doc! {"$set": {"u": u}}, Some(u))
            }
        };
        let r = timed(
            self.docs
                .update_one(doc! {"_id": target}, update)
                .into_future(),
        )
        .await
        .map(drop);
        if let Some(u) = moved {
            let m = &mut self.mine[i];
            m.u = m.u.and(r.is_ok().then_some(u));
        }
        (0, Op::Modify { id: target }, r)
    }

    /// One of this worker's documents deleted, by delete or by findAndModify.
    async fn delete(&mut self) -> Done {
        let gone = self
            .mine
            .swap_remove(self.rng.gen_range(0..self.mine.len()));
        let filter = doc! {"_id": gone.id};
        let r = if self.rng.gen_bool(0.5) {
            timed(self.docs.delete_one(filter).into_future())
                .await
                .map(drop)
        } else {
            timed(self.docs.find_one_and_delete(filter).into_future())
                .await
                .map(drop)
        };
        (0, Op::Delete { id: gone.id }, r)
    }

    /// A find on a secondary or on the nearest member.
    async fn find_elsewhere(&mut self) -> Done {
        let (what, mode) = if self.rng.gen_bool(0.5) {
            ("secondary find", secondary_preferred())
        } else {
            ("nearest find", nearest())
        };
        let id = self.mine.last().map(|m| m.id).unwrap_or(0);
        let find = self
            .docs
            .find_one(doc! {"_id": id})
            .selection_criteria(mode);
        let r = timed(find.into_future()).await.map(drop);
        (0, Op::Query { what }, r)
    }

    /// The counters' total by `$group`, on the nearest member.
    async fn aggregate(&mut self) -> Done {
        let pipeline = vec![doc! {"$group": {"_id": null, "total": {"$sum": "$n"}}}];
        let counters = &self.counters;
        let r = timed(async {
            use futures::TryStreamExt;
            let cursor = counters.aggregate(pipeline).selection_criteria(nearest());
            cursor.await?.try_collect::<Vec<_>>().await
        })
        .await
        .map(drop);
        let what = "aggregate $group";
        (0, Op::Query { what }, r)
    }
}

/// The DDL worker: creates, indexes, writes, unindexes and drops scratch collections in
/// turn until `stop`.
pub async fn ddl_worker(
    id: u32,
    client: mongodb::Client,
    clock: Clock,
    think: Duration,
    stop: CancellationToken,
) -> Vec<Event> {
    let db = client.database(DDL_DB);
    let mut events = Vec::new();
    let mut round: u32 = 0;
    while !stop.is_cancelled() {
        let name = format!("scratch{}", round % DDL_COLLECTIONS);
        round += 1;
        let coll = db.collection::<Document>(&name);
        let steps: [(&'static str, u8); 5] = [
            ("create", 0),
            ("createIndexes", 1),
            ("insert", 2),
            ("dropIndexes", 3),
            ("drop", 4),
        ];
        for (what, step) in steps {
            if stop.is_cancelled() {
                break;
            }
            let invoked = clock.now();
            let r = match step {
                0 => timed(db.create_collection(&name).into_future()).await,
                1 => {
                    let model = mongodb::IndexModel::builder().keys(doc! {"k": 1}).build();
                    timed(coll.create_index(model).into_future())
                        .await
                        .map(drop)
                }
                2 => timed(
                    coll.insert_many((0..5).map(|k| doc! {"k": k}))
                        .into_future(),
                )
                .await
                .map(drop),
                3 => timed(coll.drop_index("k_1").into_future()).await,
                _ => timed(coll.drop().into_future()).await,
            };
            events.push(event(id, 0, Op::Ddl { what }, invoked, clock.now(), &r));
            pause(think, &stop).await;
        }
    }
    events
}

fn event(
    client: u32,
    key: u32,
    op: Op,
    invoked: u64,
    completed: u64,
    result: &Result<(), OpError>,
) -> Event {
    let (outcome, code) = outcome(&op, result);
    Event {
        client,
        key,
        op,
        outcome,
        invoked,
        completed,
        code,
    }
}

fn secondary_preferred() -> SelectionCriteria {
    SelectionCriteria::ReadPreference(ReadPreference::SecondaryPreferred {
        options: Some(ReadPreferenceOptions::default()),
    })
}

fn nearest() -> SelectionCriteria {
    SelectionCriteria::ReadPreference(ReadPreference::Nearest {
        options: Some(ReadPreferenceOptions::default()),
    })
}

/// The counters and documents after the run (majority reads through one router).
pub async fn read_state(
    client: &mongodb::Client,
) -> anyhow::Result<(Vec<(u32, i64)>, Vec<(i64, Document)>)> {
    use futures::TryStreamExt;
    use mongodb::options::ReadConcern;
    let db = client.database(DB);
    let mut all = Vec::new();
    for name in [COUNTERS, DOCS] {
        let coll = db.collection::<Document>(name);
        let found: Vec<Document> = coll
            .find(doc! {})
            .read_concern(ReadConcern::majority())
            .await?
            .try_collect()
            .await?;
        all.push(found);
    }
    let docs = all.pop().unwrap_or_default();
    let counters = all.pop().unwrap_or_default();
    let as_i64 = |v: Option<&bson::Bson>| match v {
        Some(bson::Bson::Int32(n)) => Some(i64::from(*n)),
        Some(bson::Bson::Int64(n)) => Some(*n),
        _ => None,
    };
    let counters = counters
        .iter()
        .filter_map(|d| Some((as_i64(d.get("_id"))? as u32, as_i64(d.get("n"))?)))
        .collect();
    let docs = docs
        .into_iter()
        .filter_map(|d| Some((as_i64(d.get("_id"))?, d)))
        .collect();
    Ok((counters, docs))
}
