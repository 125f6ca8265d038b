//! What the balancer does next with one collection, decided from its chunks, the shards
//! and the zones alone (pure, so every rule is table-tested):
//!
//! 1. A chunk that straddles a zone boundary is split there, so that zones own whole
//!    chunks.
//! 2. A chunk inside a zone that sits on a shard outside the zone moves to the zone's
//!    shard with the fewest chunks (a site's data goes to its site's shard).
//! 3. A draining shard (being removed) gives its chunks to the shard with the fewest.
//! 4. Otherwise chunks outside zones even out: when the fullest shard has at least
//!    `THRESHOLD` more chunks than the emptiest, one of its free chunks moves there.
//!
//! One step per collection per round: each changes the routing, and the next round
//! decides from the new one.

use std::collections::BTreeMap;

use query::order::compare_arrays;
use query::shard_key::KeyValue;

use router::sharding::routing::{Chunk, ZoneRange};

/// Chunk count difference that makes the balancer move a chunk.
pub const THRESHOLD: usize = 2;

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Split the chunk starting at `chunk_min` at `at`.
    Split { chunk_min: KeyValue, at: KeyValue },
    /// Move the chunk starting at `chunk_min` to shard `to`.
    Move { chunk_min: KeyValue, to: String },
}

/// The next step for a collection with `chunks` (sorted), over `shards` (`draining`
/// ones are being emptied), with `zones`; `None` when it is balanced.
pub fn next_step(
    chunks: &[Chunk],
    shards: &[String],
    draining: &[String],
    zones: &[ZoneRange],
) -> Option<Step> {
    let inside = |c: &Chunk, z: &ZoneRange| {
        compare_arrays(&z.min, &c.min).is_le() && compare_arrays(&c.max, &z.max).is_le()
    };
    for z in zones {
        for c in chunks {
            for at in [&z.min, &z.max] {
                if compare_arrays(&c.min, at).is_lt() && compare_arrays(at, &c.max).is_lt() {
                    return Some(Step::Split {
                        chunk_min: c.min.clone(),
                        at: at.clone(),
                    });
                }
            }
        }
    }
    let active: Vec<&String> = shards.iter().filter(|s| !draining.contains(s)).collect();
    let mut counts: BTreeMap<&str, usize> = active.iter().map(|s| (s.as_str(), 0)).collect();
    for c in chunks {
        if let Some(n) = counts.get_mut(c.shard.as_str()) {
            *n += 1;
        }
    }
    let emptiest = |among: &mut dyn Iterator<Item = &str>| {
        among
            .filter_map(|s| counts.get(s).map(|n| (*n, s)))
            .min()
            .map(|(_, s)| s.to_string())
    };
    for c in chunks {
        let Some(z) = zones.iter().find(|z| inside(c, z)) else {
            continue;
        };
        if !z.shards.contains(&c.shard) {
            if let Some(to) = emptiest(&mut z.shards.iter().map(String::as_str)) {
                return Some(Step::Move {
                    chunk_min: c.min.clone(),
                    to,
                });
            }
        }
    }
    let free = |c: &&Chunk| !zones.iter().any(|z| inside(c, z));
    if let Some(c) = chunks.iter().find(|c| draining.contains(&c.shard)) {
        let to = emptiest(&mut active.iter().map(|s| s.as_str()))?;
        return Some(Step::Move {
            chunk_min: c.min.clone(),
            to,
        });
    }
    let (most, fullest) = counts
        .iter()
        .filter(|(s, _)| chunks.iter().filter(free).any(|c| c.shard == **s))
        .map(|(s, n)| (*n, *s))
        .max()?;
    let (least, to) = counts.iter().map(|(s, n)| (*n, *s)).min()?;
    if most < least + THRESHOLD {
        return None;
    }
    let c = chunks.iter().filter(free).find(|c| c.shard == fullest)?;
    Some(Step::Move {
        chunk_min: c.min.clone(),
        to: to.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Bson;

    fn k(v: i32) -> KeyValue {
        vec![Bson::Int32(v)]
    }

    /// Chunks `[b0, b1), [b1, b2), ...` on the given shards (MinKey/MaxKey at the ends).
    fn chunks(on: &[&str]) -> Vec<Chunk> {
        let bound = |i: usize| match i {
            0 => vec![Bson::MinKey],
            i if i == on.len() => vec![Bson::MaxKey],
            i => k(i as i32 * 10),
        };
        on.iter()
            .enumerate()
            .map(|(i, s)| Chunk {
                min: bound(i),
                max: bound(i + 1),
                shard: s.to_string(),
            })
            .collect()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn uneven_counts_move_one_chunk_to_the_emptiest() {
        let shards = names(&["a", "b"]);
        let step = next_step(&chunks(&["a", "a", "a", "a"]), &shards, &[], &[]);
        assert_eq!(
            step,
            Some(Step::Move {
                chunk_min: vec![Bson::MinKey],
                to: "b".into()
            })
        );
        assert_eq!(
            next_step(&chunks(&["a", "a", "b"]), &shards, &[], &[]),
            None
        );
        assert_eq!(next_step(&chunks(&["a", "b"]), &shards, &[], &[]), None);
    }

    #[test]
    fn zones_split_at_their_bounds_then_pull_their_chunks() {
        let shards = names(&["a", "b"]);
        let zone = ZoneRange {
            min: k(5),
            max: k(10),
            shards: names(&["b"]),
        };
        let zones = [zone];
        let step = next_step(&chunks(&["a", "a"]), &shards, &[], &zones);
        assert_eq!(
            step,
            Some(Step::Split {
                chunk_min: vec![Bson::MinKey],
                at: k(5)
            })
        );
        let split = vec![
            Chunk {
                min: vec![Bson::MinKey],
                max: k(5),
                shard: "a".into(),
            },
            Chunk {
                min: k(5),
                max: k(10),
                shard: "a".into(),
            },
            Chunk {
                min: k(10),
                max: vec![Bson::MaxKey],
                shard: "a".into(),
            },
        ];
        assert_eq!(
            next_step(&split, &shards, &[], &zones),
            Some(Step::Move {
                chunk_min: k(5),
                to: "b".into()
            })
        );
        // Zone chunk in place; the two free chunks on "a" vs one on "b": balanced.
        let mut placed = split;
        placed[1].shard = "b".into();
        assert_eq!(next_step(&placed, &shards, &[], &zones), None);
    }

    #[test]
    fn a_draining_shard_empties() {
        let shards = names(&["a", "b"]);
        let step = next_step(&chunks(&["a", "b"]), &shards, &names(&["b"]), &[]);
        assert_eq!(
            step,
            Some(Step::Move {
                chunk_min: k(10),
                to: "a".into()
            })
        );
    }
}
