//! Cursors this router handed out, router-wide: which member holds each one (a `getMore`
//! must follow it there, whichever pooled connection the driver sends it on) and who
//! opened it (only that user may continue or kill it, as in MongoDB).
//!
//! A cursor id unknown here was not opened through this router, or expired: it gets
//! `CursorNotFound`, as a mongos answers for another mongos's cursor.
//!
//! The map is split in stripes locked separately, so concurrent finds on many cores do
//! not queue on one lock (a lock every core takes is a cache line every core fights over).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wire::{ErrorCode, MongoError, MongoResult};

use crate::shard_client::ShardHandle;
use crate::sharding::change_stream::StreamMerge;
use crate::sharding::merge_cursor::MergeCursor;

/// A router-held cursor; one `getMore` at a time uses it.
pub type Merged = std::sync::Arc<tokio::sync::Mutex<Held>>;

/// What a router-held cursor merges.
pub enum Held {
    /// Several shards' results of one read.
    Merge(MergeCursor),
    /// Several shards' change streams.
    Stream(StreamMerge),
}

impl Held {
    /// Closes the shards' cursors still open.
    pub async fn kill(&mut self) {
        match self {
            Held::Merge(m) => m.kill().await,
            Held::Stream(s) => s.kill().await,
        }
    }
}

/// Where a cursor lives.
#[derive(Clone, Default)]
pub struct Claim {
    /// The member of its shard (`None`: the primary).
    pub member: Option<usize>,
    /// Its shard (`None`: the router's default shard).
    pub shard: Option<ShardHandle>,
    /// Set when the router itself holds it.
    pub merged: Option<Merged>,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("member", &self.member)
            .field("other_shard", &self.shard.is_some())
            .field("merged", &self.merged.is_some())
            .finish()
    }
}

const STRIPES: usize = 16;
/// Entries idle longer than this are dropped: the shard has timed the cursor out by then
/// (its default `cursor_timeout_secs` is 600).
const IDLE_LIMIT: Duration = Duration::from_secs(660);
/// A stripe is swept for idle entries each time it grows by this many.
const SWEEP_EVERY: usize = 1024;

use crate::owner::Owner;

struct Entry {
    /// The member holding the cursor when it is not the primary.
    member: Option<usize>,
    /// The shard holding it, when it is not the router's default one.
    shard: Option<ShardHandle>,
    /// A cursor the router merges from several shards' cursors.
    merged: Option<Merged>,
    owner: Owner,
    touched: Instant,
}

pub struct Cursors {
    stripes: [Mutex<HashMap<i64, Entry>>; STRIPES],
}

impl Default for Cursors {
    fn default() -> Self {
        Cursors {
            stripes: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }
}

impl Cursors {
    fn stripe(&self, id: i64) -> std::sync::MutexGuard<'_, HashMap<i64, Entry>> {
        // Cursor ids are random 64-bit numbers; fold the high bits in anyway.
        let h = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60;
        self.stripes[h as usize % STRIPES]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records a cursor a reply just opened.
    pub fn opened(&self, id: i64, member: Option<usize>, owner: Owner) {
        self.insert(
            id,
            Claim {
                member,
                ..Default::default()
            },
            owner,
        );
    }

    /// Records a cursor a shard other than the default one opened.
    pub fn opened_on(&self, id: i64, shard: ShardHandle, member: Option<usize>, owner: Owner) {
        let claim = Claim {
            member,
            shard: Some(shard),
            merged: None,
        };
        self.insert(id, claim, owner);
    }

    /// Keeps a merged cursor under a new id, which it returns.
    pub fn opened_merged(&self, cursor: Held, owner: Owner) -> i64 {
        // Random and positive, like shard cursor ids, so the two never need telling apart.
        let id = (rand::random::<u64>() >> 2) as i64 + 1;
        let claim = Claim {
            merged: Some(std::sync::Arc::new(tokio::sync::Mutex::new(cursor))),
            ..Default::default()
        };
        self.insert(id, claim, owner);
        id
    }

    fn insert(&self, id: i64, claim: Claim, owner: Owner) {
        let now = Instant::now();
        let mut stripe = self.stripe(id);
        stripe.insert(
            id,
            Entry {
                member: claim.member,
                shard: claim.shard,
                merged: claim.merged,
                owner,
                touched: now,
            },
        );
        if stripe.len().is_multiple_of(SWEEP_EVERY) {
            stripe.retain(|_, e| now.duration_since(e.touched) < IDLE_LIMIT);
        }
    }

    /// Checks that `owner` may use cursor `id` and returns where it lives.
    pub fn claim(&self, id: i64, owner: &Owner) -> MongoResult<Claim> {
        let mut stripe = self.stripe(id);
        let Some(entry) = stripe.get_mut(&id) else {
            return Err(MongoError::new(
                ErrorCode::CursorNotFound,
                format!("cursor id {id} not found"),
            ));
        };
        if entry.owner != *owner {
            return Err(MongoError::new(
                ErrorCode::Unauthorized,
                format!("cursor id {id} was not created by the authenticated user"),
            ));
        }
        entry.touched = Instant::now();
        Ok(Claim {
            member: entry.member,
            shard: entry.shard.clone(),
            merged: entry.merged.clone(),
        })
    }

    /// Forgets a cursor that is exhausted or killed.
    pub fn closed(&self, id: i64) {
        self.stripe(id).remove(&id);
    }

    pub fn len(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.lock().map(|m| m.len()).unwrap_or(0))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Owner {
        Some((name.to_string(), "admin".to_string()))
    }

    #[test]
    fn only_the_opener_may_use_a_cursor() {
        let c = Cursors::default();
        c.opened(42, Some(2), user("alice"));
        assert_eq!(c.claim(42, &user("alice")).unwrap().member, Some(2));
        let e = c.claim(42, &user("bob")).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized as i32);
        assert_eq!(
            c.claim(42, &None).unwrap_err().code,
            ErrorCode::Unauthorized as i32
        );
    }

    #[test]
    fn closed_and_unknown_cursors_are_not_found() {
        let c = Cursors::default();
        c.opened(7, None, None);
        assert_eq!(c.claim(7, &None).unwrap().member, None);
        c.closed(7);
        assert_eq!(
            c.claim(7, &None).unwrap_err().code,
            ErrorCode::CursorNotFound as i32
        );
        assert_eq!(
            c.claim(8, &None).unwrap_err().code,
            ErrorCode::CursorNotFound as i32
        );
        assert!(c.is_empty());
    }
}
