//! Sharding at the router: which shard a command goes to, and the commands that span
//! shards (scatter, gather, merge).
//!
//! The catalog lives on the config server replica set (`catalog.rs`): shards, databases
//! with their primary shard, sharded collections and their chunks. A router keeps a cache
//! of it and nothing else, so any router can be started or stopped at any time.
//!
//! An unsharded collection lives on its database's primary shard, and a command on it
//! goes there whole, as before sharding. A command on a sharded collection is targeted
//! by its shard key (`routing.rs`) to the shards whose chunks it can touch, and merged
//! here when it touches more than one (`scatter/`).

pub mod catalog;
pub mod change_stream;
pub mod coordination;
pub mod databases;
pub mod doc_move;
pub mod merge_cursor;
pub mod merged_cursor_command;
pub mod routing;
pub mod scatter;
pub mod shard_collection_spec;
pub mod versioning;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::Document;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::shard_client::{Forward, MemberLink, ShardHandle};
use routing::RoutingTable;

/// How a member address becomes a link: in-process when this process serves it.
pub type LinkFactory = Arc<dyn Fn(&str) -> MemberLink + Send + Sync>;

/// Links over gRPC (and the cluster's TLS when `tls` is set), to each member at the
/// address `dial_via` gives it.
pub fn grpc_links(
    tls: Option<Arc<proto::cluster_tls::ClusterTls>>,
    dial_via: proto::dial_via::DialVia,
) -> LinkFactory {
    Arc::new(move |host: &str| MemberLink::Grpc(dial_via.addr(host).to_string(), tls.clone()))
}

/// A handle on the replica set of `hosts` (comma-separated), each reached through `links`.
pub fn replica_set_of(
    hosts: &str,
    links: &LinkFactory,
    site: &str,
) -> Result<ShardHandle, crate::RouterError> {
    let members = hosts.split(',').map(|h| links(h.trim())).collect();
    ShardHandle::replica_set(members, site)
}

/// One shard as the router knows it.
pub struct Shard {
    pub name: String,
    /// `name/host1,host2,...`, as `config.shards` stores it.
    pub host: String,
    pub handle: ShardHandle,
}

/// Where a command goes.
pub enum Route {
    /// Whole, to one replica set: the database's primary shard at this database version
    /// (`lastMod`, attached as `databaseVersion`), or the config servers (`None`).
    One(ShardHandle, Option<i64>),
    /// A sharded collection: targeted by its shard key, merged here.
    Sharded(Arc<RoutingTable>),
}

/// A database's primary shard and the database version it is primary at (`None` for a
/// database that does not exist yet and is only read).
pub type Primary = (Arc<Shard>, Option<i64>);

struct CachedTable {
    table: Option<Arc<RoutingTable>>,
    fetched: Instant,
    /// Set while one command reads the catalog again; the others meanwhile keep using
    /// this entry, so an expiry costs one catalog read, not one per waiting command.
    refreshing: std::sync::atomic::AtomicBool,
}

pub struct Cluster {
    /// The config server replica set.
    pub config: ShardHandle,
    shards: RwLock<Vec<Arc<Shard>>>,
    /// Database → primary shard and database version. A primary once read is kept until
    /// a shard answers `StaleDbVersion` (a `movePrimary` moved it): commands to it carry
    /// the version, so a cached primary is never wrong for longer than one answer.
    /// Kept as the shard itself, so a command on an unsharded collection costs one map
    /// lookup, not a second one by name.
    primaries: RwLock<HashMap<String, Primary>>,
    tables: RwLock<HashMap<String, Arc<CachedTable>>>,
    links: LinkFactory,
    site: String,
    cluster_key: Option<String>,
    shutdown: CancellationToken,
    /// How long a cached view of one collection's routing is used before it is read
    /// again (`catalog_cache_ms`).
    catalog_cache: Duration,
    /// Each shard's forwarded calls in flight at most (`forward_gate`).
    forward_slots: usize,
}

impl Cluster {
    pub fn new(
        config: ShardHandle,
        links: LinkFactory,
        site: &str,
        cluster_key: Option<String>,
        shutdown: CancellationToken,
    ) -> Cluster {
        Cluster {
            config,
            shards: RwLock::new(Vec::new()),
            primaries: RwLock::new(HashMap::new()),
            tables: RwLock::new(HashMap::new()),
            links,
            site: site.to_string(),
            cluster_key,
            shutdown,
            catalog_cache: Duration::from_secs(1),
            forward_slots: crate::overload::forward_gate::DEFAULT_SLOTS,
        }
    }

    pub fn with_forward_slots(self, forward_slots: usize) -> Cluster {
        Cluster {
            forward_slots,
            ..self
        }
    }

    pub fn with_catalog_cache(self, catalog_cache: Duration) -> Cluster {
        Cluster {
            catalog_cache,
            ..self
        }
    }

    /// Each known shard's line for its slots (`forward_gate`), by shard name.
    pub fn gates(&self) -> bson::Document {
        self.shards
            .read()
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    bson::Bson::from(s.handle.gate().to_document()),
                )
            })
            .collect()
    }

    /// Every shard, in name order, as last read from `config.shards`.
    pub async fn shards(&self) -> MongoResult<Vec<Arc<Shard>>> {
        let known = self.shards.read().clone();
        if !known.is_empty() {
            return Ok(known);
        }
        self.reload_shards().await
    }

    /// The shard called `name` (read again from the catalog if it is new to this router).
    pub async fn shard(&self, name: &str) -> MongoResult<Arc<Shard>> {
        let find = |list: &[Arc<Shard>]| list.iter().find(|s| s.name == name).cloned();
        if let Some(s) = find(&self.shards.read()) {
            return Ok(s);
        }
        find(&self.reload_shards().await?).ok_or_else(|| {
            MongoError::new(ErrorCode::ShardNotFound, format!("shard {name} not found"))
        })
    }

    /// Reads `config.shards` and connects to shards not seen before.
    pub async fn reload_shards(&self) -> MongoResult<Vec<Arc<Shard>>> {
        let docs = catalog::shards(&self.config).await?;
        let mut list = Vec::new();
        for d in docs {
            let name = d.get_str("_id").unwrap_or_default().to_string();
            let host = d.get_str("host").unwrap_or_default().to_string();
            let existing = self
                .shards
                .read()
                .iter()
                .find(|s| s.name == name && s.host == host)
                .cloned();
            let shard = match existing {
                Some(s) => s,
                None => Arc::new(self.connect(&name, &host)?),
            };
            list.push(shard);
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        *self.shards.write() = list.clone();
        Ok(list)
    }

    /// A handle on the replica set `host` names (`set/h1,h2`), watched until shutdown.
    pub fn connect(&self, name: &str, host: &str) -> MongoResult<Shard> {
        let handle = self.handle_for(host)?;
        tokio::spawn(handle.clone().monitor(self.shutdown.clone()));
        Ok(Shard {
            name: name.to_string(),
            host: host.to_string(),
            handle,
        })
    }

    /// A handle on the replica set `host` names, not watched (a probe).
    pub fn handle_for(&self, host: &str) -> MongoResult<ShardHandle> {
        let members = host.split_once('/').map_or(host, |(_, m)| m);
        replica_set_of(members, &self.links, &self.site)
            .and_then(|h| {
                h.with_cluster_key(self.cluster_key.clone())
                    .map_err(crate::RouterError::Config)
            })
            .map(|h| h.with_forward_slots(self.forward_slots))
            .map_err(|e| MongoError::new(ErrorCode::BadValue, e.to_string()))
    }

    /// Where a command on `db` (and collection `coll`, if it names one) goes. `creates`:
    /// the command may create the database, so it gets a primary shard if it has none.
    pub async fn route(&self, db: &str, coll: Option<&str>, creates: bool) -> MongoResult<Route> {
        if db == "config" || db == "admin" {
            return Ok(Route::One(self.config.clone(), None));
        }
        if let Some(coll) = coll {
            if let Some(table) = self.table(&format!("{db}.{coll}")).await? {
                return Ok(Route::Sharded(table));
            }
        }
        let (shard, version) = self.primary_at(db, creates).await?;
        Ok(Route::One(shard.handle.clone(), version))
    }

    /// The routing table of `ns`, or `None` when it is not sharded.
    pub async fn table(&self, ns: &str) -> MongoResult<Option<Arc<RoutingTable>>> {
        use std::sync::atomic::Ordering::Relaxed;
        let cached = self.tables.read().get(ns).cloned();
        if let Some(c) = &cached {
            if c.fetched.elapsed() < self.catalog_cache || c.refreshing.swap(true, Relaxed) {
                return Ok(c.table.clone());
            }
        }
        self.fetch(ns, cached).await
    }

    /// Reads the routing of `ns` from the catalog now, whatever the cache holds: only
    /// what changed since the cached version, when there is one.
    pub async fn refresh(&self, ns: &str) -> MongoResult<Option<Arc<RoutingTable>>> {
        let cached = self.tables.read().get(ns).cloned();
        self.fetch(ns, cached).await
    }

    async fn fetch(
        &self,
        ns: &str,
        cached: Option<Arc<CachedTable>>,
    ) -> MongoResult<Option<Arc<RoutingTable>>> {
        use std::sync::atomic::Ordering::Relaxed;
        let base = cached.as_ref().and_then(|c| c.table.as_deref());
        let table = match catalog::routing_table(&self.config, ns, base).await {
            Ok(t) => t.map(Arc::new),
            Err(e) => {
                // The next command tries again.
                if let Some(c) = &cached {
                    c.refreshing.store(false, Relaxed);
                }
                return Err(e);
            }
        };
        self.tables.write().insert(
            ns.to_string(),
            Arc::new(CachedTable {
                table: table.clone(),
                fetched: Instant::now(),
                refreshing: Default::default(),
            }),
        );
        Ok(table)
    }

    /// Forgets what this router knows of `ns` (after it sharded or dropped it).
    pub fn forget(&self, ns: &str) {
        self.tables.write().remove(ns);
    }

    /// Forgets a dropped database and its collections.
    /// Forgets the cached primary of `db` (after `StaleDbVersion` or a `movePrimary`).
    pub fn forget_primary(&self, db: &str) {
        self.primaries.write().remove(db);
    }

    pub fn forget_database(&self, db: &str) {
        self.primaries.write().remove(db);
        let prefix = format!("{db}.");
        self.tables.write().retain(|ns, _| !ns.starts_with(&prefix));
    }

    /// The primary shard of `db`. A database the catalog does not know yet is adopted
    /// from the shard that already holds it (data from before sharding), or, when the
    /// command may create it, placed on a shard chosen by its name.
    pub async fn primary(&self, db: &str, creates: bool) -> MongoResult<Arc<Shard>> {
        Ok(self.primary_at(db, creates).await?.0)
    }

    /// The primary shard of `db` and the database version it is primary at.
    pub async fn primary_at(&self, db: &str, creates: bool) -> MongoResult<Primary> {
        if let Some(cached) = self.primaries.read().get(db) {
            return Ok(cached.clone());
        }
        let shards = self.shards().await?;
        if shards.is_empty() {
            return Err(MongoError::new(
                ErrorCode::ShardNotFound,
                "the cluster has no shards: add one with addShard",
            ));
        }
        let (name, version) = match catalog::database_primary(&self.config, db).await? {
            Some(found) => found,
            None => match holder(&shards, db).await {
                Some(name) => catalog::create_database(&self.config, db, &name).await?,
                None if creates => {
                    let pick = &shards[placement(db, shards.len())].name;
                    catalog::create_database(&self.config, db, pick).await?
                }
                // Nothing to read: any shard answers "nothing" correctly.
                None => return Ok((shards[0].clone(), None)),
            },
        };
        let shard = self.shard(&name).await?;
        let entry = (shard, Some(version));
        self.primaries.write().insert(db.to_string(), entry.clone());
        Ok(entry)
    }
}

/// The cluster of a router serving one, for the sharding admin commands.
pub fn require(session: &Session) -> MongoResult<&Cluster> {
    session.state.cluster.as_ref().ok_or_else(|| {
        MongoError::new(
            ErrorCode::IllegalOperation,
            "this router serves a single unsharded replica set: start it with config_servers \
             (bulwark local does) to shard",
        )
    })
}

/// Refuses sharding admin commands outside the `admin` database, as mongos does.
pub fn admin_only(db: &str, name: &str) -> MongoResult<()> {
    if db == "admin" {
        return Ok(());
    }
    Err(MongoError::new(
        ErrorCode::Unauthorized,
        format!("{name} may only be run against the admin database."),
    ))
}

/// Runs an internal command on a shard and checks its answer.
pub async fn internal(
    handle: &ShardHandle,
    db: &str,
    cmd: &Document,
    writes: bool,
) -> MongoResult<Document> {
    let fwd = Forward {
        writes,
        ..Default::default()
    };
    let (reply, _, _) = handle.run(db, cmd, &fwd, "router-sharding").await?;
    crate::shard_client::reply_ok(reply)
}

impl Cluster {
    /// Adds `shards` (name, `name/hosts`) to the catalog, as `addShard` would, and puts
    /// them in `zones` (shard, zone), as `addShardToZone` would, retrying until the
    /// config servers accept each (they may still be electing a primary) or `shutdown`;
    /// then reads the shard list again.
    pub async fn add_shards_at_start(
        &self,
        shards: Vec<(String, String)>,
        zones: Vec<(String, String)>,
    ) {
        for (name, host) in shards {
            let added = self
                .until_accepted(&name, || catalog::add_shard(&self.config, &name, &host))
                .await;
            if !added {
                return;
            }
            tracing::info!(shard = %name, %host, "shard in the catalog");
        }
        for (shard, zone) in zones {
            let set = || catalog::set_shard_zone(&self.config, &shard, &zone, true);
            if !self.until_accepted(&shard, set).await {
                return;
            }
            tracing::info!(%shard, %zone, "shard in its zone");
        }
        if let Err(e) = self.reload_shards().await {
            tracing::warn!(error = %e, "reading the shard list after adding shards");
        }
        tracing::info!("shards added at start are in the catalog");
    }

    /// Retries `step` (a catalog change for `shard`) every 250 ms until it succeeds;
    /// false if the router shut down first.
    async fn until_accepted<F, Fut>(&self, shard: &str, step: F) -> bool
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = MongoResult<()>>,
    {
        for attempt in 0u32.. {
            match step().await {
                Ok(()) => return true,
                // A duplicate key: another router's insert won the race, which the next
                // attempt reads as the shard being there.
                Err(e) if attempt % 20 == 0 && e.code != ErrorCode::DuplicateKey as i32 => {
                    tracing::warn!(%shard, error = %e, "changing the catalog at start; retrying")
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return false,
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
        false
    }

    /// Forgets every cached table and primary (`flushRouterConfig`).
    pub fn flush(&self) {
        self.tables.write().clear();
        self.primaries.write().clear();
    }
}

/// What the router does with a forwarded command in a sharded cluster.
pub enum Routed {
    /// Forward it whole to this shard.
    To(ShardHandle),
    /// Forward it whole to this shard, the primary shard of the database of a collection
    /// this router believes unsharded: it carries `shardVersion: "UNSHARDED"`, and a
    /// shard that knows the collection as sharded answers `StaleConfig`. It also carries
    /// the database version, when the database exists.
    Unsharded(ShardHandle, Option<i64>),
    /// Forward it whole to the database's primary shard, at this database version (a
    /// command about the database rather than one collection).
    Primary(ShardHandle, i64),
    /// Forward it whole to the one shard of a sharded collection it needs, at the
    /// table's version.
    Targeted(Arc<Shard>, Arc<RoutingTable>),
    /// Scatter it over the shards of this sharded collection.
    Scatter(Arc<RoutingTable>),
    /// It is done: this is the reply.
    Answered(Document),
}

/// Decides where `name` goes, about collection `coll` when it names one. Commands about
/// whole databases are answered here.
pub async fn route_command(
    session: &Session,
    cluster: &Cluster,
    name: &str,
    db: &str,
    cmd: &Document,
    fwd: &Forward,
    coll: Option<&str>,
) -> MongoResult<Routed> {
    match name {
        "listDatabases" => {
            return databases::list(session, cluster, cmd)
                .await
                .map(Routed::Answered)
        }
        "dropDatabase" if db != "admin" && db != "config" => {
            return databases::drop(cluster, db).await.map(Routed::Answered)
        }
        "renameCollection" => return databases::rename_target(cluster, cmd).await.map(Routed::To),
        _ => {}
    }
    match cluster.route(db, coll, fwd.writes).await? {
        Route::One(h, version) if coll.is_some() && db != "config" && db != "admin" => {
            Ok(Routed::Unsharded(h, version))
        }
        Route::One(h, Some(version)) => Ok(Routed::Primary(h, version)),
        Route::One(h, None) => Ok(Routed::To(h)),
        Route::Sharded(table) => match single_target(name, cmd, &table) {
            Some(shard) => Ok(Routed::Targeted(cluster.shard(&shard).await?, table)),
            None => Ok(Routed::Scatter(table)),
        },
    }
}

/// The one shard a read on a sharded collection needs, when its filter names one: it
/// then goes there whole, cursor and all, with nothing to merge.
fn single_target(name: &str, cmd: &Document, table: &RoutingTable) -> Option<String> {
    let filter = match name {
        "find" => cmd.get_document("filter").cloned().unwrap_or_default(),
        "count" | "distinct" => cmd.get_document("query").cloned().unwrap_or_default(),
        "aggregate" => {
            let stages = cmd.get_array("pipeline").ok()?;
            if !scatter::shard_local(stages) {
                return None;
            }
            scatter::leading_filter(cmd)
        }
        _ => return None,
    };
    let mut shards = table.shards_for(&filter);
    (shards.len() == 1).then(|| shards.remove(0))
}

/// The shard that already has database `db`, if one does.
async fn holder(shards: &[Arc<Shard>], db: &str) -> Option<String> {
    let cmd = bson::doc! {"listDatabases": 1, "nameOnly": true, "filter": {"name": db}};
    for s in shards {
        let reply = s
            .handle
            .run("admin", &cmd, &Default::default(), "router-catalog")
            .await
            .ok()
            .and_then(|(r, _, _)| crate::shard_client::reply_ok(r).ok());
        let found = reply
            .as_ref()
            .and_then(|r| r.get_array("databases").ok())
            .is_some_and(|d| !d.is_empty());
        if found {
            return Some(s.name.clone());
        }
    }
    None
}

/// A new database's shard: a stable hash of its name, so that routers racing to create
/// it propose the same shard.
fn placement(db: &str, shards: usize) -> usize {
    let h = db.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (h % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_stable_and_in_range() {
        for db in ["a", "test", "orders"] {
            let p = placement(db, 3);
            assert!(p < 3);
            assert_eq!(p, placement(db, 3));
        }
    }
}
