//! What one shard owns of a sharded collection, and at which version.
//!
//! The config server's chunks say which shard owns each key range; each shard keeps its
//! own part of that (its ranges) with the collection version they were computed at. A
//! router sends the version it routed with (`shardVersion`) on every command to a sharded
//! collection, and a shard whose version differs answers `StaleConfig` instead of
//! running it: either the router is behind (it refreshes) or the shard is (the router
//! sends it its ranges). Reads drop documents outside the shard's ranges (orphans left by
//! a migration), so a count never sees a document twice.

use std::cmp::Ordering;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document, Timestamp};

use crate::order::compare_arrays;
use crate::shard_key::{KeyValue, ShardKey};
use crate::{ErrorCode, MongoError, MongoResult};

/// A collection version: the epoch (new each time the collection is sharded) and the
/// highest chunk version (`major.minor`, as a timestamp: time = major, increment = minor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardVersion {
    pub epoch: ObjectId,
    pub version: Timestamp,
}

impl ShardVersion {
    pub fn to_document(&self) -> Document {
        doc! {"e": self.epoch, "v": self.version}
    }

    pub fn from_document(d: &Document) -> MongoResult<ShardVersion> {
        let bad = || MongoError::type_mismatch("shardVersion must be {e: ObjectId, v: Timestamp}");
        Ok(ShardVersion {
            epoch: d.get_object_id("e").map_err(|_| bad())?,
            version: d.get_timestamp("v").map_err(|_| bad())?,
        })
    }

    /// Orders versions of one epoch; versions of different epochs do not compare.
    pub fn newer_than(&self, other: &ShardVersion) -> Option<bool> {
        (self.epoch == other.epoch).then(|| order(self.version, other.version) == Ordering::Greater)
    }
}

/// Orders chunk versions: major, then minor.
pub fn order(a: Timestamp, b: Timestamp) -> Ordering {
    (a.time, a.increment).cmp(&(b.time, b.increment))
}

/// One shard's part of a sharded collection.
#[derive(Debug, Clone, PartialEq)]
pub struct Ownership {
    pub key: ShardKey,
    pub version: ShardVersion,
    /// Owned key ranges `[min, max)`, sorted and disjoint.
    pub ranges: Vec<(KeyValue, KeyValue)>,
    /// The range `[min, max)` of a migration out of this shard that is committing: the
    /// collection's writes wait for the outcome. It ends when an ownership without that
    /// range arrives (the commit) or the migration is abandoned.
    pub critical: Option<(KeyValue, KeyValue)>,
}

impl Ownership {
    /// Whether key value `k` is in one of the owned ranges.
    pub fn owns_key(&self, k: &[Bson]) -> bool {
        let i = self
            .ranges
            .partition_point(|(min, _)| compare_arrays(min, k) != Ordering::Greater);
        i > 0 && compare_arrays(k, &self.ranges[i - 1].1) == Ordering::Less
    }

    /// Whether some key value in `[min, max)` is in one of the owned ranges.
    pub fn owns_part_of(&self, min: &[Bson], max: &[Bson]) -> bool {
        self.ranges.iter().any(|(a, b)| {
            compare_arrays(a, max) == Ordering::Less && compare_arrays(min, b) == Ordering::Less
        })
    }

    /// Whether every key value is this shard's (one range from MinKey to MaxKey): no
    /// document can be an orphan, and reads need not look.
    pub fn owns_everything(&self) -> bool {
        matches!(self.ranges.as_slice(), [(min, max)]
            if *min == self.key.global_min() && *max == self.key.global_max())
    }

    /// Whether `doc` belongs to this shard. A document without a valid key value (an
    /// array in a key field, refused on insert) cannot be placed and is kept.
    pub fn owns(&self, doc: &Document) -> bool {
        self.key.value_of(doc).map_or(true, |k| self.owns_key(&k))
    }

    pub fn to_document(&self) -> Document {
        let ranges: Vec<Bson> = self
            .ranges
            .iter()
            .map(|(min, max)| Bson::Document(doc! {"min": min.clone(), "max": max.clone()}))
            .collect();
        doc! {
            "key": self.key.pattern().clone(),
            "version": self.version.to_document(),
            "ranges": ranges,
            "critical": self
                .critical
                .as_ref()
                .map(|(min, max)| Bson::Document(doc! {"min": min.clone(), "max": max.clone()})),
        }
    }

    pub fn from_document(d: &Document) -> MongoResult<Ownership> {
        let bad = |what: &str| {
            MongoError::new(
                ErrorCode::FailedToParse,
                format!("malformed ownership: {what}"),
            )
        };
        let key = ShardKey::parse(d.get_document("key").map_err(|_| bad("key"))?)?;
        let version =
            ShardVersion::from_document(d.get_document("version").map_err(|_| bad("version"))?)?;
        let mut ranges = Vec::new();
        for r in d.get_array("ranges").map_err(|_| bad("ranges"))? {
            let r = r.as_document().ok_or_else(|| bad("range"))?;
            let bound = |f: &str| -> MongoResult<KeyValue> {
                Ok(r.get_array(f).map_err(|_| bad("range bound"))?.clone())
            };
            ranges.push((bound("min")?, bound("max")?));
        }
        ranges.sort_by(|a, b| compare_arrays(&a.0, &b.0));
        Ok(Ownership {
            key,
            version,
            ranges,
            critical: match d.get_document("critical") {
                Ok(r) => {
                    let bound = |f: &str| -> MongoResult<KeyValue> {
                        Ok(r.get_array(f).map_err(|_| bad("critical range"))?.clone())
                    };
                    Some((bound("min")?, bound("max")?))
                }
                Err(_) => None,
            },
        })
    }
}

/// Joins touching ranges (`[a, b)` and `[b, c)` become `[a, c)`); input sorted by min.
pub fn coalesce(ranges: Vec<(KeyValue, KeyValue)>) -> Vec<(KeyValue, KeyValue)> {
    let mut out: Vec<(KeyValue, KeyValue)> = Vec::with_capacity(ranges.len());
    for (min, max) in ranges {
        match out.last_mut() {
            Some(last) if compare_arrays(&last.1, &min) == Ordering::Equal => last.1 = max,
            _ => out.push((min, max)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(ranges: Vec<(i32, i32)>) -> Ownership {
        Ownership {
            key: ShardKey::parse(&doc! {"x": 1}).unwrap(),
            version: ShardVersion {
                epoch: ObjectId::new(),
                version: Timestamp {
                    time: 1,
                    increment: 0,
                },
            },
            ranges: ranges
                .into_iter()
                .map(|(a, b)| (vec![Bson::Int32(a)], vec![Bson::Int32(b)]))
                .collect(),
            critical: None,
        }
    }

    #[test]
    fn owns_half_open_ranges() {
        let o = owner(vec![(0, 10), (20, 30)]);
        assert!(!o.owns_everything());
        let mut all = owner(vec![]);
        all.ranges = vec![(vec![Bson::MinKey], vec![Bson::MaxKey])];
        assert!(all.owns_everything());
        for (x, owned) in [
            (-1, false),
            (0, true),
            (9, true),
            (10, false),
            (25, true),
            (30, false),
        ] {
            assert_eq!(o.owns(&doc! {"x": x}), owned, "x = {x}");
        }
        assert!(!owner(vec![]).owns(&doc! {"x": 1}));
    }

    #[test]
    fn owns_part_of_a_range_when_they_overlap() {
        let o = owner(vec![(0, 10), (20, 30)]);
        let part = |a: i32, b: i32| o.owns_part_of(&[Bson::Int32(a)], &[Bson::Int32(b)]);
        assert!(part(5, 15));
        assert!(part(-5, 1));
        assert!(part(29, 40));
        assert!(!part(10, 20), "touching bounds are half-open");
        assert!(!part(30, 40));
        assert!(!part(-5, 0));
    }

    #[test]
    fn round_trips_and_coalesces() {
        let mut o = owner(vec![(0, 10)]);
        assert_eq!(Ownership::from_document(&o.to_document()).unwrap(), o);
        o.critical = Some((vec![Bson::Int32(0)], vec![Bson::Int32(5)]));
        assert_eq!(Ownership::from_document(&o.to_document()).unwrap(), o);
        let joined = coalesce(owner(vec![(0, 10), (10, 20), (30, 40)]).ranges);
        assert_eq!(joined.len(), 2);
        assert_eq!(joined[0].1, vec![Bson::Int32(20)]);
    }

    #[test]
    fn versions_order_within_an_epoch_only() {
        let a = owner(vec![]).version;
        let mut b = a;
        b.version.time = 2;
        assert_eq!(b.newer_than(&a), Some(true));
        assert_eq!(a.newer_than(&b), Some(false));
        b.epoch = ObjectId::new();
        assert_eq!(b.newer_than(&a), None);
    }
}
