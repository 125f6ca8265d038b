//! A sharded collection's routing table: its shard key and its chunks (key ranges, each
//! owned by one shard), read from `config.chunks`.

use bson::oid::ObjectId;
use bson::{Bson, Document};
use query::ownership::{coalesce, Ownership, ShardVersion};
use query::shard_key::{KeyValue, ShardKey};
use std::cmp::Ordering;
use wire::MongoResult;

#[derive(Debug, Clone)]
pub struct Chunk {
    /// Inclusive lower bound.
    pub min: KeyValue,
    /// Exclusive upper bound.
    pub max: KeyValue,
    pub shard: String,
}

#[derive(Debug)]
pub struct RoutingTable {
    pub ns: String,
    pub key: ShardKey,
    pub unique: bool,
    pub epoch: ObjectId,
    /// The collection version: the highest chunk version (`lastmod`).
    pub version: bson::Timestamp,
    /// Sorted by `min`, covering the key space from MinKey to MaxKey without gaps.
    pub chunks: Vec<Chunk>,
}

impl RoutingTable {
    /// The shard owning key value `key`.
    pub fn shard_for_key(&self, key: &[Bson]) -> &str {
        &self.chunk_for_key(key).shard
    }

    /// The shard a new document goes to.
    pub fn shard_for_doc(&self, doc: &Document) -> MongoResult<&str> {
        Ok(self.shard_for_key(&self.key.value_of(doc)?))
    }

    /// The shards holding documents `filter` may match, in name order.
    pub fn shards_for(&self, filter: &Document) -> Vec<String> {
        let ranges = self.key.ranges(filter);
        let mut out: Vec<String> = self
            .chunks
            .iter()
            .filter(|c| ranges.iter().any(|r| r.overlaps_chunk(&c.min, &c.max)))
            .map(|c| c.shard.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The version a command routed with this table carries (`shardVersion`).
    pub fn shard_version(&self) -> ShardVersion {
        ShardVersion {
            epoch: self.epoch,
            version: self.version,
        }
    }

    /// What `shard` owns at this version: its chunks, joined where they touch.
    pub fn ownership_of(&self, shard: &str) -> Ownership {
        let ranges = self
            .chunks
            .iter()
            .filter(|c| c.shard == shard)
            .map(|c| (c.min.clone(), c.max.clone()))
            .collect();
        Ownership {
            key: self.key.clone(),
            version: self.shard_version(),
            ranges: coalesce(ranges),
            critical: None,
        }
    }

    /// The chunk holding key value `key`.
    pub fn chunk_for_key(&self, key: &[Bson]) -> &Chunk {
        let i = self
            .chunks
            .partition_point(|c| query::order::compare_arrays(&c.min, key) != Ordering::Greater);
        &self.chunks[i.saturating_sub(1)]
    }

    /// Every shard owning a chunk, in name order.
    pub fn all_shards(&self) -> Vec<String> {
        let mut out: Vec<String> = self.chunks.iter().map(|c| c.shard.clone()).collect();
        out.sort();
        out.dedup();
        out
    }
}

impl RoutingTable {
    /// A table with this one's collection fields and no chunks.
    pub fn clone_meta(&self) -> RoutingTable {
        RoutingTable {
            ns: self.ns.clone(),
            key: self.key.clone(),
            unique: self.unique,
            epoch: self.epoch,
            version: self.version,
            chunks: Vec::new(),
        }
    }
}

/// Makes each chunk of `chunks` (sorted by `min`) end where the next begins. A split
/// writes its upper chunk before it shrinks the lower one (`catalog::split_chunk`), so a
/// splitter that stops in between (a killed router, a config server failover) leaves the
/// lower chunk overlapping the upper one. Both are on the same shard and the split is
/// what was meant: read this way, a later migration of the lower chunk moves only its
/// own range, and the catalog entries that overlap still route every key once.
pub fn end_at_next(chunks: &mut [Chunk]) {
    for i in 1..chunks.len() {
        if query::order::compare_arrays(&chunks[i - 1].max, &chunks[i].min).is_gt() {
            chunks[i - 1].max = chunks[i].min.clone();
        }
    }
}

/// `cached` chunks with `changed` ones (read since the cached version) in place of those
/// they overlap; `None` unless the result covers the key space without gaps or overlaps
/// (a change missed in between: read everything again).
pub fn apply_changes(key: &ShardKey, cached: &[Chunk], changed: Vec<Chunk>) -> Option<Vec<Chunk>> {
    let cmp = query::order::compare_arrays;
    let overlaps =
        |a: &Chunk, b: &Chunk| cmp(&a.min, &b.max).is_lt() && cmp(&b.min, &a.max).is_lt();
    // Chunks are split, never merged: a changed chunk that starts before a cached one and
    // ends after that one's start is an entry a stopped split left overlapping (see
    // `end_at_next`), which only a full read puts right.
    let swallows =
        |n: &Chunk, c: &Chunk| cmp(&n.min, &c.min).is_lt() && cmp(&c.min, &n.max).is_lt();
    if changed
        .iter()
        .any(|n| cached.iter().any(|c| swallows(n, c)))
    {
        return None;
    }
    let mut chunks: Vec<Chunk> = cached
        .iter()
        .filter(|c| !changed.iter().any(|n| overlaps(c, n)))
        .cloned()
        .collect();
    chunks.extend(changed);
    chunks.sort_by(|a, b| cmp(&a.min, &b.min));
    let starts = chunks.first().is_some_and(|c| c.min == key.global_min());
    let ends = chunks.last().is_some_and(|c| c.max == key.global_max());
    let contiguous = chunks.windows(2).all(|w| w[0].max == w[1].min);
    (starts && ends && contiguous).then_some(chunks)
}

/// Initial chunks for a newly sharded collection. A hashed key on an empty collection is
/// split evenly over the hash space, `per_shard` chunks per shard; otherwise one chunk
/// covers everything and stays on the primary shard (where the data already is).
pub fn initial_chunks(
    key: &ShardKey,
    shards: &[String],
    primary: &str,
    per_shard: usize,
    empty: bool,
) -> Vec<Chunk> {
    let whole = || {
        vec![Chunk {
            min: key.global_min(),
            max: key.global_max(),
            shard: primary.to_string(),
        }]
    };
    // Only a key whose first field is hashed spreads evenly by hash.
    let first_hashed = key
        .pattern()
        .iter()
        .next()
        .is_some_and(|(_, v)| v.as_str() == Some("hashed"));
    if !empty || !first_hashed || shards.is_empty() {
        return whole();
    }
    let n = (shards.len() * per_shard.max(1)) as u128;
    let rest = key.fields().len() - 1;
    let bound = |i: u128| -> KeyValue {
        // Evenly spaced points of the signed 64-bit hash space.
        let v = (i * (1u128 << 64) / n) as u64 as i64 ^ i64::MIN;
        std::iter::once(Bson::Int64(v))
            .chain(std::iter::repeat_n(Bson::MinKey, rest))
            .collect()
    };
    (0..n)
        .map(|i| Chunk {
            min: if i == 0 { key.global_min() } else { bound(i) },
            max: if i + 1 == n {
                key.global_max()
            } else {
                bound(i + 1)
            },
            shard: shards[(i as usize) / per_shard.max(1)].clone(),
        })
        .collect()
}

/// A zone's key range and the shards in the zone.
pub struct ZoneRange {
    pub min: KeyValue,
    pub max: KeyValue,
    pub shards: Vec<String>,
}

/// Initial chunks that follow zones: each zone range becomes a chunk on a shard of its
/// zone (round robin when a zone has several), and the gaps between ranges become chunks
/// on the primary shard. `zones` must not overlap.
pub fn zoned_chunks(key: &ShardKey, zones: &mut [ZoneRange], primary: &str) -> Vec<Chunk> {
    zones.sort_by(|a, b| query::order::compare_arrays(&a.min, &b.min));
    let mut chunks = Vec::new();
    let mut at = key.global_min();
    let mut used: std::collections::HashMap<String, usize> = Default::default();
    for z in zones.iter() {
        if query::order::compare_arrays(&at, &z.min) == Ordering::Less {
            chunks.push(Chunk {
                min: at.clone(),
                max: z.min.clone(),
                shard: primary.to_string(),
            });
        }
        let turn = used.entry(z.shards.join(",")).or_default();
        let shard = z
            .shards
            .get(*turn % z.shards.len().max(1))
            .cloned()
            .unwrap_or_else(|| primary.to_string());
        *turn += 1;
        chunks.push(Chunk {
            min: z.min.clone(),
            max: z.max.clone(),
            shard,
        });
        at = z.max.clone();
    }
    if query::order::compare_arrays(&at, &key.global_max()) == Ordering::Less {
        chunks.push(Chunk {
            min: at,
            max: key.global_max(),
            shard: primary.to_string(),
        });
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn chunk(min: Bson, max: Bson, shard: &str) -> Chunk {
        Chunk {
            min: vec![min],
            max: vec![max],
            shard: shard.into(),
        }
    }

    #[test]
    fn changed_chunks_replace_the_ones_they_cover() {
        let key = ShardKey::parse(&doc! {"k": 1}).unwrap();
        let cached = vec![
            chunk(Bson::MinKey, Bson::Int32(10), "a"),
            chunk(Bson::Int32(10), Bson::MaxKey, "a"),
        ];
        // The upper chunk split at 20 and its upper half moved to b.
        let changed = vec![
            chunk(Bson::Int32(10), Bson::Int32(20), "a"),
            chunk(Bson::Int32(20), Bson::MaxKey, "b"),
        ];
        let merged = apply_changes(&key, &cached, changed).unwrap();
        let shards: Vec<&str> = merged.iter().map(|c| c.shard.as_str()).collect();
        assert_eq!(shards, ["a", "a", "b"]);
        // Only the moved half read (its split missed): a gap, so read everything.
        let gap = vec![chunk(Bson::Int32(20), Bson::MaxKey, "b")];
        assert!(apply_changes(&key, &cached, gap).is_none());
        // A stopped split's lower entry, still ending at max, changed (moved): it would
        // swallow the upper chunk, so read everything.
        let stale = vec![chunk(Bson::MinKey, Bson::MaxKey, "b")];
        assert!(apply_changes(&key, &cached, stale).is_none());
    }

    #[test]
    fn a_half_done_split_reads_as_the_split() {
        // The upper chunk [20, max) is written; the lower one still ends at max.
        let mut chunks = vec![
            chunk(Bson::MinKey, Bson::Int32(10), "a"),
            chunk(Bson::Int32(10), Bson::MaxKey, "b"),
            chunk(Bson::Int32(20), Bson::MaxKey, "b"),
        ];
        end_at_next(&mut chunks);
        let ranges: Vec<(Bson, Bson)> = chunks
            .iter()
            .map(|c| (c.min[0].clone(), c.max[0].clone()))
            .collect();
        assert_eq!(
            ranges,
            [
                (Bson::MinKey, Bson::Int32(10)),
                (Bson::Int32(10), Bson::Int32(20)),
                (Bson::Int32(20), Bson::MaxKey),
            ]
        );
    }

    fn table(key: Document, chunks: Vec<Chunk>) -> RoutingTable {
        RoutingTable {
            version: bson::Timestamp {
                time: 1,
                increment: 0,
            },
            ns: "db.c".into(),
            key: ShardKey::parse(&key).unwrap(),
            unique: false,
            epoch: ObjectId::new(),
            chunks,
        }
    }

    #[test]
    fn hashed_chunks_cover_the_space_in_order() {
        let key = ShardKey::parse(&doc! {"_id": "hashed"}).unwrap();
        let shards = vec!["s0".to_string(), "s1".to_string()];
        let chunks = initial_chunks(&key, &shards, "s0", 2, true);
        assert_eq!(chunks.len(), 4);
        assert_eq!(chunks[0].min, vec![Bson::MinKey]);
        assert_eq!(chunks[3].max, vec![Bson::MaxKey]);
        for w in chunks.windows(2) {
            assert_eq!(w[0].max, w[1].min);
            assert_eq!(
                query::order::compare_arrays(&w[0].min, &w[1].min),
                Ordering::Less
            );
        }
        assert_eq!(
            chunks.iter().map(|c| c.shard.as_str()).collect::<Vec<_>>(),
            ["s0", "s0", "s1", "s1"]
        );
        // Documents spread over both shards.
        let t = table(doc! {"_id": "hashed"}, chunks);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..64 {
            seen.insert(t.shard_for_doc(&doc! {"_id": i}).unwrap().to_string());
        }
        assert_eq!(seen.len(), 2);
        assert_eq!(t.shards_for(&doc! {"_id": 5}).len(), 1);
        assert_eq!(t.shards_for(&doc! {"x": 5}).len(), 2);
    }

    #[test]
    fn zones_become_chunks_and_gaps_stay_on_the_primary() {
        let key = ShardKey::parse(&doc! {"site": 1, "n": 1}).unwrap();
        let range = |site: &str, next: &str, shard: &str| ZoneRange {
            min: vec![Bson::from(site), Bson::MinKey],
            max: vec![Bson::from(next), Bson::MinKey],
            shards: vec![shard.to_string()],
        };
        let mut zones = vec![range("B", "C", "s1"), range("A", "B", "s0")];
        let chunks = zoned_chunks(&key, &mut zones, "s0");
        let shards: Vec<&str> = chunks.iter().map(|c| c.shard.as_str()).collect();
        assert_eq!(shards, ["s0", "s0", "s1", "s0"]);
        assert_eq!(chunks[0].min, key.global_min());
        assert_eq!(chunks[3].max, key.global_max());
        for w in chunks.windows(2) {
            assert_eq!(w[0].max, w[1].min);
        }
        let t = table(doc! {"site": 1, "n": 1}, chunks);
        assert_eq!(t.shard_for_doc(&doc! {"site": "B", "n": 5}).unwrap(), "s1");
        assert_eq!(t.shard_for_doc(&doc! {"site": "A", "n": 5}).unwrap(), "s0");
        assert_eq!(t.shards_for(&doc! {"site": "B"}), vec!["s1"]);
    }

    #[test]
    fn ranged_keys_route_by_range() {
        let chunks = vec![
            Chunk {
                min: vec![Bson::MinKey],
                max: vec![Bson::Int32(100)],
                shard: "s0".into(),
            },
            Chunk {
                min: vec![Bson::Int32(100)],
                max: vec![Bson::MaxKey],
                shard: "s1".into(),
            },
        ];
        let t = table(doc! {"n": 1}, chunks);
        assert_eq!(t.shard_for_doc(&doc! {"n": 99}).unwrap(), "s0");
        assert_eq!(t.shard_for_doc(&doc! {"n": 100}).unwrap(), "s1");
        assert_eq!(t.shard_for_doc(&doc! {"x": 1}).unwrap(), "s0");
        assert_eq!(t.shards_for(&doc! {"n": {"$gte": 150}}), vec!["s1"]);
        assert_eq!(t.shards_for(&doc! {"n": {"$lt": 50}}), vec!["s0"]);
        assert_eq!(t.shards_for(&doc! {"n": {"$in": [1, 200]}}).len(), 2);
        // A ranged key on a non-empty collection starts as one chunk on the primary.
        let key = ShardKey::parse(&doc! {"n": 1}).unwrap();
        assert_eq!(initial_chunks(&key, &["a".into()], "a", 2, true).len(), 1);
    }
}
