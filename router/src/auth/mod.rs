//! Client authentication (SCRAM-SHA-256 / SCRAM-SHA-1) and authorization.
//!
//! * `scram`: the SCRAM conversation and key derivation.
//! * `nonce`: server nonces from a per-thread CSPRNG (no syscall, no shared lock).
//! * `sasl`: `saslStart` / `saslContinue` / `speculativeAuthenticate` on a connection.
//! * `roles` and `authz`: privileges, built-in roles, and the check made on every command.
//! * `store` and `user`: where user and role documents live, and their shape.
//!
//! Router-wide state is [`AuthState`]; each connection keeps a [`ConnAuth`].

pub mod aggregate_needs;
pub mod authz;
pub mod manage;
pub mod nonce;
pub mod revocation;
pub mod roles;
pub mod sasl;
pub mod scram;
pub mod setup;
pub mod store;
pub mod user;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bson::Document;
use wire::{MongoError, MongoResult};

use self::nonce::NonceSource;
use self::roles::Privileges;
use self::scram::{Mechanism, ScramCredential};
use self::store::{Kind, UserStore};
use self::user::{RoleName, UserRecord};

pub use authz::{authorize, Rule};

/// How long a cached user lookup is trusted. Changes made through this router are seen
/// at once; changes made through another router within this time.
const USER_CACHE_TTL: Duration = Duration::from_secs(5);
/// Bound on cached lookups, so a storm of made-up user names cannot grow memory.
const USER_CACHE_MAX: usize = 10_000;
/// Nesting limit when resolving user-defined roles (guards against cycles too).
const MAX_ROLE_DEPTH: usize = 16;
/// How long a login as the bootstrap admin waits for this router to create it.
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(15);

/// When a user was looked up, and what was found (`None`: no such user).
type CachedUser = (Instant, Option<Arc<UserRecord>>);

pub struct AuthState {
    /// `auth = true`: every command is checked and clients must authenticate.
    pub enabled: bool,
    pub nonce_source: NonceSource,
    pub store: Arc<dyn UserStore>,
    /// Per-process secret for unknown users' fake salts: stable for a name, so probing
    /// twice does not reveal that the user is missing, and unguessable across restarts.
    fake_secret: [u8; 32],
    /// Users by `db\0name`, including misses (so a missing user costs what a present one
    /// does). Read-mostly: handshakes take a read lock, writes happen on a miss.
    cache: RwLock<HashMap<String, CachedUser>>,
    /// Bumped whenever a user or role changes, so connections re-resolve privileges.
    /// Read on each command but written only by user management: no cache-line bouncing.
    generation: AtomicU64,
    /// The bootstrap admin's name while this router is still creating it (the shard may
    /// not have elected a primary yet). A login as that user waits for it instead of
    /// failing in the first moments after start.
    bootstrap: tokio::sync::watch::Sender<Option<String>>,
}

impl AuthState {
    pub fn new(enabled: bool, nonce_source: NonceSource, store: Arc<dyn UserStore>) -> AuthState {
        let mut fake_secret = [0u8; 32];
        NonceSource::Os.fill(&mut fake_secret);
        AuthState {
            enabled,
            nonce_source,
            store,
            fake_secret,
            cache: RwLock::new(HashMap::new()),
            generation: AtomicU64::new(0),
            bootstrap: tokio::sync::watch::Sender::new(None),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Forgets cached users and makes connections re-resolve their privileges.
    pub fn invalidate(&self) {
        self.cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// After a user or role changed: this router forgets at once, and the cluster-wide
    /// count tells every other router (`revocation::watch`), existing connections
    /// included. An error means the change is stored but other routers may not see it
    /// within `revocation::POLL`: the client hears of it.
    pub async fn changed(&self) -> MongoResult<()> {
        self.invalidate();
        self.store.bump_generation().await
    }

    /// Marks the bootstrap admin as being created (`Some`) or settled (`None`).
    pub fn set_bootstrap_pending(&self, user: Option<String>) {
        self.bootstrap.send_replace(user);
    }

    /// The user, from the cache when fresh. A login as the bootstrap admin before this
    /// router has created it waits (bounded) for it.
    pub async fn user(&self, db: &str, name: &str) -> MongoResult<Option<Arc<UserRecord>>> {
        let found = self.lookup(db, name).await?;
        if found.is_some() || db != "admin" || self.bootstrap.borrow().as_deref() != Some(name) {
            return Ok(found);
        }
        let mut rx = self.bootstrap.subscribe();
        let settled = rx.wait_for(|pending| pending.as_deref() != Some(name));
        let _ = tokio::time::timeout(BOOTSTRAP_WAIT, settled).await;
        self.lookup(db, name).await
    }

    async fn lookup(&self, db: &str, name: &str) -> MongoResult<Option<Arc<UserRecord>>> {
        let key = format!("{db}\0{name}");
        if let Some((at, u)) = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            if at.elapsed() < USER_CACHE_TTL {
                return Ok(u.clone());
            }
        }
        let found = match self.store.get(Kind::User, db, name).await? {
            Some(d) => Some(Arc::new(UserRecord::from_document(&d)?)),
            None => None,
        };
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= USER_CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, (Instant::now(), found.clone()));
        Ok(found)
    }

    /// A credential for a user that does not exist (or lacks this mechanism): a salt
    /// derived from the name, so it is the same on every attempt, and keys no password
    /// matches.
    pub fn fake_credential(&self, m: Mechanism, db: &str, name: &str) -> ScramCredential {
        let tag = |t: &str| {
            scram::Mechanism::Sha256.hmac(
                &self.fake_secret,
                format!("{t}\0{}\0{db}\0{name}", m.name()).as_bytes(),
            )
        };
        ScramCredential {
            iterations: m.default_iterations(),
            salt: tag("salt")[..m.salt_len()].to_vec(),
            stored_key: tag("stored")[..m.hash_len()].to_vec(),
            server_key: tag("server")[..m.hash_len()].to_vec(),
        }
    }

    /// The privileges granted by `roles`, following user-defined roles' inherited roles.
    pub async fn resolve(&self, roles: &[RoleName]) -> MongoResult<(Privileges, Vec<RoleName>)> {
        let mut privileges = Privileges::default();
        let mut seen: HashSet<RoleName> = HashSet::new();
        let mut frontier: Vec<RoleName> = roles.to_vec();
        for _ in 0..MAX_ROLE_DEPTH {
            let mut next = Vec::new();
            for r in frontier.drain(..) {
                if !seen.insert(r.clone()) {
                    continue;
                }
                if let Some(p) = roles::builtin_privileges(&r.role, &r.db) {
                    privileges.extend(p);
                } else if let Some(d) = self.store.get(Kind::Role, &r.db, &r.role).await? {
                    let (p, inherited) = parse_role_document(&d)?;
                    privileges.extend(p);
                    next.extend(inherited);
                }
                // A role dropped after it was granted grants nothing (as in MongoDB).
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        let mut all: Vec<RoleName> = seen.into_iter().collect();
        all.sort_by(|a, b| (&a.db, &a.role).cmp(&(&b.db, &b.role)));
        Ok((privileges, all))
    }

    /// Creates the bootstrap user (`admin_user`, role root) unless it already exists.
    pub async fn bootstrap_admin(&self, user: &str, password: &str) -> MongoResult<bool> {
        if self.store.get(Kind::User, "admin", user).await?.is_some() {
            return Ok(false);
        }
        let (u, p) = (user.to_string(), password.to_string());
        let creds = tokio::task::spawn_blocking(move || {
            user::credentials_document(&u, &p, &Mechanism::ALL)
        })
        .await
        .map_err(|e| MongoError::internal(e.to_string()))??;
        let root = [RoleName {
            role: "root".into(),
            db: "admin".into(),
        }];
        let doc = user::new_user_document("admin", user, creds, &root, None);
        match self.store.insert(Kind::User, doc).await {
            // Another router (another site) created it first: that is success too.
            Err(e) if e.code == wire::ErrorCode::DuplicateKey as i32 => Ok(false),
            Err(e) => Err(e),
            Ok(()) => {
                self.changed().await?;
                Ok(true)
            }
        }
    }
}

/// `{role, db, privileges, roles}` from `system.roles`.
pub fn parse_role_document(d: &Document) -> MongoResult<(Vec<roles::Privilege>, Vec<RoleName>)> {
    let privileges = match d.get_array("privileges") {
        Ok(a) => a
            .iter()
            .filter_map(|p| p.as_document())
            .map(roles::Privilege::from_document)
            .collect::<MongoResult<Vec<_>>>()?,
        Err(_) => Vec::new(),
    };
    let inherited = match d.get("roles") {
        Some(v @ bson::Bson::Array(_)) => RoleName::parse_list(Some(v), "", "roles")?,
        _ => Vec::new(),
    };
    Ok((privileges, inherited))
}

/// Who is authenticated on one connection, and any SASL conversation in progress.
#[derive(Default)]
pub struct ConnAuth {
    pub user: Option<AuthedUser>,
    pub(crate) conversation: Option<sasl::Conversation>,
    pub(crate) next_conversation_id: i32,
    /// Failed attempts on this connection (the router-wide total is in `OpCounters`).
    pub failures: u32,
    /// The RFC 2253 subject of the certificate the client presented over TLS, verified
    /// against `tls_ca` (what MONGODB-X509 authenticates as).
    pub x509_subject: Option<String>,
}

impl ConnAuth {
    /// The owner recorded on cursors this connection opens.
    pub fn owner(&self) -> crate::owner::Owner {
        self.user.as_ref().map(|u| (u.user.clone(), u.db.clone()))
    }
}

pub struct AuthedUser {
    pub user: String,
    pub db: String,
    /// Granted roles and, transitively, the roles they inherit.
    pub roles: Vec<RoleName>,
    pub direct_roles: Vec<RoleName>,
    pub privileges: Privileges,
    /// `AuthState::generation` when `privileges` were resolved.
    pub generation: u64,
}
