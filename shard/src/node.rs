//! A shard node: storage, catalog and cursors, and the entry point that runs a command.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document, RawDocument};
use storage::Engine;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::catalog::Catalog;
use crate::commands;
use crate::control::deadline::Deadline;
use crate::error::ShardError;
use crate::execution::cursor::Cursors;
use crate::repl::engine::ReplicatedEngine;
use crate::repl::snapshot_read;
use crate::repl::transport::RaftService;
use crate::repl::{self, ReplConfig, Replica};
use crate::sessions::retry::{self, RecordingEngine, Retry, SessionLocks};
use crate::sessions::write_concern::{self, WriteConcern};

/// Which storage engine a node runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineKind {
    WiredTiger { dir: PathBuf, cache_mb: usize },
    Memory,
}

pub struct Node {
    pub engine: Arc<dyn Engine>,
    /// The storage under `engine`: on a replica-set member WiredTiger itself, below
    /// replication, so a write to it reaches this member only (tests that damage one
    /// member's data); on a standalone node the same engine as `engine`.
    pub base: Arc<dyn Engine>,
    pub catalog: Catalog,
    pub cursors: Arc<Cursors>,
    pub started: Instant,
    /// Set when the node is a replica-set member (writes then go through Raft).
    pub replica: Option<Arc<Replica>>,
    /// One command at a time per session (retryable writes, transactions).
    pub sessions: SessionLocks,
    /// Open multi-document transactions (a primary's).
    pub transactions: Arc<crate::sessions::txn::Transactions>,
    /// Read and write ticket pools (see `admission`).
    pub admission: crate::control::admission::Admission,
    /// Operations in progress (`currentOp`, `killOp`).
    pub ops: Arc<crate::control::ops::Registry>,
    /// Whether the in-memory catalog reflects every applied catalog change (a member's).
    pub catalog_sync: Arc<crate::catalog::sync::CatalogSync>,
    /// Where blocking stages spill with `allowDiskUse`: `_tmp` in the data directory, as
    /// MongoDB's dbpath; None (the system's) for an in-memory node.
    pub spill_dir: Option<PathBuf>,
}

/// The versions a router routed a command with.
#[derive(Debug, Clone, Copy, Default)]
struct Routing {
    shard_version: Option<crate::catalog::shard_version::Routed>,
    db_version: Option<i64>,
    /// When a snapshot read reads (`repl::snapshot_read`).
    read_at: Option<storage::Timestamp>,
}

/// Writes that check the database's placement again under their collection's write lock
/// (`Ctx::check_owner`) instead of holding its DDL lock: they are the hot path.
const HOT_WRITES: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
];

/// How long a linearizable read without `maxTimeMS` waits to confirm the primary.
const LINEARIZABLE_WAIT: Duration = Duration::from_secs(15);

/// How the router asked for a command to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    pub deadline: Deadline,
    /// The read preference allows a secondary (MongoDB's `secondaryOk`).
    pub secondary_ok: bool,
    pub write_concern: WriteConcern,
}

/// What a command handler sees besides its arguments.
pub struct Ctx<'a> {
    pub node: &'a Node,
    pub db: &'a str,
    pub deadline: Deadline,
    /// Where the command reads and writes: the node's engine, or for a retryable write
    /// the same engine recording the session's statements with each write.
    pub engine: &'a dyn Engine,
    /// Set for a retryable write (`lsid` + `txnNumber`).
    pub retry: Option<&'a Retry>,
    /// An `insert` whose documents came as raw BSON beside the command (see
    /// `commands::insert::split_raw`).
    pub raw_documents: Option<&'a [&'a RawDocument]>,
    /// The statement ids of a retryable write's statements, when the router gave them
    /// (`stmtIds`: it splits a client's batch over shards, and a statement keeps the id
    /// of its place in the client's batch). Otherwise a statement's id is its position.
    pub stmt_ids: Option<Vec<i32>>,
    /// The version the router routed a command on a sharded collection with.
    pub shard_version: Option<crate::catalog::shard_version::Routed>,
    /// The version of the database's primary shard a router routed the command with
    /// (`databaseVersion`, see `db_placement`).
    pub db_version: Option<i64>,
    /// The cluster time a snapshot read or a transaction reads at (`engine` reads as of
    /// it already).
    pub read_at: Option<storage::Timestamp>,
    /// The engine a cursor keeps reading through across `getMore`s when it is not the
    /// node's: a snapshot read's view at its time, or a transaction's.
    pub view: Option<Arc<dyn Engine>>,
    /// The transaction the command runs in.
    pub txn: Option<Arc<crate::sessions::txn::Txn>>,
}

impl Ctx<'_> {
    /// A cursor that goes on reading at the snapshot read's time across `getMore`s.
    pub fn at_time(
        &self,
        source: Box<dyn crate::execution::cursor::CursorSource>,
    ) -> Box<dyn crate::execution::cursor::CursorSource> {
        match &self.view {
            Some(engine) => Box::new(crate::execution::cursor::AtTime {
                source,
                engine: engine.clone(),
                txn: self.txn.clone(),
            }),
            None => source,
        }
    }

    /// A command's `allowDiskUse`, with where this node spills.
    pub fn disk_use(&self, allowed: bool) -> crate::execution::spill::DiskUse {
        crate::execution::spill::DiskUse {
            allowed,
            dir: self.node.spill_dir.clone(),
        }
    }

    /// For a retryable write: the recorded outcome of statement `stmt` if an earlier
    /// attempt executed it (the command then skips it); otherwise marks it current.
    pub fn begin_statement(&self, stmt: usize) -> Option<bson::Bson> {
        let r = self.retry?;
        let id = self.stmt_id(stmt);
        let done = r.executed(id);
        if done.is_none() {
            r.begin(id);
        }
        done
    }

    /// The id statement `i` of this command is recorded under.
    pub fn stmt_id(&self, i: usize) -> i32 {
        self.stmt_ids
            .as_ref()
            .and_then(|ids| ids.get(i).copied())
            .unwrap_or(i as i32)
    }

    /// For a write holding `held`'s write lock: the catalog's newest metadata of that
    /// collection, once the router's version is checked again to be this shard's and no
    /// migration is committing (both change under that lock).
    ///
    /// A write that waited for the lock while its collection was dropped or renamed finds
    /// another collection (or none) under the name: writing with what it held would write
    /// into the old table (renamed: another namespace's), or under the old lock. It answers
    /// `StaleConfig` instead, and the router routes it again, to the collection as it is.
    pub fn check_owner(
        &self,
        held: Arc<crate::catalog::CollectionMeta>,
    ) -> MongoResult<Arc<crate::catalog::CollectionMeta>> {
        let ns = held.ns();
        let current = self
            .node
            .catalog
            .get(&ns)
            .filter(|m| Arc::ptr_eq(&m.write_lock, &held.write_lock))
            .ok_or_else(|| {
                MongoError::new(
                    ErrorCode::StaleConfig,
                    format!("{ns} was dropped or renamed while this write waited for it"),
                )
            })?;
        self.check_version(&current, true)?;
        Ok(current)
    }

    /// For a read about to scan with `meta`: checks that its ownership is still at the
    /// router's version. The check when the command arrived read the catalog once; the
    /// scan filters orphans by the snapshot it holds, which may be newer, and a document
    /// the old version gave here and the new one gives elsewhere would be counted by
    /// neither shard.
    pub fn check_read(&self, meta: &crate::catalog::CollectionMeta) -> MongoResult<()> {
        self.check_version(meta, false)
    }

    /// For a snapshot read: refuses it when collection `ns` was created, dropped, or had
    /// its indexes changed after the read's time. Catalog rows are written at their
    /// entries' times, so the row as of the read's time equals today's exactly when the
    /// collection is the same one, with the same indexes (an index built later holds no
    /// entries at that time, and a table made later holds none of the old rows).
    /// MongoDB answers SnapshotUnavailable (246) for reads behind such catalog changes.
    pub fn same_collection_at_read_time(&self, ns: &str) -> MongoResult<()> {
        let Some(at) = self.read_at else {
            return Ok(());
        };
        if crate::catalog::row_changed_since(self.node.engine.as_ref(), ns, at)? {
            return Err(MongoError::new(
                ErrorCode::SnapshotUnavailable,
                format!(
                    "Unable to read from a snapshot due to pending collection catalog changes: \
                     {ns} was created, dropped or changed after the read's time"
                ),
            ));
        }
        Ok(())
    }

    fn check_version(
        &self,
        meta: &crate::catalog::CollectionMeta,
        writes: bool,
    ) -> MongoResult<()> {
        if let Some(v) = self.db_version {
            let placement = self.node.catalog.placement(self.db);
            crate::catalog::db_placement::check(self.db, placement, v, writes)?;
        }
        match &self.shard_version {
            Some(v) => crate::catalog::shard_version::check(|| meta.ns(), Some(meta), v, writes),
            None => Ok(()),
        }
    }

    /// For a retryable write: records `result` as the current statement's outcome, carried
    /// by the statement's write. Call it just before that write.
    pub fn record(&self, result: impl FnOnce() -> bson::Bson) {
        if let Some(r) = self.retry {
            r.stage_current(result());
        }
    }
}

/// The data directory's `_tmp`, made if missing. Spill files in it are anonymous, so there
/// is nothing to clean at start.
fn spill_dir(data: &Path) -> std::io::Result<PathBuf> {
    let dir = data.join("_tmp");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

impl Node {
    pub fn open(kind: &EngineKind, cursor_timeout: Duration) -> Result<Arc<Node>, ShardError> {
        let engine: Arc<dyn Engine> = match kind {
            EngineKind::WiredTiger { dir, cache_mb } => {
                std::fs::create_dir_all(dir)?;
                Arc::new(storage::WiredTigerEngine::open(dir, *cache_mb)?)
            }
            EngineKind::Memory => Arc::new(storage::MemoryEngine::default()),
        };
        engine.create_table(retry::TXN_TABLE)?;
        engine.create_table(crate::sessions::txn::decisions::TABLE)?;
        engine.create_table(crate::migrations::range_deleter::TABLE)?;
        engine.create_table(crate::migrations::doc_moves::TABLE)?;
        let catalog =
            Catalog::load(engine.as_ref()).map_err(|e| ShardError::Catalog(e.to_string()))?;
        Ok(Arc::new(Node {
            base: engine.clone(),
            engine,
            catalog,
            cursors: Cursors::new(cursor_timeout),
            started: Instant::now(),
            replica: None,
            sessions: SessionLocks::default(),
            transactions: Default::default(),
            admission: Default::default(),
            ops: Default::default(),
            catalog_sync: Default::default(),
            spill_dir: match kind {
                EngineKind::WiredTiger { dir, .. } => Some(spill_dir(dir)?),
                EngineKind::Memory => None,
            },
        }))
    }

    /// Opens a replica-set member: WiredTiger without its own journal (the Raft log in
    /// `dir/raft` is the only write-ahead log), joined to the set described by `repl`.
    /// Returns the node, the Raft service its peers send to, and a watch on its storage.
    pub fn open_member(
        dir: &Path,
        cache_mb: usize,
        cursor_timeout: Duration,
        repl: ReplConfig,
        auth: proto::cluster_auth::ClusterAuth,
        rt: &tokio::runtime::Handle,
    ) -> Result<(Arc<Node>, RaftService, storage::CloseWatch), ShardError> {
        std::fs::create_dir_all(dir)?;
        let data = open_member_data(dir, cache_mb)?;
        let closed = data.close_watch();
        let base: Arc<dyn Engine> = Arc::new(data);
        crate::repl::recover_interrupted_install(base.as_ref(), &dir.join("raft"))
            .map_err(ShardError::Catalog)?;
        // Every member creates the session table itself, before it applies any entry.
        base.create_table(retry::TXN_TABLE)?;
        base.create_table(crate::sessions::txn::decisions::TABLE)?;
        base.create_table(crate::migrations::range_deleter::TABLE)?;
        base.create_table(crate::migrations::doc_moves::TABLE)?;
        // The catalog is reloaded off the Raft thread: a command holding the catalog
        // lock may be waiting for that very thread to apply its write.
        let node_slot: Arc<OnceLock<Weak<Node>>> = Arc::new(OnceLock::new());
        let (reload_tx, reload_rx) = std::sync::mpsc::channel::<()>();
        let slot = node_slot.clone();
        let rollback_slot = node_slot.clone();
        let catalog_sync = Arc::new(crate::catalog::sync::CatalogSync::default());
        let sync = catalog_sync.clone();
        std::thread::Builder::new()
            .name("catalog-reload".into())
            .spawn(move || {
                while reload_rx.recv().is_ok() {
                    while reload_rx.try_recv().is_ok() {}
                    let covered = sync.reloading();
                    let Some(node) = slot.get().and_then(Weak::upgrade) else {
                        continue;
                    };
                    match node.catalog.reload(node.engine.as_ref()) {
                        Ok(()) => sync.reloaded(covered),
                        Err(e) => tracing::error!(error = %e, "catalog reload failed"),
                    }
                }
            })?;
        let changed = catalog_sync.clone();
        let (replica, service) = Replica::start(
            repl,
            base.clone(),
            &dir.join("raft"),
            Arc::new(move || {
                changed.changed();
                let _ = reload_tx.send(());
            }),
            Box::new(move |table: &str| {
                let node = rollback_slot.get().and_then(Weak::upgrade)?;
                node.catalog.namespace_of_table(table)
            }),
            auth,
            rt,
        )
        .map_err(ShardError::Catalog)?;
        let engine: Arc<dyn Engine> = Arc::new(ReplicatedEngine {
            base: base.clone(),
            replica: replica.clone(),
        });
        let catalog =
            Catalog::load(base.as_ref()).map_err(|e| ShardError::Catalog(e.to_string()))?;
        catalog.await_unresolved_of(replica.unresolved.clone());
        catalog.await_prepared_of(replica.prepared.clone());
        let reload_slot = node_slot.clone();
        replica.unresolved.then(Box::new(move || {
            if let Some(node) = reload_slot.get().and_then(Weak::upgrade) {
                if let Err(e) = node.catalog.reload(node.engine.as_ref()) {
                    tracing::error!(error = %e, "catalog reload failed");
                }
            }
        }));
        let node = Arc::new(Node {
            engine,
            base,
            catalog,
            cursors: Cursors::new(cursor_timeout),
            started: Instant::now(),
            replica: Some(replica),
            sessions: SessionLocks::default(),
            transactions: Arc::new(crate::sessions::txn::Transactions::for_cache(cache_mb)),
            admission: Default::default(),
            ops: Default::default(),
            catalog_sync,
            spill_dir: Some(spill_dir(dir)?),
        });
        let _ = node_slot.set(Arc::downgrade(&node));
        Ok((node, service, closed))
    }

    /// This member's cluster time (`proto::cluster_clock`); 0 on a node without
    /// replication, whose writes carry no time.
    pub fn cluster_time(&self) -> proto::cluster_clock::ClusterTime {
        self.replica.as_ref().map_or(0, |r| r.clock.now())
    }

    /// Moves the member's clock to a router's cluster time, so that its writes order after
    /// what the router saw on other shards. A time too far ahead of the wall clock is
    /// ignored (the clock refuses it).
    pub fn learn_cluster_time(&self, t: proto::cluster_clock::ClusterTime) {
        if let (Some(r), true) = (&self.replica, t > 0) {
            let _ = r.clock.advance(t);
        }
    }

    /// Which ticket pool a command draws from.
    pub fn admission_class(name: &str) -> crate::control::admission::Class {
        use crate::control::admission::Class;
        match commands::lookup(name) {
            Some(spec) if spec.anywhere => Class::Exempt,
            Some(_) if commands::RESOLVES_PREPARED.contains(&name) => Class::Exempt,
            Some(spec) if spec.writes => Class::Write,
            Some(_) => Class::Read,
            // Unknown commands fail at once; no ticket needed.
            None => Class::Exempt,
        }
    }

    /// Runs one command and returns its reply document (`ok: 1` or an error document).
    /// Blocking: call it from a blocking-capable thread.
    pub fn run_command(&self, db: &str, cmd: &Document, deadline: Deadline) -> Document {
        self.run_command_with(
            db,
            cmd,
            RunOptions {
                deadline,
                ..Default::default()
            },
        )
    }

    /// Runs one command as the router asked (read preference, write concern).
    pub fn run_command_with(&self, db: &str, cmd: &Document, opts: RunOptions) -> Document {
        self.run_command_raw(db, cmd, None, opts)
    }

    /// [`Node::run_command_with`] for an `insert` whose documents stay raw BSON.
    pub fn run_command_raw(
        &self,
        db: &str,
        cmd: &Document,
        raw_documents: Option<&[&RawDocument]>,
        opts: RunOptions,
    ) -> Document {
        let deadline = opts.deadline;
        let Some(name) = cmd.keys().next() else {
            return MongoError::failed_to_parse("empty command").to_document();
        };
        // Tables are named `{db}.{coll}`: a dotted database would reach another's.
        if let Err(e) = wire::namespace::check_db(db) {
            return e.to_document();
        }
        let Some(spec) = commands::lookup(name) else {
            return MongoError::new(
                ErrorCode::CommandNotFound,
                format!("no such command: '{name}'"),
            )
            .to_document();
        };
        if let Err(e) = deadline.check() {
            return e.to_document();
        }
        let run = || {
            crate::error::contain_panic(name, || {
                let read_at = self.read_concern(name, cmd, spec.writes, deadline)?;
                if !spec.writes {
                    self.await_timed_out_writes(&deadline)?;
                }
                let routed = Routing {
                    shard_version: crate::catalog::shard_version::received(cmd)?,
                    db_version: crate::catalog::db_placement::received(cmd)?,
                    read_at,
                };
                // Routed to the database's primary shard: run only if this is it. DDL holds
                // the database's DDL lock, so a move's critical section sees every collection.
                let _ddl = match routed.db_version {
                    Some(v) => {
                        crate::catalog::db_placement::check(
                            db,
                            self.catalog.placement(db),
                            v,
                            spec.writes,
                        )?;
                        let ddl = spec.writes && !HOT_WRITES.contains(&name.as_str());
                        ddl.then(|| self.catalog.ddl_lock(db))
                    }
                    None => None,
                };
                let _ddl_guard = _ddl.as_ref().map(|l| l.read());
                let Some(v) = routed.shard_version else {
                    return self.run_in_session(db, cmd, raw_documents, deadline, routed, spec.run);
                };
                // Routed to a sharded collection: run only at the router's version.
                let coll = cmd
                    .iter()
                    .next()
                    .and_then(|(_, c)| c.as_str())
                    .unwrap_or("");
                let ns = format!("{db}.{coll}");
                let meta = self.catalog.get(&ns);
                crate::catalog::shard_version::check(
                    || ns.clone(),
                    meta.as_deref(),
                    &v,
                    spec.writes,
                )?;
                // Handlers ignore the field: no copy of the command to remove it.
                self.run_in_session(db, cmd, raw_documents, deadline, routed, spec.run)
            })
        };
        let result = match &self.replica {
            None => run(),
            Some(_) if spec.anywhere => run(),
            Some(replica) => match member_admits(replica, spec.writes, &opts)
                .and_then(|scope| self.catalog_current(spec.writes).map(|()| scope))
            {
                Ok(scope) => repl::with_scope(scope, run).map_or_else(
                    |e| write_concern::from_error(e, &opts.write_concern),
                    |r| write_concern::from_write_errors(r, &opts.write_concern),
                ),
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(mut reply) => {
                if !reply.contains_key("ok") {
                    reply.insert("ok", 1.0);
                }
                reply
            }
            Err(e) => e.to_document(),
        }
    }

    /// A read on the member that proposed a write whose client stopped waiting at its
    /// `wtimeout` waits for that write's outcome (it is applied, or erased by a change of
    /// primary), as MongoDB's primary has applied such a write before it reports the
    /// timeout: a client that got the writeConcernError and reads next sees its write.
    /// Writers wait the same way under their collection's lock (`Catalog::exclusive`).
    /// Whether a write whose client stopped waiting at its `wtimeout` is still unresolved.
    pub fn timed_out_writes_pending(&self) -> bool {
        self.replica
            .as_ref()
            .is_some_and(|r| r.unresolved.pending())
    }

    pub(crate) fn await_timed_out_writes(&self, deadline: &Deadline) -> MongoResult<()> {
        if let Some(replica) = &self.replica {
            // In slices, so that the read's maxTimeMS and killOp still reach it.
            let slice = || replica.unresolved.wait_for(Duration::from_millis(50));
            while !crate::control::ops::blocking_wait(slice) {
                deadline.check_holding()?;
            }
        }
        Ok(())
    }

    /// Waits as the command's read concern asks; returns the time a snapshot read reads at
    /// (`repl::snapshot_read`).
    fn read_concern(
        &self,
        name: &str,
        cmd: &Document,
        writes: bool,
        deadline: Deadline,
    ) -> MongoResult<Option<storage::Timestamp>> {
        let Ok(rc) = cmd.get_document("readConcern") else {
            return Ok(None);
        };
        // A transaction reads at its own time (`sessions::txn`).
        if cmd.contains_key("autocommit") {
            return Ok(None);
        }
        if snapshot_read::requested(rc) {
            let limit = deadline.remaining();
            return snapshot_read::time(self.replica.as_deref(), name, rc, limit).map(Some);
        }
        self.wait_for_read_concern(rc, writes, deadline)
            .map(|()| None)
    }

    /// `readConcern: {level: "linearizable"}`: before the read, this member confirms with a
    /// majority that it is still primary and applies everything committed so far (Raft's
    /// ReadIndex), so the read sees every write acknowledged before it began.
    /// `afterClusterTime` (a causally consistent session) makes the member first apply
    /// everything committed before the read, as far as the primary knows
    /// (`Replica::catch_up`), so a secondary read sees every write its client saw
    /// acknowledged. Otherwise nothing is needed: a member applies only majority-committed
    /// entries, so `local` and `available` reads already return majority-committed data.
    fn wait_for_read_concern(
        &self,
        rc: &Document,
        writes: bool,
        deadline: Deadline,
    ) -> MongoResult<()> {
        let linearizable = rc.get_str("level").ok() == Some("linearizable");
        let causal = rc.contains_key("afterClusterTime");
        let Some(replica) = self.replica.as_ref().filter(|_| linearizable || causal) else {
            return Ok(());
        };
        if writes && linearizable {
            return Err(MongoError::new(
                ErrorCode::InvalidOptions,
                "linearizable read concern is only valid for reads",
            ));
        }
        if !linearizable && applied_since(rc, replica) {
            return Ok(());
        }
        let limit = deadline.remaining().unwrap_or(LINEARIZABLE_WAIT);
        let waited = if linearizable {
            replica.read_barrier(limit)
        } else {
            replica.catch_up(limit)
        };
        waited.map_err(|e| match e {
            repl::ProposeError::Timeout if deadline.0.is_some() => {
                MongoError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
            }
            repl::ProposeError::Timeout if linearizable => MongoError::new(
                ErrorCode::ExceededTimeLimit,
                "could not confirm the primary with a majority in time",
            ),
            repl::ProposeError::Timeout => MongoError::new(
                ErrorCode::ExceededTimeLimit,
                "could not learn the primary's commit point in time (afterClusterTime)",
            ),
            e => MongoError::new(e.code(), e.to_string()),
        })
    }

    /// Runs a handler; a retryable write (`lsid` + `txnNumber`) runs with its session
    /// checked out and its statements recorded.
    fn run_in_session(
        &self,
        db: &str,
        cmd: &Document,
        raw_documents: Option<&[&RawDocument]>,
        deadline: Deadline,
        routed: Routing,
        handler: commands::Handler,
    ) -> MongoResult<Document> {
        // A read that meets a prepared transaction waits for it until the deadline.
        let _limit = storage::prepare_wait::limit_until(deadline.0);
        let as_of: Option<Arc<dyn Engine>> = routed
            .read_at
            .map(|at| Arc::new(storage::AsOf::new(self.engine.clone(), at)) as _);
        let ctx = Ctx {
            node: self,
            db,
            deadline,
            engine: match &as_of {
                Some(view) => view.as_ref(),
                None => self.engine.as_ref(),
            },
            retry: None,
            raw_documents,
            stmt_ids: None,
            shard_version: routed.shard_version,
            db_version: routed.db_version,
            read_at: routed.read_at,
            view: as_of.clone(),
            txn: None,
        };
        if let Some(st) = crate::commands::transaction_statement::Statement::parse(cmd)? {
            return self.sessions.with(st.lsid, || {
                crate::commands::transaction_statement::run(ctx, cmd, &st, handler)
            })?;
        }
        let name = cmd.keys().next().map(String::as_str).unwrap_or_default();
        let session = match (cmd.get_document("lsid"), cmd.get("txnNumber")) {
            (Ok(lsid), Some(txn)) if retry::RETRYABLE.contains(&name) => {
                let txn = match txn {
                    bson::Bson::Int64(n) => *n,
                    bson::Bson::Int32(n) => *n as i64,
                    _ => return Err(MongoError::type_mismatch("txnNumber must be a long")),
                };
                Some((lsid, txn))
            }
            _ => None,
        };
        let Some((lsid, txn)) = session else {
            let mut reply = handler(&ctx, cmd)?;
            if let Some(at) = routed.read_at {
                snapshot_read::stamp(&mut reply, at);
            }
            return Ok(reply);
        };
        // A session whose transaction is prepared runs nothing else until it ends: its
        // commit would write the session's record back over this write's.
        if let Some(replica) = &self.replica {
            let key = retry::session_key(lsid)?;
            if !replica
                .prepared
                .await_session(&key, storage::prepare_wait::limit())
            {
                return Err(MongoError::new(
                    ErrorCode::PreparedTransactionInProgress,
                    "this session's transaction is prepared: it runs nothing else until it ends",
                ));
            }
        }
        self.sessions.with(lsid, || {
            let coll = cmd.get_str(name).unwrap_or_default();
            let ns = format!("{db}.{coll}");
            let retry = Arc::new(Retry::load(self.engine.as_ref(), lsid, txn, &ns)?);
            let recording = RecordingEngine {
                inner: self.engine.clone(),
                retry: retry.clone(),
            };
            // Statement ids matter only to a retryable write: looked up only for one.
            let ctx = Ctx {
                engine: &recording,
                retry: Some(&retry),
                stmt_ids: stmt_ids(cmd),
                ..ctx
            };
            handler(&ctx, cmd)
        })?
    }
}

/// `stmtIds` (or `findAndModify`'s `stmtId`) as the router sends them.
fn stmt_ids(cmd: &Document) -> Option<Vec<i32>> {
    let as_i32 = |v: &bson::Bson| match v {
        bson::Bson::Int32(n) => Some(*n),
        bson::Bson::Int64(n) => i32::try_from(*n).ok(),
        _ => None,
    };
    if let Ok(ids) = cmd.get_array("stmtIds") {
        return ids.iter().map(as_i32).collect();
    }
    cmd.get("stmtId").and_then(as_i32).map(|id| vec![id])
}

impl Node {
    /// Stops replication (tests that kill a member; the gRPC server stops separately).
    pub fn stop_replication(&self) {
        if let Some(r) = &self.replica {
            r.stop();
        }
    }

    /// How this member names itself (`host` in `currentOp`): its replica-set host, or
    /// "standalone".
    pub fn host_name(&self) -> String {
        self.replica
            .as_ref()
            .and_then(|r| r.config.me().ok().map(|m| m.host.clone()))
            .unwrap_or_else(|| "standalone".to_string())
    }

    pub fn status(&self) -> Document {
        doc! { "open_cursors": self.cursors.len() as i64, "uptime_secs": self.started.elapsed().as_secs() as i64 }
    }
}

/// Whether this member may run the command now, and the write settings it runs with.
fn member_admits(
    replica: &Replica,
    writes: bool,
    opts: &RunOptions,
) -> Result<repl::WriteScope, MongoError> {
    let status = replica.status();
    let primary = status.role == raft::StateRole::Leader;
    if status.installing_snapshot {
        return Err(installing_snapshot());
    }
    if let Some(why) = &status.halted {
        return Err(MongoError::new(
            ErrorCode::NotPrimaryOrSecondary,
            format!("node is not in primary or recovering state: replication stopped: {why}"),
        ));
    }
    if writes {
        if !status.writable {
            return Err(MongoError::new(
                ErrorCode::NotWritablePrimary,
                "not primary",
            ));
        }
        let data_members = replica.config.data_members() as u32;
        if opts.write_concern.w > data_members {
            return Err(MongoError::new(
                ErrorCode::UnsatisfiableWriteConcern,
                format!(
                    "Not enough data-bearing nodes: w:{} but the set has {data_members}",
                    opts.write_concern.w
                ),
            ));
        }
        return Ok(repl::WriteScope {
            term: Some(status.term),
            wtimeout: opts.write_concern.wtimeout,
            w: opts.write_concern.w,
        });
    }
    if !primary && !opts.secondary_ok {
        return Err(MongoError::new(
            ErrorCode::NotPrimaryNoSecondaryOk,
            "not primary and secondaryOk=false",
        ));
    }
    Ok(repl::WriteScope::default())
}

/// How long a write waits for the catalog to reflect the catalog changes applied.
const CATALOG_SYNC_WAIT: Duration = Duration::from_secs(10);

impl Node {
    /// A write on a member runs only on a catalog that reflects every catalog change
    /// applied here (see `catalog_sync`); a member whose reload lags past
    /// `CATALOG_SYNC_WAIT` answers as a primary not yet ready, so the write is retried.
    fn catalog_current(&self, writes: bool) -> MongoResult<()> {
        if !writes || self.catalog_sync.wait(CATALOG_SYNC_WAIT) {
            return Ok(());
        }
        Err(MongoError::new(
            ErrorCode::NotWritablePrimary,
            "not primary: the catalog is still being reloaded",
        ))
    }

    /// For a read that compares metadata across members (`dbHash`, `validate`): waits, at
    /// most `CATALOG_SYNC_WAIT`, until the in-memory catalog reflects every catalog change
    /// applied here (a secondary reloads it on its own thread); false if it still does not.
    pub fn await_catalog(&self) -> bool {
        self.catalog_sync.wait(CATALOG_SYNC_WAIT)
    }
}

/// Whether this member has applied the entry at `afterClusterTime` already: entry times
/// rise with the log, so every write the client saw (its time at or before the one it
/// sends) is applied here, and the read needs no round trip to the primary.
fn applied_since(rc: &Document, replica: &repl::Replica) -> bool {
    match rc.get("afterClusterTime") {
        Some(Bson::Timestamp(t)) => {
            let after = (u64::from(t.time) << 32) | u64::from(t.increment);
            replica.applied_time() >= after
        }
        _ => false,
    }
}

/// What a member whose data is being replaced by a snapshot's answers: drivers and
/// routers treat 13436 as "not primary or secondary" and go elsewhere.
fn installing_snapshot() -> MongoError {
    MongoError::new(
        ErrorCode::NotPrimaryOrSecondary,
        "node is not in primary or recovering state: installing a snapshot (STARTUP2)",
    )
}

/// A member's WiredTiger, without its own journal (the Raft log is the write-ahead log).
/// Data WiredTiger cannot open as damaged (its metadata or checkpoint unreadable) is moved
/// aside, never deleted, and the member starts empty: the snapshot-install marker makes it
/// empty its log too (keeping its vote), and the primary sends it a snapshot, as a MongoDB
/// member is resynced by hand. Other failures (a lock held by another process, no space,
/// no permission) stop the member, since its data may well be fine.
fn open_member_data(dir: &Path, cache_mb: usize) -> Result<storage::WiredTigerEngine, ShardError> {
    let wt = dir.join("wt");
    let options = storage::WtOptions {
        cache_mb,
        log: false,
        sync: false,
        statistics: false,
    };
    match storage::WiredTigerEngine::open_with(&wt, options) {
        Err(storage::StorageError::WiredTiger { code, message }) if damaged(code) => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let aside = dir.join(format!("wt.damaged-{secs}"));
            tracing::error!(
                code, %message, aside = %aside.display(),
                "this member's data cannot be opened: moved aside, resyncing from the others"
            );
            std::fs::rename(&wt, &aside)?;
            crate::repl::snapshot::mark_install(&dir.join("raft"))?;
            Ok(storage::WiredTigerEngine::open_with(&wt, options)?)
        }
        r => Ok(r?),
    }
}

/// WiredTiger's codes for data it cannot make sense of: WT_ERROR (a checksum or format
/// failure), WT_PANIC, WT_RUN_RECOVERY, WT_TRY_SALVAGE.
fn damaged(code: i32) -> bool {
    matches!(code, -31802 | -31804 | -31806 | -31809)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(node: &Node) -> Ctx<'_> {
        Ctx {
            node,
            db: "db",
            deadline: Deadline::default(),
            engine: node.engine.as_ref(),
            retry: None,
            raw_documents: None,
            stmt_ids: None,
            shard_version: None,
            db_version: None,
            read_at: None,
            view: None,
            txn: None,
        }
    }

    #[test]
    fn a_write_that_waited_through_a_rename_or_a_drop_is_refused_as_stale() {
        let node = Node::open(&EngineKind::Memory, Duration::from_secs(60)).unwrap();
        let engine = node.engine.as_ref();
        let create = |name| {
            node.catalog
                .create_collection(engine, "db", name, Document::new())
                .unwrap()
                .0
        };
        let held = create("a");
        let current = ctx(&node).check_owner(held.clone()).unwrap();
        assert!(Arc::ptr_eq(&current, &held));

        node.catalog
            .rename(engine, "db.a", ("db", "b"), None)
            .unwrap();
        let e = ctx(&node).check_owner(held).unwrap_err();
        assert_eq!(e.code, ErrorCode::StaleConfig as i32, "{e:?}");

        let held = node.catalog.get("db.b").unwrap();
        node.catalog.drop_collection(engine, "db.b").unwrap();
        create("b");
        let e = ctx(&node).check_owner(held).unwrap_err();
        assert_eq!(e.code, ErrorCode::StaleConfig as i32, "{e:?}");
    }
}
