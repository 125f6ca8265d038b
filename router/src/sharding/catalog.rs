//! The cluster catalog on the config server replica set, in the `config` database and in
//! the shapes mongos exposes (`config.shards`, `config.databases`, `config.collections`,
//! `config.chunks`), so the usual tooling reads it. Every change is written with majority
//! write concern, and every read is from the config primary.
//!
//! Concurrent routers agree through unique `_id`s: the first insert of a database or
//! collection wins, the others read what won. A collection becomes sharded at the moment
//! its `config.collections` document is inserted, after its chunks are in place.

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use query::shard_key::ShardKey;
use wire::{ErrorCode, MongoError, MongoResult};

use super::routing::{Chunk, RoutingTable};
use crate::shard_client::{reply_ok, Forward, ShardHandle};

const CLIENT: &str = "router-catalog";
/// Chunk documents inserted per command.
const INSERT_BATCH: usize = 500;

/// Runs `cmd` on the config servers' `config` database; `ok: 0` and write errors become
/// errors.
pub async fn call(config: &ShardHandle, cmd: Document, writes: bool) -> MongoResult<Document> {
    let fwd = Forward {
        writes,
        ..Default::default()
    };
    let (reply, _, _) = config.run("config", &cmd, &fwd, CLIENT).await?;
    reply_ok(reply)
}

/// Every document of `config.<coll>` matching `filter`, following the cursor.
pub async fn find_all(
    handle: &ShardHandle,
    db: &str,
    coll: &str,
    filter: Document,
) -> MongoResult<Vec<Document>> {
    let fwd = Forward::default();
    let first = doc! {"find": coll, "filter": filter, "batchSize": 10_000};
    let (mut reply, member, _) = handle.run(db, &first, &fwd, CLIENT).await?;
    let mut out = Vec::new();
    loop {
        let cursor = reply_ok(reply)?
            .get_document("cursor")
            .cloned()
            .map_err(|_| MongoError::internal("catalog: malformed cursor reply"))?;
        let batch = cursor
            .get_array("firstBatch")
            .or_else(|_| cursor.get_array("nextBatch"))
            .map_err(|_| MongoError::internal("catalog: malformed cursor reply"))?;
        out.extend(batch.iter().filter_map(|d| d.as_document().cloned()));
        let id = cursor.get_i64("id").unwrap_or(0);
        if id == 0 {
            return Ok(out);
        }
        let more = doc! {"getMore": id, "collection": coll, "batchSize": 10_000};
        let pinned = Forward {
            pin: Some(member),
            ..Default::default()
        };
        reply = handle.run(db, &more, &pinned, CLIENT).await?.0;
    }
}

pub async fn shards(config: &ShardHandle) -> MongoResult<Vec<Document>> {
    find_all(config, "config", "shards", Document::new()).await
}

/// Records a shard. Adding the same shard again is accepted; another host under a taken
/// name is not.
pub async fn add_shard(config: &ShardHandle, name: &str, host: &str) -> MongoResult<()> {
    ensure_version(config).await?;
    let existing = find_all(config, "config", "shards", doc! {"_id": name}).await?;
    if let Some(d) = existing.first() {
        if d.get_str("host").ok() == Some(host) {
            return Ok(());
        }
        return Err(MongoError::new(
            ErrorCode::IllegalOperation,
            format!(
                "a shard named {name} already exists with host {}",
                d.get_str("host").unwrap_or_default()
            ),
        ));
    }
    let shard = doc! {
        "_id": name,
        "host": host,
        "state": 1,
        "topologyTime": bson::Timestamp { time: now_secs(), increment: 1 },
    };
    call(
        config,
        doc! {"insert": "shards", "documents": [shard]},
        true,
    )
    .await?;
    Ok(())
}

/// Writes `config.version` (the cluster's id, which tooling such as `sh.status()` reads)
/// unless it exists.
pub async fn ensure_version(config: &ShardHandle) -> MongoResult<()> {
    let version = doc! {"_id": 1, "clusterId": ObjectId::new()};
    match call(
        config,
        doc! {"insert": "version", "documents": [version]},
        true,
    )
    .await
    {
        Err(e) if e.code != ErrorCode::DuplicateKey as i32 => Err(e),
        _ => Ok(()),
    }
}

/// The primary shard recorded for `db`, and the database's version (`version.lastMod`,
/// raised by every `movePrimary`).
pub async fn database_primary(
    config: &ShardHandle,
    db: &str,
) -> MongoResult<Option<(String, i64)>> {
    let found = find_all(config, "config", "databases", doc! {"_id": db}).await?;
    Ok(found.first().and_then(|d| {
        let primary = d.get_str("primary").ok()?.to_string();
        Some((primary, database_version(d)))
    }))
}

/// `version.lastMod` of a `config.databases` entry (1 for one written before versions).
pub fn database_version(entry: &Document) -> i64 {
    match entry
        .get_document("version")
        .ok()
        .and_then(|v| v.get("lastMod"))
    {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        _ => 1,
    }
}

/// Makes `to` the primary shard of `db` at version `last_mod + 1`, if `from` is still its
/// primary at `last_mod` (`movePrimary`'s commit): whether it did.
pub async fn move_primary(
    config: &ShardHandle,
    db: &str,
    from: &str,
    to: &str,
    last_mod: i64,
    owner: &Bson,
) -> MongoResult<bool> {
    let reply = call(
        config,
        doc! {
            "update": "databases",
            "updates": [{
                "q": {
                    "_id": db, "primary": from, "version.lastMod": last_mod,
                    // Not a move a recovery abandoned (`fence_move_primary`).
                    "fencedMoves": {"$ne": owner},
                },
                "u": {"$set": {"primary": to, "version.lastMod": last_mod + 1}},
            }],
        },
        true,
    )
    .await?;
    Ok(reply.get_i32("n").unwrap_or(0) == 1)
}

/// Makes the commit of the `movePrimary` whose lock was `owner` impossible: a recovery
/// abandons it, and its coordinator may only have stalled.
pub async fn fence_move_primary(config: &ShardHandle, db: &str, owner: &Bson) -> MongoResult<()> {
    let update = doc! {"q": {"_id": db}, "u": {"$addToSet": {"fencedMoves": owner}}};
    call(
        config,
        doc! {"update": "databases", "updates": [update]},
        true,
    )
    .await
    .map(|_| ())
}

/// Records `db` with primary `shard`, unless a concurrent router recorded it first: the
/// primary that won either way.
pub async fn create_database(
    config: &ShardHandle,
    db: &str,
    shard: &str,
) -> MongoResult<(String, i64)> {
    let first_version = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(1)
        .max(1);
    let entry = doc! {
        "_id": db,
        "primary": shard,
        "partitioned": false,
        "version": {
            "uuid": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: uuid_bytes() },
            "timestamp": bson::Timestamp { time: now_secs(), increment: 1 },
            // Versions of a database dropped and created again must not repeat: a
            // router that cached the dropped one is refused by the shards it routes to
            // (they keep the dropped version, `databases::drop`).
            "lastMod": first_version,
        },
    };
    match call(
        config,
        doc! {"insert": "databases", "documents": [entry]},
        true,
    )
    .await
    {
        Ok(_) => Ok((shard.to_string(), first_version)),
        Err(e) if e.code == ErrorCode::DuplicateKey as i32 => database_primary(config, db)
            .await?
            .ok_or_else(|| MongoError::internal(format!("database {db} vanished while created"))),
        Err(e) => Err(e),
    }
}

/// The routing table of `ns`, or `None` when it is not sharded. With the table held so
/// far (`cached`), only chunks changed since its version are read (every split, move and
/// commit gives the chunks it changes a version above the collection's); a change that
/// does not fit (another epoch, a gap) makes it read everything.
pub async fn routing_table(
    config: &ShardHandle,
    ns: &str,
    cached: Option<&RoutingTable>,
) -> MongoResult<Option<RoutingTable>> {
    let colls = find_all(config, "config", "collections", doc! {"_id": ns}).await?;
    let Some(coll) = colls.into_iter().next() else {
        return Ok(None);
    };
    let key = ShardKey::parse(
        coll.get_document("key")
            .map_err(|_| MongoError::internal(format!("catalog entry of {ns} has no key")))?,
    )?;
    let epoch = coll
        .get_object_id("lastmodEpoch")
        .unwrap_or_else(|_| ObjectId::new());
    let since = cached.filter(|c| c.epoch == epoch);
    let mut filter = doc! {"ns": ns, "lastmodEpoch": epoch};
    if let Some(c) = since {
        filter.insert("lastmod", doc! {"$gt": c.version});
    }
    let docs = find_all(config, "config", "chunks", filter).await?;
    let mut chunks = docs
        .iter()
        .map(|d| {
            Ok(Chunk {
                min: key.from_document(d.get_document("min").map_err(malformed)?)?,
                max: key.from_document(d.get_document("max").map_err(malformed)?)?,
                shard: d.get_str("shard").map_err(malformed)?.to_string(),
            })
        })
        .collect::<MongoResult<Vec<_>>>()?;
    chunks.sort_by(|a, b| query::order::compare_arrays(&a.min, &b.min));
    super::routing::end_at_next(&mut chunks);
    let newest = docs
        .iter()
        .filter_map(|d| d.get_timestamp("lastmod").ok())
        .max_by(|a, b| query::ownership::order(*a, *b));
    let mut version = newest.unwrap_or(bson::Timestamp {
        time: 1,
        increment: 0,
    });
    if let Some(c) = since {
        if newest.is_none() {
            return Ok(Some(RoutingTable {
                chunks: c.chunks.clone(),
                key,
                ..c.clone_meta()
            }));
        }
        match super::routing::apply_changes(&key, &c.chunks, chunks) {
            Some(merged) => chunks = merged,
            None => return Box::pin(routing_table(config, ns, None)).await,
        }
        version = std::cmp::max_by(version, c.version, |a, b| query::ownership::order(*a, *b));
    }
    if chunks.is_empty() {
        return Err(MongoError::internal(format!(
            "{ns} is sharded but has no chunks"
        )));
    }
    Ok(Some(RoutingTable {
        ns: ns.to_string(),
        unique: coll.get_bool("unique").unwrap_or(false),
        key,
        epoch,
        version,
        chunks,
    }))
}

fn malformed(e: bson::document::ValueAccessError) -> MongoError {
    MongoError::internal(format!("malformed chunk in the catalog: {e}"))
}

/// Records `ns` as sharded with `chunks`. The chunks go in first under a new epoch; the
/// `config.collections` entry, inserted last, makes them live. Returns the entry that
/// won when another router sharded `ns` at the same time.
pub async fn shard_collection(
    config: &ShardHandle,
    ns: &str,
    key: &ShardKey,
    unique: bool,
    chunks: &[Chunk],
) -> MongoResult<Document> {
    let epoch = ObjectId::new();
    let now = bson::Timestamp {
        time: now_secs(),
        increment: 1,
    };
    let uuid = bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: uuid_bytes(),
    };
    let docs: Vec<Document> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            doc! {
                "_id": ObjectId::new(),
                "uuid": uuid.clone(),
                "ns": ns,
                "min": key.to_document(&c.min),
                "max": key.to_document(&c.max),
                "shard": &c.shard,
                "lastmod": bson::Timestamp { time: 1, increment: i as u32 },
                "lastmodEpoch": epoch,
                "onCurrentShardSince": now,
                "history": [{"validAfter": now, "shard": &c.shard}],
            }
        })
        .collect();
    for batch in docs.chunks(INSERT_BATCH) {
        call(
            config,
            doc! {"insert": "chunks", "documents": batch.to_vec()},
            true,
        )
        .await?;
    }
    let entry = doc! {
        "_id": ns,
        "lastmodEpoch": epoch,
        "lastmod": bson::DateTime::now(),
        "timestamp": now,
        "uuid": uuid,
        "key": key.pattern().clone(),
        "unique": unique,
        "noBalance": false,
    };
    match call(
        config,
        doc! {"insert": "collections", "documents": [entry.clone()]},
        true,
    )
    .await
    {
        Ok(_) => Ok(entry),
        Err(e) if e.code == ErrorCode::DuplicateKey as i32 => {
            // Someone else won: our chunks, under an epoch nobody uses, go.
            call(
                config,
                doc! {"delete": "chunks", "deletes": [{"q": {"lastmodEpoch": epoch}, "limit": 0}]},
                true,
            )
            .await?;
            find_all(config, "config", "collections", doc! {"_id": ns})
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| MongoError::internal(format!("{ns} vanished while sharded")))
        }
        Err(e) => Err(e),
    }
}

/// Splits `chunk` of `table` at `middle` (strictly inside it): both halves stay on the
/// chunk's shard, so no data moves. The upper half is inserted first and the chunk then
/// shrunk; in between the two overlap, and routing (the last chunk starting at or below
/// a key) already sends the upper keys to the new half, on the same shard.
pub async fn split_chunk(
    config: &ShardHandle,
    table: &RoutingTable,
    chunk: &Chunk,
    middle: &[Bson],
) -> MongoResult<()> {
    let key = &table.key;
    let min = key.to_document(&chunk.min);
    let found = find_all(
        config,
        "config",
        "chunks",
        doc! {"ns": &table.ns, "lastmodEpoch": table.epoch, "min": min.clone()},
    )
    .await?;
    let Some(old) = found.into_iter().next() else {
        return Err(MongoError::new(
            ErrorCode::OperationFailed,
            format!("the chunk of {} starting at {min} changed; retry", table.ns),
        ));
    };
    let lastmod = old.get_timestamp("lastmod").unwrap_or(bson::Timestamp {
        time: 1,
        increment: 0,
    });
    // Above every chunk of the collection, so routers refreshing from their version see it.
    let base = std::cmp::max_by(lastmod, table.version, |a, b| {
        query::ownership::order(*a, *b)
    });
    let bumped = bson::Timestamp {
        time: base.time,
        increment: base.increment + 1,
    };
    let mut upper = old.clone();
    upper.insert("_id", ObjectId::new());
    upper.insert("min", key.to_document(middle));
    // The chunk's end as routing reads it (`routing::end_at_next`), not as stored: an
    // entry a stopped split left overlapping is not copied.
    upper.insert("max", key.to_document(&chunk.max));
    upper.insert("lastmod", bumped);
    call(
        config,
        doc! {"insert": "chunks", "documents": [upper]},
        true,
    )
    .await?;
    let shrink = doc! {
        "q": {"_id": old.get("_id").cloned().unwrap_or(Bson::Null)},
        "u": {"$set": {"max": key.to_document(middle), "lastmod": bumped}},
    };
    call(config, doc! {"update": "chunks", "updates": [shrink]}, true).await?;
    Ok(())
}

/// Commits a migration: the chunk starting at `chunk.min` now belongs to `to`, at a new
/// major version above every chunk of the collection. Fails unless the chunk is still
/// the donor's under the same epoch (the commit happens once).
pub async fn commit_move(
    config: &ShardHandle,
    table: &RoutingTable,
    chunk: &Chunk,
    to: &str,
) -> MongoResult<()> {
    let key = &table.key;
    let now = bson::Timestamp {
        time: now_secs(),
        increment: 1,
    };
    let lastmod = bson::Timestamp {
        time: table.version.time + 1,
        increment: 0,
    };
    let update = doc! {
        "q": {
            "ns": &table.ns, "lastmodEpoch": table.epoch,
            "min": key.to_document(&chunk.min), "shard": &chunk.shard,
            // Unchanged since the migration began: not split, and not fenced off by a
            // router that recovered this migration from its stalled coordinator.
            "lastmod": {"$lte": table.version},
        },
        "u": {
            // `max` as routing reads it: an entry a stopped split left overlapping
            // (`routing::end_at_next`) is put right when it moves.
            "$set": {
                "shard": to, "lastmod": lastmod, "onCurrentShardSince": now,
                "max": key.to_document(&chunk.max),
            },
            "$push": {"history": {"$each": [{"validAfter": now, "shard": to}], "$position": 0}},
        },
    };
    let reply = call(config, doc! {"update": "chunks", "updates": [update]}, true).await?;
    if super::scatter::number(&reply, "nModified") != 1 {
        return Err(MongoError::new(
            ErrorCode::ConflictingOperationInProgress,
            format!(
                "the chunk of {} moved or split during the migration",
                table.ns
            ),
        ));
    }
    Ok(())
}

/// Makes the commit of an abandoned migration of `chunk` impossible: the chunk, still the
/// donor's, gets a minor version above `table`'s, which a coordinator that began at or
/// before `table` cannot commit over. Returns whether the chunk was still the donor's.
pub async fn fence_migration(
    config: &ShardHandle,
    table: &RoutingTable,
    chunk: &Chunk,
) -> MongoResult<bool> {
    let fenced = bson::Timestamp {
        time: table.version.time,
        increment: table.version.increment + 1,
    };
    let update = doc! {
        "q": {
            "ns": &table.ns, "lastmodEpoch": table.epoch,
            "min": table.key.to_document(&chunk.min), "shard": &chunk.shard,
        },
        "u": {"$max": {"lastmod": fenced}},
    };
    let reply = call(config, doc! {"update": "chunks", "updates": [update]}, true).await?;
    Ok(super::scatter::number(&reply, "n") == 1)
}

/// Whether the balancer runs (`config.settings` `{_id: "balancer"}`; on by default, as
/// in MongoDB).
pub async fn balancer_mode(config: &ShardHandle) -> MongoResult<String> {
    let found = setting(config, "balancer").await?;
    Ok(found
        .as_ref()
        .and_then(|d| d.get_str("mode").ok())
        .unwrap_or("full")
        .to_string())
}

/// Sets the balancer's mode (`"full"` or `"off"`).
pub async fn set_balancer_mode(config: &ShardHandle, mode: &str) -> MongoResult<()> {
    change_setting(
        config,
        "balancer",
        doc! {"$set": {"mode": mode, "stopped": mode == "off"}},
    )
    .await
}

/// Applies `update` to the `config.settings` document `id` (created if missing).
async fn change_setting(config: &ShardHandle, id: &str, update: Document) -> MongoResult<()> {
    let update = doc! {"q": {"_id": id}, "u": update, "upsert": true};
    call(
        config,
        doc! {"update": "settings", "updates": [update]},
        true,
    )
    .await
    .map(|_| ())
}

/// The `config.settings` document `id`, if set.
async fn setting(config: &ShardHandle, id: &str) -> MongoResult<Option<Document>> {
    Ok(find_all(config, "config", "settings", doc! {"_id": id})
        .await?
        .into_iter()
        .next())
}

/// Whether a balancer round runs now: the config server primary's balancer marks
/// `config.locks` `{_id: "balancer"}` for the length of a round.
pub async fn balancer_busy(config: &ShardHandle) -> MongoResult<bool> {
    let found = find_all(config, "config", "locks", doc! {"_id": "balancer"}).await?;
    Ok(!found.is_empty())
}

pub async fn count_balancer_round(config: &ShardHandle) -> MongoResult<()> {
    change_setting(config, "balancer", doc! {"$inc": {"rounds": 1_i64}}).await
}

/// Balancer rounds finished in the cluster.
pub async fn balancer_rounds(config: &ShardHandle) -> MongoResult<i64> {
    Ok(setting(config, "balancer")
        .await?
        .map(|d| super::scatter::number(&d, "rounds"))
        .unwrap_or(0))
}

/// The largest a chunk may grow before the balancer splits it (`config.settings`
/// `{_id: "chunksize", value: <MB>}`, 128 MB by default as in MongoDB).
pub async fn max_chunk_bytes(config: &ShardHandle) -> MongoResult<i64> {
    let mb = setting(config, "chunksize")
        .await?
        .map(|d| super::scatter::number(&d, "value"))
        .filter(|mb| *mb > 0)
        .unwrap_or(128);
    Ok(mb << 20)
}

/// Marks shard `name` as draining (`removeShard` began): the balancer empties it.
pub async fn set_draining(config: &ShardHandle, name: &str) -> MongoResult<()> {
    let update = doc! {"q": {"_id": name}, "u": {"$set": {"draining": true}}};
    call(config, doc! {"update": "shards", "updates": [update]}, true)
        .await
        .map(|_| ())
}

/// Chunks (of every collection) on shard `name`.
pub async fn chunks_on(config: &ShardHandle, name: &str) -> MongoResult<i64> {
    let reply = call(
        config,
        doc! {"count": "chunks", "query": {"shard": name}},
        false,
    )
    .await?;
    Ok(super::scatter::number(&reply, "n"))
}

/// Databases whose primary shard is `name`.
pub async fn databases_on(config: &ShardHandle, name: &str) -> MongoResult<Vec<String>> {
    Ok(
        find_all(config, "config", "databases", doc! {"primary": name})
            .await?
            .iter()
            .filter_map(|d| d.get_str("_id").ok().map(str::to_string))
            .collect(),
    )
}

/// Forgets a drained shard.
pub async fn remove_shard(config: &ShardHandle, name: &str) -> MongoResult<()> {
    delete(config, "shards", doc! {"_id": name, "draining": true}).await
}

/// Adds shard `shard` to zone `zone` (or removes it).
pub async fn set_shard_zone(
    config: &ShardHandle,
    shard: &str,
    zone: &str,
    add: bool,
) -> MongoResult<()> {
    let op = if add { "$addToSet" } else { "$pull" };
    let reply = call(
        config,
        doc! {"update": "shards", "updates": [{"q": {"_id": shard}, "u": {op: {"tags": zone}}}]},
        true,
    )
    .await?;
    if super::scatter::number(&reply, "n") == 0 {
        return Err(MongoError::new(
            ErrorCode::ShardNotFound,
            format!("shard {shard} not found"),
        ));
    }
    Ok(())
}

/// The zone ranges of `ns`: `{min, max, tag}` documents of `config.tags`.
pub async fn zone_ranges(config: &ShardHandle, ns: &str) -> MongoResult<Vec<Document>> {
    find_all(config, "config", "tags", doc! {"ns": ns}).await
}

/// Records that keys of `ns` from `min` to `max` belong to `zone`, or (`None`) forgets
/// the range.
pub async fn set_zone_range(
    config: &ShardHandle,
    ns: &str,
    min: &Document,
    max: &Document,
    zone: Option<&str>,
) -> MongoResult<()> {
    match zone {
        Some(zone) => {
            let range = doc! {
                "_id": {"ns": ns, "min": min.clone()},
                "ns": ns, "min": min.clone(), "max": max.clone(), "tag": zone,
            };
            call(
                config,
                doc! {"update": "tags", "updates": [{"q": {"_id": {"ns": ns, "min": min.clone()}}, "u": range, "upsert": true}]},
                true,
            )
            .await?;
        }
        None => {
            delete(
                config,
                "tags",
                doc! {"ns": ns, "min": min.clone(), "max": max.clone()},
            )
            .await?;
        }
    }
    Ok(())
}

/// Removes what the catalog says about collection `ns`.
pub async fn drop_collection(config: &ShardHandle, ns: &str) -> MongoResult<()> {
    delete(config, "collections", doc! {"_id": ns}).await?;
    delete(config, "chunks", doc! {"ns": ns}).await
}

/// Removes what the catalog says about database `db` and its collections.
pub async fn drop_database(config: &ShardHandle, db: &str) -> MongoResult<()> {
    let prefix = namespaces_of(db);
    delete(config, "collections", doc! {"_id": prefix.clone()}).await?;
    delete(config, "chunks", doc! {"ns": prefix}).await?;
    delete(config, "databases", doc! {"_id": db}).await
}

/// The sharded collections of database `db`.
pub async fn sharded_collections(config: &ShardHandle, db: &str) -> MongoResult<Vec<String>> {
    let found = find_all(
        config,
        "config",
        "collections",
        doc! {"_id": namespaces_of(db)},
    )
    .await?;
    Ok(found
        .iter()
        .filter_map(|c| c.get_str("_id").ok().map(str::to_string))
        .collect())
}

/// A regular expression matching the namespaces of database `db`.
fn namespaces_of(db: &str) -> Bson {
    Bson::RegularExpression(bson::Regex {
        pattern: format!("^{}\\.", regex_escape(db)),
        options: String::new(),
    })
}

/// Deletes every document of `config.<coll>` matching `q`.
pub async fn delete(config: &ShardHandle, coll: &str, q: Document) -> MongoResult<()> {
    call(
        config,
        doc! {"delete": coll, "deletes": [{"q": q, "limit": 0}]},
        true,
    )
    .await
    .map(|_| ())
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\^$.|?*+()[]{}".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

/// A random (version 4) UUID.
fn uuid_bytes() -> Vec<u8> {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    b.to_vec()
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_names_are_escaped_for_prefix_regexes() {
        assert_eq!(super::regex_escape("a.b"), "a\\.b");
        assert_eq!(super::regex_escape("x$"), "x\\$");
    }
}
