//! The shard's catalog: which collections exist, their storage tables and indexes.
//!
//! The catalog lives in the `_catalog` table (one BSON document per namespace) and is
//! cached in memory as immutable `Arc<CollectionMeta>` snapshots. DDL builds a new
//! snapshot and swaps it in, so readers never hold a lock while they scan.
//!
//! The modules here are what a collection's or a database's metadata carries, and what
//! is checked against it: how records and index entries are keyed in the tables the
//! catalog names (`keys`), the change log a migration's donor keeps per collection
//! (`moves`), the placement `movePrimary` gives a database (`db_placement`), the checks of
//! a router's versions against ownership and placement (`shard_version`, `db_placement`),
//! and whether a member's in-memory catalog reflects every change it applied (`sync`).
//! Every reader and writer starts from the catalog; with what it carries kept here, the
//! catalog depends on nothing else in the crate but replication (it is replicated) and
//! errors.

pub mod db_placement;
pub mod keys;
pub mod moves;
pub mod shard_version;
pub mod sync;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::repl::Unresolved;

use bson::{doc, Bson, Document};
use query::matcher::Matcher;
use storage::{Engine, KeyRange, WriteBatch};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::error::storage_to_mongo;
use crate::execution::change_events;
use crate::repl::events::Kind;
use db_placement::DbPlacement;
use moves::MoveLog;
use query::ownership::Ownership;

pub const CATALOG_TABLE: &str = "_catalog";

/// Whether collection `ns`'s catalog row now differs from the row as of `at`: it was
/// created, dropped or recreated since, or its indexes or ownership changed. Catalog
/// rows are written at their entries' times, so the two rows are equal exactly when the
/// collection is the one that time saw.
pub fn row_changed_since(
    engine: &dyn Engine,
    ns: &str,
    at: storage::Timestamp,
) -> MongoResult<bool> {
    let then = engine
        .get_at(CATALOG_TABLE, ns.as_bytes(), at)
        .map_err(crate::error::storage_to_mongo)?;
    let now = engine
        .get(CATALOG_TABLE, ns.as_bytes())
        .map_err(crate::error::storage_to_mongo)?;
    Ok(then != now)
}

/// How one component of an index key is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Ascending,
    Descending,
    Hashed,
}

#[derive(Debug, Clone)]
pub struct IndexMeta {
    pub name: String,
    pub key: Document,
    pub fields: Vec<(String, KeyKind)>,
    pub unique: bool,
    pub sparse: bool,
    pub partial: Option<Matcher>,
    pub expire_after_seconds: Option<i64>,
    /// Set once any document produced more than one key; bounds are then not intersected.
    pub multikey: bool,
    pub table: String,
    /// The spec as the user gave it (without our `table`), for listIndexes.
    pub spec: Document,
}

impl IndexMeta {
    pub fn is_id(&self) -> bool {
        self.name == "_id_"
    }
}

#[derive(Debug)]
pub struct CollectionMeta {
    pub db: String,
    pub name: String,
    pub table: String,
    pub uuid: bson::Uuid,
    pub options: Document,
    /// Secondary indexes. The `_id` index is the collection table itself (clustered by `_id`).
    pub indexes: Vec<IndexMeta>,
    /// Writers that read a pre-image (update, delete, findAndModify, TTL) and DDL take it
    /// exclusively, so index maintenance reads a stable pre-image and an index build
    /// sees every document. Inserts read no pre-image and share it: WiredTiger orders
    /// concurrent inserts (a duplicate key is a conflict or KeyExists there), and
    /// multikey flips serialise on `Catalog::flips`. Readers never take it.
    pub write_lock: Arc<RwLock<()>>,
    /// This shard's part of the collection when it is sharded (replicated with the
    /// catalog, so a new primary knows it and any critical section in progress).
    pub ownership: Option<Arc<Ownership>>,
    /// Documents changed while a migration copies a range out (kept across snapshots).
    pub moves: Arc<MoveLog>,
    /// Ownerships this collection had before its current one, as long as anything still
    /// reads with them (a cursor opened before a migration committed, a command in
    /// flight): the range deleter keeps what they may still return (kept across
    /// snapshots).
    pub retired: Arc<Mutex<Vec<Weak<Ownership>>>>,
}

impl CollectionMeta {
    pub fn ns(&self) -> String {
        format!("{}.{}", self.db, self.name)
    }

    pub fn index(&self, name: &str) -> Option<&IndexMeta> {
        self.indexes.iter().find(|i| i.name == name)
    }

    fn to_document(&self) -> Document {
        let indexes: Vec<Bson> = self
            .indexes
            .iter()
            .map(|i| {
                let mut d = i.spec.clone();
                d.insert("table", i.table.clone());
                d.insert("multikey", i.multikey);
                Bson::Document(d)
            })
            .collect();
        doc! {
            "db": &self.db, "name": &self.name, "table": &self.table,
            "uuid": self.uuid, "options": self.options.clone(), "indexes": indexes,
            "ownership": self.ownership.as_ref().map(|o| Bson::Document(o.to_document())),
        }
    }

    /// A copy with different metadata but the same write lock (DDL replaces snapshots).
    pub fn derive(&self, indexes: Vec<IndexMeta>) -> CollectionMeta {
        CollectionMeta {
            db: self.db.clone(),
            name: self.name.clone(),
            table: self.table.clone(),
            uuid: self.uuid,
            options: self.options.clone(),
            indexes,
            write_lock: self.write_lock.clone(),
            ownership: self.ownership.clone(),
            moves: self.moves.clone(),
            retired: self.retired.clone(),
        }
    }

    /// The earlier ownerships something still reads with (see `retired`).
    pub fn older_readers(&self) -> Vec<Arc<Ownership>> {
        let mut retired = self.retired.lock();
        retired.retain(|w| w.strong_count() > 0);
        retired.iter().filter_map(Weak::upgrade).collect()
    }

    /// A copy owning `ownership` instead; the one it replaces is retired.
    pub fn with_ownership(&self, ownership: Ownership) -> CollectionMeta {
        if let Some(old) = &self.ownership {
            let mut retired = self.retired.lock();
            retired.retain(|w| w.strong_count() > 0);
            retired.push(Arc::downgrade(old));
        }
        CollectionMeta {
            ownership: Some(Arc::new(ownership)),
            ..self.derive(self.indexes.clone())
        }
    }
}

pub struct Catalog {
    /// Taken briefly, never across a replicated write: every command reads it, point reads
    /// included, and those run on the runtime's workers, which also carry this member's
    /// Raft traffic. Held across the write, it let two point reads park both workers until
    /// the write's own replication (which needs them) timed out.
    collections: RwLock<BTreeMap<String, Arc<CollectionMeta>>>,
    /// Serializes the DDL that adds, renames or places namespaces across its replicated
    /// catalog write, so that two creates of one namespace cannot both make a table.
    writes: Mutex<()>,
    next_table: Mutex<u64>,
    /// Held while a write marks indexes multikey: it stages the collection's newest
    /// metadata with its flips, so two inserts flipping different indexes of one
    /// collection at once cannot each write back the other's index as not multikey.
    pub flips: Mutex<()>,
    /// Databases a `movePrimary` moved to or from this shard (see `db_placement`).
    placements: RwLock<BTreeMap<String, DbPlacement>>,
    /// Set once any placement exists: until then checking a command's database version
    /// is one relaxed load of a flag nobody writes, not a lock on a shared cache line.
    any_placement: AtomicBool,
    /// Per database: DDL routed to it as its primary shard holds it shared; entering a
    /// move's critical section takes it exclusively, so no collection appears unseen.
    ddl: Mutex<HashMap<String, Arc<RwLock<()>>>>,
    /// On a replica-set member: entries whose proposer gave up at `wtimeout`. Writers wait
    /// for their outcome under the collection's lock (see [`Catalog::exclusive`]).
    unresolved: OnceLock<Arc<Unresolved>>,
    /// A member's prepared transactions: a table they hold is not dropped.
    prepared: OnceLock<Arc<crate::repl::prepared::Prepared>>,
}

/// What the catalog table holds: collections by namespace, placements by database, and
/// the highest table number in use.
type CatalogContents = (
    BTreeMap<String, Arc<CollectionMeta>>,
    BTreeMap<String, DbPlacement>,
    u64,
);

impl Catalog {
    pub fn load(engine: &dyn Engine) -> MongoResult<Catalog> {
        engine
            .create_table(CATALOG_TABLE)
            .map_err(storage_to_mongo)?;
        let (map, placements, max_table) = read_catalog(engine)?;
        Ok(Catalog {
            collections: RwLock::new(map),
            writes: Mutex::new(()),
            next_table: Mutex::new(max_table + 1),
            flips: Mutex::new(()),
            any_placement: AtomicBool::new(!placements.is_empty()),
            placements: RwLock::new(placements),
            ddl: Mutex::new(HashMap::new()),
            unresolved: OnceLock::new(),
            prepared: OnceLock::new(),
        })
    }

    /// What a `movePrimary` left here for `db`, if anything.
    pub fn placement(&self, db: &str) -> Option<DbPlacement> {
        if !self.any_placement.load(Ordering::Relaxed) {
            return None;
        }
        self.placements.read().get(db).copied()
    }

    /// Records `placement` for `db` (replicated with the catalog table).
    pub fn set_placement(
        &self,
        engine: &dyn Engine,
        db: &str,
        placement: DbPlacement,
    ) -> MongoResult<()> {
        let _writes = self.writes.lock();
        let mut batch = WriteBatch::default();
        batch.put(
            CATALOG_TABLE,
            db.as_bytes().to_vec(),
            bson::to_vec(&placement.to_document(db)).unwrap(),
        );
        engine.write(&batch).map_err(storage_to_mongo)?;
        self.placements.write().insert(db.to_string(), placement);
        self.any_placement.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Forgets `db`'s placement (the database was dropped: a new one of the same name
    /// starts again at version 1 wherever it is placed).
    pub fn clear_placement(&self, engine: &dyn Engine, db: &str) -> MongoResult<()> {
        let _writes = self.writes.lock();
        if self.placement(db).is_none() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        batch.delete(CATALOG_TABLE, db.as_bytes().to_vec());
        engine.write(&batch).map_err(storage_to_mongo)?;
        self.placements.write().remove(db);
        Ok(())
    }

    /// Makes writers wait for the outcome of `unresolved` entries (a member's).
    pub fn await_unresolved_of(&self, unresolved: Arc<Unresolved>) {
        let _ = self.unresolved.set(unresolved);
    }

    /// Makes drops wait for the prepared transactions of `prepared` (a member's) that hold
    /// the dropped tables.
    pub fn await_prepared_of(&self, prepared: Arc<crate::repl::prepared::Prepared>) {
        let _ = self.prepared.set(prepared);
    }

    /// Waits (up to the thread's limit, `storage::prepare_wait`) until no prepared
    /// transaction holds a table of `meta`: its drop would be refused after the catalog
    /// row is gone, leaving the tables behind.
    fn await_prepared(&self, meta: &CollectionMeta) -> MongoResult<()> {
        let Some(prepared) = self.prepared.get() else {
            return Ok(());
        };
        let tables: Vec<&str> = std::iter::once(meta.table.as_str())
            .chain(meta.indexes.iter().map(|i| i.table.as_str()))
            .collect();
        let until = storage::prepare_wait::limit();
        while prepared.holds_any(&tables) {
            if std::time::Instant::now() >= until {
                return Err(MongoError::new(
                    ErrorCode::LockTimeout,
                    format!(
                        "{} has prepared transactions: it cannot be dropped until they end",
                        meta.ns()
                    ),
                ));
            }
            prepared.wait_any_resolution(
                (std::time::Instant::now() + std::time::Duration::from_millis(50)).min(until),
            );
        }
        Ok(())
    }

    fn await_unresolved(&self) {
        if let Some(u) = self.unresolved.get() {
            u.wait();
        }
    }

    /// A collection's `write_lock`, exclusively, once no timed-out write is unresolved:
    /// what a writer reads under it (pre-images, metadata) then includes every write
    /// proposed before it.
    pub fn exclusive<'a>(&self, lock: &'a RwLock<()>) -> RwLockWriteGuard<'a, ()> {
        let guard = lock.write();
        self.await_unresolved();
        guard
    }

    /// [`Catalog::exclusive`], shared (inserts).
    pub fn shared<'a>(&self, lock: &'a RwLock<()>) -> RwLockReadGuard<'a, ()> {
        let guard = lock.read();
        self.await_unresolved();
        guard
    }

    /// The lock DDL on `db` holds shared while a move's critical section may begin.
    pub fn ddl_lock(&self, db: &str) -> Arc<RwLock<()>> {
        self.ddl.lock().entry(db.to_string()).or_default().clone()
    }

    /// Re-reads the catalog table: a replica-set member calls this after applying a
    /// change its primary made to it.
    pub fn reload(&self, engine: &dyn Engine) -> MongoResult<()> {
        // Read the table under the write lock. Read first and a collection created in
        // between (its creator holds this lock until its entry is applied) would vanish
        // from the map until the next reload, and the next write to it would create it
        // again with a new table, orphaning the documents already written: the chaos
        // runner's lost-write checker caught exactly that on concurrent first writes.
        let mut current = self.collections.write();
        let (mut map, placements, max_table) = read_catalog(engine)?;
        // A collection keeps its write lock across reloads, renames included (matched by
        // UUID): commands holding it must still exclude each other.
        let by_uuid: HashMap<bson::Uuid, &Arc<CollectionMeta>> =
            current.values().map(|m| (m.uuid, m)).collect();
        for meta in map.values_mut() {
            if let Some(old) = by_uuid.get(&meta.uuid) {
                let fresh = Arc::get_mut(meta).expect("fresh");
                fresh.write_lock = old.write_lock.clone();
                fresh.moves = old.moves.clone();
                fresh.retired = old.retired.clone();
                // A member applying its primary's ownership change retires the one it
                // replaces, as the primary did: its cursors may still read with it.
                if let Some(replaced) = &old.ownership {
                    if fresh.ownership.as_ref().map(|o| o.as_ref()) != Some(replaced.as_ref()) {
                        let mut retired = fresh.retired.lock();
                        retired.retain(|w| w.strong_count() > 0);
                        retired.push(Arc::downgrade(replaced));
                    }
                }
            }
        }
        drop(by_uuid);
        *current = map;
        // Under the map's lock, so that two reloads install in the order they read.
        if !placements.is_empty() {
            self.any_placement.store(true, Ordering::Relaxed);
        }
        *self.placements.write() = placements;
        drop(current);
        let mut next = self.next_table.lock();
        *next = (*next).max(max_table + 1);
        Ok(())
    }

    pub fn get(&self, ns: &str) -> Option<Arc<CollectionMeta>> {
        self.collections.read().get(ns).cloned()
    }

    /// The namespace of the collection stored in `table` (a scan: for rare callers).
    pub fn namespace_of_table(&self, table: &str) -> Option<String> {
        self.collections
            .read()
            .values()
            .find(|m| m.table == table)
            .map(|m| m.ns())
    }

    pub fn list(&self, db: &str) -> Vec<Arc<CollectionMeta>> {
        let prefix = format!("{db}.");
        self.collections
            .read()
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn databases(&self) -> Vec<String> {
        let mut dbs: Vec<String> = self
            .collections
            .read()
            .values()
            .map(|m| m.db.clone())
            .collect();
        dbs.dedup();
        dbs
    }

    pub fn new_table_name(&self, prefix: &str) -> String {
        let mut n = self.next_table.lock();
        let name = format!("{prefix}{}", *n);
        *n += 1;
        name
    }

    /// Creates a collection (its table and catalog entry) unless it already exists.
    /// Returns the metadata and whether it was created.
    pub fn create_collection(
        &self,
        engine: &dyn Engine,
        db: &str,
        name: &str,
        options: Document,
    ) -> MongoResult<(Arc<CollectionMeta>, bool)> {
        wire::namespace::check(db, name)?;
        let ns = format!("{db}.{name}");
        if let Some(existing) = self.get(&ns) {
            return Ok((existing, false));
        }
        // A create that timed out may still apply: creating again would give the
        // collection a second table. Its outcome reloads the catalog, so it is awaited
        // before looking again.
        let _writes = self.writes.lock();
        self.await_unresolved();
        if let Some(existing) = self.get(&ns) {
            return Ok((existing, false));
        }
        let meta = CollectionMeta {
            db: db.to_string(),
            name: name.to_string(),
            table: self.new_table_name("c"),
            uuid: bson::Uuid::new(),
            options,
            indexes: Vec::new(),
            write_lock: Arc::new(RwLock::new(())),
            ownership: None,
            moves: Default::default(),
            retired: Default::default(),
        };
        engine.create_table(&meta.table).map_err(storage_to_mongo)?;
        let mut batch = WriteBatch::default();
        batch.put(
            CATALOG_TABLE,
            ns.as_bytes().to_vec(),
            bson::to_vec(&meta.to_document()).unwrap(),
        );
        let mut created = meta.options.clone();
        created.insert("idIndex", doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"});
        change_events::ddl(
            &mut batch,
            (Kind::Create, &ns, Some(meta.uuid)),
            Some(&created),
        );
        engine.write(&batch).map_err(storage_to_mongo)?;
        Ok((self.install_new(meta), true))
    }

    /// Adds the catalog write for `meta` to `batch`; call `install` after the batch commits.
    pub fn stage(&self, batch: &mut WriteBatch, meta: &CollectionMeta) {
        batch.put(
            CATALOG_TABLE,
            meta.ns().into_bytes(),
            bson::to_vec(&meta.to_document()).unwrap(),
        );
    }

    /// Installs a collection that DDL just added under its name (created, or renamed to
    /// it), unless the reload its replicated write triggered got there first: then that
    /// entry, with its write lock, is the one every command uses, this caller included.
    fn install_new(&self, meta: CollectionMeta) -> Arc<CollectionMeta> {
        let mut map = self.collections.write();
        match map.get(&meta.ns()) {
            Some(reloaded) if reloaded.uuid == meta.uuid => reloaded.clone(),
            _ => {
                let meta = Arc::new(meta);
                map.insert(meta.ns(), meta.clone());
                meta
            }
        }
    }

    /// Removes `ns` from the map if it still names `meta`'s collection (a reload may have
    /// removed it already, and a create may have made another under the name since).
    fn forget(&self, ns: &str, meta: &CollectionMeta) {
        let mut map = self.collections.write();
        if map.get(ns).is_some_and(|m| m.uuid == meta.uuid) {
            map.remove(ns);
        }
    }

    pub fn install(&self, meta: CollectionMeta) -> Arc<CollectionMeta> {
        let meta = Arc::new(meta);
        self.collections.write().insert(meta.ns(), meta.clone());
        meta
    }

    /// Removes a namespace from the catalog and drops its tables.
    pub fn drop_collection(
        &self,
        engine: &dyn Engine,
        ns: &str,
    ) -> MongoResult<Option<Arc<CollectionMeta>>> {
        // Serialized with creates: one of the name that finished its write meanwhile
        // would otherwise install the dropped collection again, over a dropped table.
        let _writes = self.writes.lock();
        let Some(meta) = self.get(ns) else {
            return Ok(None);
        };
        self.await_prepared(&meta)?;
        // Forgotten here only once the catalog row's removal is replicated: a drop that
        // fails (not primary) leaves the collection as every member still has it.
        let mut batch = WriteBatch::default();
        batch.delete(CATALOG_TABLE, ns.as_bytes().to_vec());
        change_events::ddl(&mut batch, (Kind::Drop, ns, Some(meta.uuid)), None);
        engine.write(&batch).map_err(storage_to_mongo)?;
        self.forget(ns, &meta);
        engine.drop_table(&meta.table).map_err(storage_to_mongo)?;
        for i in &meta.indexes {
            engine.drop_table(&i.table).map_err(storage_to_mongo)?;
        }
        Ok(Some(meta))
    }

    /// Moves a collection to a new namespace; its tables stay where they are.
    /// `dropped` is the collection the rename replaced (`dropTarget`), which its change
    /// event names.
    pub fn rename(
        &self,
        engine: &dyn Engine,
        from: &str,
        (to_db, to_name): (&str, &str),
        dropped: Option<bson::Uuid>,
    ) -> MongoResult<()> {
        wire::namespace::check(to_db, to_name)?;
        let _writes = self.writes.lock();
        let Some(old) = self.get(from) else {
            return Err(MongoError::new(
                ErrorCode::NamespaceNotFound,
                "source namespace does not exist",
            ));
        };
        // Checked again here, where no create can come between: renaming over a
        // collection would orphan its table.
        if self.get(&format!("{to_db}.{to_name}")).is_some() {
            return Err(MongoError::new(
                ErrorCode::NamespaceExists,
                "target namespace exists",
            ));
        }
        let meta = CollectionMeta {
            db: to_db.to_string(),
            name: to_name.to_string(),
            table: old.table.clone(),
            uuid: old.uuid,
            options: old.options.clone(),
            indexes: old.indexes.clone(),
            write_lock: old.write_lock.clone(),
            // A sharded collection is not renamed (the router refuses); a renamed one
            // starts unsharded.
            ownership: None,
            moves: Default::default(),
            retired: Default::default(),
        };
        let mut batch = WriteBatch::default();
        batch.delete(CATALOG_TABLE, from.as_bytes().to_vec());
        self.stage(&mut batch, &meta);
        let mut to = doc! {"to": meta.ns()};
        if let Some(uuid) = dropped {
            to.insert("dropTarget", uuid);
        }
        change_events::ddl(&mut batch, (Kind::Rename, from, Some(meta.uuid)), Some(&to));
        engine.write(&batch).map_err(storage_to_mongo)?;
        self.forget(from, &old);
        self.install_new(meta);
        Ok(())
    }
}

fn table_number(table: &str) -> u64 {
    table
        .trim_start_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .unwrap_or(0)
}

fn meta_from_document(d: &Document) -> MongoResult<CollectionMeta> {
    let corrupt = |what: &str| MongoError::internal(format!("corrupt catalog entry: {what}"));
    let mut indexes = Vec::new();
    for i in d.get_array("indexes").map_err(|_| corrupt("indexes"))? {
        let Bson::Document(spec) = i else {
            return Err(corrupt("index"));
        };
        let mut spec = spec.clone();
        let table = spec
            .remove("table")
            .and_then(|t| t.as_str().map(str::to_string))
            .ok_or_else(|| corrupt("index table"))?;
        let multikey = spec
            .remove("multikey")
            .and_then(|b| b.as_bool())
            .unwrap_or(false);
        let mut meta = index_from_spec(&spec, table)?;
        meta.multikey = multikey;
        indexes.push(meta);
    }
    Ok(CollectionMeta {
        db: d.get_str("db").map_err(|_| corrupt("db"))?.to_string(),
        name: d.get_str("name").map_err(|_| corrupt("name"))?.to_string(),
        table: d
            .get_str("table")
            .map_err(|_| corrupt("table"))?
            .to_string(),
        uuid: match d.get("uuid") {
            Some(Bson::Binary(b)) => {
                bson::Uuid::from_bytes(b.bytes.clone().try_into().map_err(|_| corrupt("uuid"))?)
            }
            _ => return Err(corrupt("uuid")),
        },
        options: d.get_document("options").cloned().unwrap_or_default(),
        indexes,
        write_lock: Arc::new(RwLock::new(())),
        ownership: match d.get("ownership") {
            Some(Bson::Document(o)) => Some(Arc::new(Ownership::from_document(o)?)),
            _ => None,
        },
        moves: Default::default(),
        retired: Default::default(),
    })
}

/// Validates an index specification (as given to createIndexes) into `IndexMeta`.
/// Every collection in the catalog table, and the highest table number in use.
fn read_catalog(engine: &dyn Engine) -> MongoResult<CatalogContents> {
    let mut map = BTreeMap::new();
    let mut placements = BTreeMap::new();
    let mut max_table = 0u64;
    for (_, value) in engine
        .scan(CATALOG_TABLE, &KeyRange::all(), false, usize::MAX)
        .map_err(storage_to_mongo)?
    {
        let d = Document::from_reader(&mut value.as_slice())
            .map_err(|e| MongoError::internal(format!("corrupt catalog entry: {e}")))?;
        if let Some((db, p)) = DbPlacement::from_document(&d)? {
            placements.insert(db, p);
            continue;
        }
        let meta = meta_from_document(&d)?;
        max_table = max_table.max(table_number(&meta.table));
        for i in &meta.indexes {
            max_table = max_table.max(table_number(&i.table));
        }
        map.insert(meta.ns(), Arc::new(meta));
    }
    Ok((map, placements, max_table))
}

pub fn index_from_spec(spec: &Document, table: String) -> MongoResult<IndexMeta> {
    let bad = |m: String| MongoError::new(ErrorCode::CannotCreateIndex, m);
    let key = match spec.get("key") {
        Some(Bson::Document(k)) if !k.is_empty() => k.clone(),
        Some(Bson::Document(_)) => return Err(bad("Index keys cannot be an empty field.".into())),
        _ => {
            return Err(MongoError::failed_to_parse(
                "The 'key' field is a required property of an index specification",
            ))
        }
    };
    let name = match spec.get("name") {
        Some(Bson::String(n)) if !n.is_empty() => n.clone(),
        Some(_) => {
            return Err(MongoError::type_mismatch(
                "The field 'name' must be a non-empty string",
            ))
        }
        None => {
            return Err(MongoError::failed_to_parse(
                "The 'name' field is a required property of an index specification",
            ))
        }
    };
    let mut fields = Vec::new();
    for (path, dir) in &key {
        if path.is_empty() || path.starts_with('$') && path != "$**" {
            return Err(bad(format!(
                "Index key contains an illegal field name: '{path}'"
            )));
        }
        let kind = match dir {
            Bson::String(s) if s == "hashed" => KeyKind::Hashed,
            Bson::String(s) => {
                return Err(bad(format!("Unknown index plugin '{s}'")));
            }
            v => match v
                .as_f64()
                .or_else(|| v.as_i64().map(|x| x as f64))
                .or_else(|| v.as_i32().map(|x| x as f64))
            {
                Some(x) if x > 0.0 => KeyKind::Ascending,
                Some(x) if x < 0.0 => KeyKind::Descending,
                _ => {
                    return Err(bad(format!(
                        "Values in the index key pattern can't be zero or non-numeric: {v}"
                    )))
                }
            },
        };
        fields.push((path.clone(), kind));
    }
    let flag = |f: &str| {
        spec.get(f)
            .map(|v| matches!(v, Bson::Boolean(true)) || v.as_i32() == Some(1))
            .unwrap_or(false)
    };
    let unique = flag("unique");
    let partial = match spec.get("partialFilterExpression") {
        Some(Bson::Document(f)) => Some(Matcher::new(f)?),
        Some(_) => {
            return Err(MongoError::type_mismatch(
                "partialFilterExpression must be an object",
            ))
        }
        None => None,
    };
    let expire_after_seconds = match spec.get("expireAfterSeconds") {
        None => None,
        Some(v) => match v
            .as_i64()
            .or_else(|| v.as_i32().map(i64::from))
            .or_else(|| v.as_f64().map(|f| f as i64))
        {
            Some(s) if s >= 0 => Some(s),
            _ => {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    "TTL index 'expireAfterSeconds' option must be a non-negative number",
                ))
            }
        },
    };
    if unique && fields.iter().any(|(_, k)| *k == KeyKind::Hashed) {
        return Err(bad(
            "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.".into(),
        ));
    }
    Ok(IndexMeta {
        name,
        key,
        fields,
        unique,
        sparse: flag("sparse"),
        partial,
        expire_after_seconds,
        multikey: false,
        table,
        spec: spec.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;
    use storage::{Layer, MemoryEngine};

    /// An engine whose next write, once gated, waits until the test lets it through, as
    /// a replicated write waits for a majority: before it applies, or (`applied`) after,
    /// as a proposer waits to hear that its member applied the entry.
    struct Gated {
        below: MemoryEngine,
        gate: Mutex<Option<mpsc::Receiver<()>>>,
        applied: bool,
        /// Set once a write waits at the gate (with `applied`, after its rows are in).
        held: std::sync::atomic::AtomicBool,
    }

    impl Gated {
        fn new(applied: bool) -> Arc<Gated> {
            Arc::new(Gated {
                below: MemoryEngine::default(),
                gate: Mutex::new(None),
                applied,
                held: Default::default(),
            })
        }

        /// Gates the next write; sending on the result lets it through.
        fn close(&self) -> mpsc::Sender<()> {
            let (open, gate) = mpsc::channel();
            self.held.store(false, Ordering::SeqCst);
            *self.gate.lock() = Some(gate);
            open
        }

        /// Returns once a write waits at the gate: taking the gate is not enough, since an
        /// applied write's rows go in after it.
        fn until_held(&self) {
            while !self.held.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
    }

    impl Layer for Gated {
        fn below(&self) -> &dyn Engine {
            &self.below
        }

        fn write_layered(&self, batch: WriteBatch) -> storage::Result<()> {
            let gate = self.gate.lock().take();
            let wait = || {
                if let Some(gate) = &gate {
                    self.held.store(true, Ordering::SeqCst);
                    let _ = gate.recv();
                }
            };
            if self.applied {
                self.below.write_owned(batch)?;
                wait();
                Ok(())
            } else {
                wait();
                self.below.write_owned(batch)
            }
        }
    }

    fn create(catalog: &Arc<Catalog>, engine: &Arc<Gated>, name: &'static str) -> Creating {
        let (catalog, engine) = (catalog.clone(), engine.clone());
        std::thread::spawn(move || {
            catalog.create_collection(engine.as_ref(), "db", name, Document::new())
        })
    }

    #[test]
    fn a_create_waiting_for_its_write_leaves_lookups_free() {
        let engine = Gated::new(false);
        let catalog = Arc::new(Catalog::load(engine.as_ref()).unwrap());
        catalog
            .create_collection(engine.as_ref(), "db", "a", Document::new())
            .unwrap();
        let open = engine.close();
        let creating = create(&catalog, &engine, "b");
        engine.until_held();
        // The create now waits inside its write. A lookup must not wait for it: on a
        // member the lookup may hold the very thread the write's replication needs.
        let (found, looked) = mpsc::channel();
        let lookup = {
            let catalog = catalog.clone();
            std::thread::spawn(move || found.send(catalog.get("db.a").is_some()))
        };
        let seen = looked.recv_timeout(Duration::from_secs(60));
        open.send(()).unwrap();
        assert_eq!(
            seen,
            Ok(true),
            "the lookup finished while the create waited"
        );
        lookup.join().unwrap().unwrap();
        let (_, created) = creating.join().unwrap().unwrap();
        assert!(created);
        assert!(catalog.get("db.b").is_some());
    }

    type Creating = std::thread::JoinHandle<MongoResult<(Arc<CollectionMeta>, bool)>>;

    /// A create of `db.b` whose catalog row has applied and whose proposer waits, after
    /// the member reloaded its catalog for that row (commands then find the collection
    /// with the reload's lock). Sending on the sender lets the create return.
    fn created_and_reloaded() -> (Arc<Gated>, Arc<Catalog>, mpsc::Sender<()>, Creating) {
        let engine = Gated::new(true);
        let catalog = Arc::new(Catalog::load(engine.as_ref()).unwrap());
        // The table's creation goes through; the catalog row's write applies and waits.
        let open = engine.close();
        let creating = create(&catalog, &engine, "b");
        engine.until_held();
        catalog.reload(engine.as_ref()).unwrap();
        (engine, catalog, open, creating)
    }

    #[test]
    fn a_reload_between_a_create_applying_and_returning_keeps_one_write_lock() {
        let (_engine, catalog, open, creating) = created_and_reloaded();
        let seen = catalog.get("db.b").expect("reloaded");
        open.send(()).unwrap();
        let (created, _) = creating.join().unwrap().unwrap();
        let now = catalog.get("db.b").unwrap();
        assert!(Arc::ptr_eq(&seen.write_lock, &now.write_lock), "one lock");
        assert!(
            Arc::ptr_eq(&created.write_lock, &now.write_lock),
            "the creator's too"
        );
    }

    #[test]
    fn a_drop_during_a_create_does_not_leave_the_dropped_collection_installed() {
        let (engine, catalog, open, creating) = created_and_reloaded();
        let (done, dropped) = mpsc::channel();
        let dropping = {
            let (catalog, engine) = (catalog.clone(), engine.clone());
            std::thread::spawn(move || {
                let r = catalog.drop_collection(engine.as_ref(), "db.b");
                done.send(()).unwrap();
                r
            })
        };
        // The drop waits for the create: finishing first, it would leave the create to
        // install the collection it dropped.
        let early = dropped.recv_timeout(Duration::from_millis(200));
        open.send(()).unwrap();
        creating.join().unwrap().unwrap();
        assert!(dropping.join().unwrap().unwrap().is_some());
        assert!(
            early.is_err(),
            "the drop finished while the create was in flight"
        );
        assert!(catalog.get("db.b").is_none());
    }

    #[test]
    fn a_rename_keeps_the_collection_s_write_lock_through_a_reload() {
        let engine = Gated::new(true);
        let catalog = Arc::new(Catalog::load(engine.as_ref()).unwrap());
        let (a, _) = catalog
            .create_collection(engine.as_ref(), "db", "a", Document::new())
            .unwrap();
        let open = engine.close();
        let renaming = {
            let (catalog, engine) = (catalog.clone(), engine.clone());
            std::thread::spawn(move || catalog.rename(engine.as_ref(), "db.a", ("db", "b"), None))
        };
        engine.until_held();
        catalog.reload(engine.as_ref()).unwrap();
        open.send(()).unwrap();
        renaming.join().unwrap().unwrap();
        assert!(catalog.get("db.a").is_none());
        let b = catalog.get("db.b").unwrap();
        assert!(Arc::ptr_eq(&a.write_lock, &b.write_lock));
    }
}
