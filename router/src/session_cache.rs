//! The router's logical session cache: the sessions commands named (`lsid`), with when
//! each was last used and by whom, as mongos keeps them in memory. `$listLocalSessions`
//! lists them; `startSession` adds one; `endSessions` and `killSessions` remove them.
//!
//! A session is the driver's `lsid.id` together with the user who runs it (`uid`, the
//! SHA-256 of `user@db`, of the empty string without authentication), so two users
//! naming the same id hold two sessions, as in MongoDB.
//!
//! Every command carries an `lsid` (drivers use implicit sessions), so the cache sits on
//! the hot path. It is split in [`SHARDS`] locks by id, and a connection touches it only
//! when the session it names differs from the one it touched last, a second has gone by
//! since, or some session was ended meanwhile ([`Recent`]): a driver's connection runs
//! the sessions of its pool one after another, so the shared locks are taken a few times
//! a second per connection, not per command. The count of ends is read on every command
//! and written only when sessions end, so its cache line stays shared.
//!
//! The cache is bounded ([`MAX_SESSIONS`], MongoDB's `maxSessions` default, a share of
//! it per lock): a new session beyond it gets `TooManyLogicalSessions` (261) unless
//! expired ones (unused for [`SESSION_TIMEOUT`], `localLogicalSessionTimeoutMinutes`)
//! make room. Session ids are chosen by clients, so the lock a session falls under is
//! picked by a hash keyed at random when the router starts: no client can aim its
//! sessions at one lock's share and refuse everyone else's there. A full share looks for
//! expired sessions at most once a second, so a storm of new sessions against it does
//! not scan it under its lock each time.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use wire::{ErrorCode, MongoError, MongoResult};

/// Locks the cache is split into.
const SHARDS: usize = 64;
/// Sessions the cache holds at most (MongoDB's `maxSessions` default).
pub const MAX_SESSIONS: usize = 1_000_000;
/// A session unused for this long is gone (`localLogicalSessionTimeoutMinutes`: 30).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How stale a session's `lastUse` may be before a connection touches it again.
const TOUCH_EVERY: Duration = Duration::from_secs(1);
/// How often a full share of the cache looks for expired sessions.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// A logical session: the driver's id and the SHA-256 of its user's name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SessionKey {
    pub id: [u8; 16],
    pub uid: [u8; 32],
}

/// The id of `lsid` (`{id: <UUID>, ...}`), or `None` for anything else.
pub fn lsid_id(lsid: &Bson) -> Option<[u8; 16]> {
    let Bson::Document(d) = lsid else { return None };
    let Some(Bson::Binary(b)) = d.get("id") else {
        return None;
    };
    b.bytes.as_slice().try_into().ok()
}

/// Who runs a session: `(user, db)`, or `None` without authentication.
pub type Owner<'a> = Option<(&'a str, &'a str)>;

/// The SHA-256 of `user@db` ("" without authentication), as MongoDB's `uid`.
pub fn uid(owner: Owner) -> [u8; 32] {
    let mut h = Sha256::new();
    if let Some((user, db)) = owner {
        h.update(user.as_bytes());
        h.update(b"@");
        h.update(db.as_bytes());
    }
    h.finalize().into()
}

struct Entry {
    last_use: SystemTime,
    /// For the expiry test: `SystemTime` may step.
    touched: Instant,
    /// `user@db`, when authenticated.
    user: Option<String>,
}

/// Which sessions `$listLocalSessions` asks for.
pub enum Owners {
    All,
    /// These uids.
    Only(Vec<[u8; 32]>),
}

/// One lock's share of the cache.
struct Shard {
    sessions: HashMap<SessionKey, Entry>,
    /// When this share last looked for expired sessions because it was full.
    pruned: Option<Instant>,
}

impl Shard {
    fn prune(&mut self, now: Instant) {
        self.sessions
            .retain(|_, e| now.duration_since(e.touched) < SESSION_TIMEOUT);
    }
}

pub struct SessionCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    /// Picks a session's shard from its id, keyed at random per router.
    seed: RandomState,
    /// How many times sessions were ended: a connection that touched a session before
    /// the last end touches it again.
    ends: AtomicU64,
}

impl Default for SessionCache {
    fn default() -> Self {
        SessionCache::with_capacity(MAX_SESSIONS)
    }
}

impl SessionCache {
    pub fn with_capacity(max: usize) -> SessionCache {
        SessionCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        sessions: HashMap::new(),
                        pruned: None,
                    })
                })
                .collect(),
            per_shard: max.div_ceil(SHARDS).max(1),
            seed: RandomState::new(),
            ends: AtomicU64::new(0),
        }
    }

    fn shard_of(&self, id: &[u8; 16]) -> &Mutex<Shard> {
        &self.shards[(self.seed.hash_one(id) % SHARDS as u64) as usize]
    }

    /// Records a use of `key` now, adding the session if it is new.
    pub fn touch(&self, key: SessionKey, owner: Owner) -> MongoResult<()> {
        let now = Instant::now();
        let mut shard = self.shard_of(&key.id).lock();
        if let Some(e) = shard.sessions.get_mut(&key) {
            e.last_use = SystemTime::now();
            e.touched = now;
            return Ok(());
        }
        if shard.sessions.len() >= self.per_shard {
            if shard
                .pruned
                .is_none_or(|t| now.duration_since(t) >= PRUNE_EVERY)
            {
                shard.prune(now);
                shard.pruned = Some(now);
            }
            if shard.sessions.len() >= self.per_shard {
                return Err(MongoError::new(
                    ErrorCode::TooManyLogicalSessions,
                    format!(
                        "Unable to add session into the cache because the number of active \
                         sessions is too high (at most {} per router)",
                        self.per_shard * SHARDS
                    ),
                ));
            }
        }
        shard.sessions.insert(
            key,
            Entry {
                last_use: SystemTime::now(),
                touched: now,
                user: owner.map(|(user, db)| format!("{user}@{db}")),
            },
        );
        Ok(())
    }

    /// Ends these sessions here (`endSessions`, `killSessions`).
    pub fn end(&self, keys: &[SessionKey]) {
        for key in keys {
            self.shard_of(&key.id).lock().sessions.remove(key);
        }
        self.ends.fetch_add(1, Ordering::Release);
    }

    /// Ends the sessions of this id, whoever's they are (`killAllSessionsByPattern`).
    pub fn end_all_with_id(&self, id: &[u8; 16]) {
        self.shard_of(id).lock().sessions.retain(|k, _| k.id != *id);
        self.ends.fetch_add(1, Ordering::Release);
    }

    /// Ends every session of these owners (`killAllSessions`).
    pub fn end_all(&self, owners: &Owners) {
        for shard in &self.shards {
            shard.lock().sessions.retain(|k, _| !owners.include(&k.uid));
        }
        self.ends.fetch_add(1, Ordering::Release);
    }

    /// The live sessions of `owners`, in `$listLocalSessions`'s shape.
    pub fn list(&self, owners: &Owners) -> Vec<Document> {
        let now = Instant::now();
        let mut out = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.prune(now);
            for (k, e) in shard
                .sessions
                .iter()
                .filter(|(k, _)| owners.include(&k.uid))
            {
                let mut d = doc! {
                    "_id": {"id": binary(bson::spec::BinarySubtype::Uuid, &k.id),
                            "uid": binary(bson::spec::BinarySubtype::Generic, &k.uid)},
                    "lastUse": bson::DateTime::from_system_time(e.last_use),
                };
                if let Some(u) = &e.user {
                    d.insert("user", doc! {"name": u});
                }
                out.push(d);
            }
        }
        out
    }
}

impl Owners {
    fn include(&self, uid: &[u8; 32]) -> bool {
        match self {
            Owners::All => true,
            Owners::Only(uids) => uids.contains(uid),
        }
    }
}

fn binary(subtype: bson::spec::BinarySubtype, bytes: &[u8]) -> Bson {
    Bson::Binary(bson::Binary {
        subtype,
        bytes: bytes.to_vec(),
    })
}

/// A connection's side of the cache: the session it touched last, when, and how many
/// ends the cache had counted then (it touches the shared cache again only for another
/// session, after [`TOUCH_EVERY`], or after an end), and its user's uid, hashed once per
/// user instead of once per command.
#[derive(Default)]
pub struct Recent {
    last: Option<(SessionKey, Instant, u64)>,
    /// `(user, db, uid)`; the empty user and database without authentication.
    owner: Option<(String, String, [u8; 32])>,
}

impl Recent {
    /// Touches the session `id` of `owner` in `cache`, unless this connection did so
    /// within [`TOUCH_EVERY`]. Allocates nothing when it does not.
    pub fn touch(&mut self, cache: &SessionCache, id: [u8; 16], owner: Owner) -> MongoResult<()> {
        let key = SessionKey {
            id,
            uid: self.uid(owner),
        };
        let now = Instant::now();
        let ends = cache.ends.load(Ordering::Acquire);
        if let Some((last, at, seen)) = &self.last {
            if *last == key && *seen == ends && now.duration_since(*at) < TOUCH_EVERY {
                return Ok(());
            }
        }
        cache.touch(key, owner)?;
        self.last = Some((key, now, ends));
        Ok(())
    }

    /// The uid of `owner`, hashed again only when the connection's user changed.
    pub fn uid(&mut self, owner: Owner) -> [u8; 32] {
        let (user, db) = owner.unwrap_or(("", ""));
        match &self.owner {
            Some((u, d, cached)) if u == user && d == db => *cached,
            _ => {
                let h = uid(owner);
                self.owner = Some((user.to_owned(), db.to_owned(), h));
                h
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsid(n: u8) -> Bson {
        Bson::Document(doc! {"id": binary(bson::spec::BinarySubtype::Uuid, &[n; 16])})
    }

    #[test]
    fn a_session_is_its_id_and_its_user() {
        let cache = SessionCache::default();
        let id = lsid_id(&lsid(1)).unwrap();
        let a = SessionKey {
            id,
            uid: uid(Some(("ann", "admin"))),
        };
        let b = SessionKey {
            id,
            uid: uid(Some(("bob", "admin"))),
        };
        cache.touch(a, Some(("ann", "admin"))).unwrap();
        cache.touch(b, Some(("bob", "admin"))).unwrap();
        cache.touch(a, Some(("ann", "admin"))).unwrap();
        assert_eq!(cache.list(&Owners::All).len(), 2);
        let anns = cache.list(&Owners::Only(vec![uid(Some(("ann", "admin")))]));
        assert_eq!(anns.len(), 1);
        assert_eq!(
            anns[0].get_document("user").unwrap().get_str("name"),
            Ok("ann@admin")
        );
        let id = anns[0].get_document("_id").unwrap();
        assert_eq!(id.get_binary_generic("uid").unwrap().len(), 32);
        cache.end(&[a]);
        assert_eq!(cache.list(&Owners::All).len(), 1);
        assert!(lsid_id(&Bson::Int32(1)).is_none());
        // MongoDB's digests: of "user@db", and of "" without authentication.
        let digest = |s: &str| -> [u8; 32] { Sha256::digest(s.as_bytes()).into() };
        assert_eq!(uid(Some(("ann", "admin"))), digest("ann@admin"));
        assert_eq!(uid(None), digest(""));
    }

    #[test]
    fn a_full_cache_refuses_new_sessions_and_keeps_serving_known_ones() {
        // One session per shard.
        let cache = SessionCache::with_capacity(SHARDS);
        let key = |n: u16| {
            let mut id = [0u8; 16];
            id[..2].copy_from_slice(&n.to_le_bytes());
            SessionKey { id, uid: uid(None) }
        };
        let first = key(7);
        let same_shard = |k: &SessionKey| {
            k.id != first.id && std::ptr::eq(cache.shard_of(&k.id), cache.shard_of(&first.id))
        };
        // The shard hash is keyed at random: among 256 ids none shared the first's shard
        // about once in fifty runs; among 65,536 that never happens in practice.
        let second = (0..=u16::MAX)
            .map(key)
            .find(same_shard)
            .expect("65,536 ids over 64 shards: one shares the first's");
        cache.touch(first, None).unwrap();
        let err = cache.touch(second, None).unwrap_err();
        assert_eq!(err.code, ErrorCode::TooManyLogicalSessions as i32);
        cache.touch(first, None).unwrap();
        cache.end(&[first]);
        cache.touch(second, None).unwrap();
    }

    #[test]
    fn a_connection_touches_the_shared_cache_again_only_when_it_must() {
        let cache = SessionCache::default();
        let mut recent = Recent::default();
        let id = lsid_id(&lsid(3)).unwrap();
        let key = SessionKey { id, uid: uid(None) };
        recent.touch(&cache, id, None).unwrap();
        let first = cache.list(&Owners::All)[0].get_datetime("lastUse").copied();
        std::thread::sleep(Duration::from_millis(5));
        // Within the second, the same session is not touched again...
        recent.touch(&cache, id, None).unwrap();
        assert_eq!(
            cache.list(&Owners::All)[0].get_datetime("lastUse").copied(),
            first
        );
        // ...but one ended meanwhile (by any connection) is added again at its next use.
        cache.end(&[key]);
        recent.touch(&cache, id, None).unwrap();
        assert_eq!(cache.list(&Owners::All).len(), 1);
    }
}
