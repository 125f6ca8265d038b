//! Retryable writes: a write sent with a session (`lsid`) and a `txnNumber` takes effect
//! once, however often the driver (or the router, after a failover) sends it again.
//!
//! The session table `_txns` holds, per session, the highest `txnNumber` seen and the
//! statements of that number already executed, each with the result a retry must report.
//! A statement's record is written in the same storage batch as the statement's own
//! change, so on a replica set it travels in the same Raft entry: a new primary knows
//! exactly which statements took effect, and nothing is applied twice or reported wrong.
//!
//! Commands see this through [`RecordingEngine`], which adds the session record to the
//! next write once a statement has been staged with [`Retry::stage`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bson::{doc, Bson, Document};
use storage::{Engine, Layer, Result, WriteBatch};
use wire::{ErrorCode, MongoError, MongoResult};

/// The session table; every node creates it locally at start-up.
pub const TXN_TABLE: &str = "_txns";

/// Commands that may carry a `txnNumber` outside a transaction.
pub const RETRYABLE: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "_shardsvrDeleteIfUnchanged",
];

/// One session's retryable-write state for one command.
pub struct Retry {
    key: Vec<u8>,
    txn: i64,
    /// The namespace the write acts on: a retry must name the same one, or it would read
    /// back the reply another collection's write recorded.
    ns: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Statements of `txn` that took effect, with the result to report on a retry.
    done: BTreeMap<i32, Bson>,
    /// Statements the next write will record.
    staged: Vec<(i32, Bson)>,
    /// The statement the command is executing now.
    current: i32,
}

/// A field of a raw session record: `None` when absent, an error when unreadable.
fn present<T>(field: bson::raw::ValueAccessResult<T>) -> MongoResult<Option<T>> {
    match field {
        Ok(v) => Ok(Some(v)),
        Err(e) if matches!(e.kind, bson::raw::ValueAccessErrorKind::NotPresent) => Ok(None),
        Err(e) => Err(MongoError::internal(format!("corrupt session record: {e}"))),
    }
}

impl Retry {
    /// Reads the session's record. A `txn_number` below the newest one this session used
    /// is refused (MongoDB's TransactionTooOld); the same number resumes its statements.
    pub fn load(
        engine: &dyn Engine,
        lsid: &Document,
        txn_number: i64,
        ns: &str,
    ) -> MongoResult<Retry> {
        let key = session_key(lsid)?;
        let stored = engine
            .get(TXN_TABLE, &key)
            .map_err(crate::error::storage_to_mongo)?;
        let mut state = State::default();
        if let Some(bytes) = stored {
            // Read raw: the record holds the previous write's statements (a hundred for a
            // batch), and only a retry of that same write needs them parsed.
            let corrupt =
                |e: bson::raw::Error| MongoError::internal(format!("corrupt session record: {e}"));
            let record = bson::RawDocument::from_bytes(&bytes).map_err(corrupt)?;
            // No `t` yet is a fresh session; a record that cannot be read is an error, as
            // when it was parsed whole (treating it as fresh could apply a retry twice).
            let newest = present(record.get_i64("t"))?.unwrap_or(i64::MIN);
            if newest > txn_number {
                return Err(MongoError::new(
                    ErrorCode::TransactionTooOld,
                    format!(
                        "Retryable write with txnNumber {txn_number} is prohibited on session \
                         because a newer retryable write with txnNumber {newest} has already started"
                    ),
                ));
            }
            if newest == txn_number {
                check_same_namespace(present(record.get_str("n"))?, ns, txn_number)?;
                if let Some(stmts) = present(record.get_document("s"))? {
                    for element in stmts {
                        let (k, v) = element.map_err(corrupt)?;
                        let v = Bson::try_from(v.to_raw_bson()).map_err(corrupt)?;
                        if let Ok(id) = k.parse::<i32>() {
                            state.done.insert(id, v);
                        }
                    }
                }
            }
        }
        Ok(Retry {
            key,
            txn: txn_number,
            ns: ns.to_string(),
            state: Mutex::new(state),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The recorded result of a statement an earlier attempt executed.
    pub fn executed(&self, stmt: i32) -> Option<Bson> {
        self.lock().done.get(&stmt).cloned()
    }

    /// Marks `stmt` as carried by the next write, reporting `result` on a retry.
    pub fn stage(&self, stmt: i32, result: Bson) {
        self.lock().staged.push((stmt, result));
    }

    /// The command moves on to statement `stmt` (its position in the batch).
    pub fn begin(&self, stmt: i32) {
        self.lock().current = stmt;
    }

    /// Stages the current statement with `result`.
    pub fn stage_current(&self, result: Bson) {
        let mut state = self.lock();
        let stmt = state.current;
        state.staged.push((stmt, result));
    }

    /// Adds the session record (with the staged statements) to `batch`; false when no
    /// statement is staged.
    fn append_record(&self, batch: &mut WriteBatch) -> bool {
        let state = self.lock();
        if state.staged.is_empty() {
            return false;
        }
        let mut stmts = Document::new();
        for (id, result) in state
            .done
            .iter()
            .chain(state.staged.iter().map(|(i, r)| (i, r)))
        {
            stmts.insert(id.to_string(), result.clone());
        }
        let record = doc! {"t": self.txn, "n": &self.ns, "s": stmts, "u": bson::DateTime::now()};
        match bson::to_vec(&record) {
            Ok(bytes) => {
                batch.put(TXN_TABLE, self.key.clone(), bytes);
                true
            }
            Err(_) => false,
        }
    }

    fn settle(&self, committed: bool) {
        let mut state = self.lock();
        let staged = std::mem::take(&mut state.staged);
        if committed {
            state.done.extend(staged);
        }
    }
}

/// A session record another shard kept (a migration brings it along with the range)
/// merged into this shard's: the newer `txnNumber` wins, and for the same number the
/// statements executed on either shard are all executed.
pub fn merge_record(held: Option<&Document>, incoming: &Document) -> Document {
    let t = |d: &Document| d.get_i64("t").unwrap_or(i64::MIN);
    let Some(held) = held else {
        return incoming.clone();
    };
    match t(held).cmp(&t(incoming)) {
        std::cmp::Ordering::Greater => held.clone(),
        std::cmp::Ordering::Less => incoming.clone(),
        std::cmp::Ordering::Equal => {
            let mut stmts = held.get_document("s").cloned().unwrap_or_default();
            for (k, v) in incoming.get_document("s").cloned().unwrap_or_default() {
                stmts.entry(k).or_insert(v);
            }
            let mut merged = doc! {"t": t(held), "s": stmts};
            if let Ok(ns) = held.get_str("n") {
                merged.insert("n", ns);
            }
            if let Some(u) = [held, incoming]
                .iter()
                .filter_map(|d| d.get_datetime("u").ok())
                .max()
            {
                merged.insert("u", *u);
            }
            merged
        }
    }
}

/// The newest `txnNumber` the session's record holds, and whether a transaction of that
/// number committed (`c`, written by `commands/commit_transaction.rs`).
pub fn newest_number(engine: &dyn Engine, key: &[u8]) -> MongoResult<Option<(i64, bool)>> {
    let Some(bytes) = engine
        .get(TXN_TABLE, key)
        .map_err(crate::error::storage_to_mongo)?
    else {
        return Ok(None);
    };
    let corrupt =
        |e: bson::raw::Error| MongoError::internal(format!("corrupt session record: {e}"));
    let record = bson::RawDocument::from_bytes(&bytes).map_err(corrupt)?;
    let Some(t) = present(record.get_i64("t"))? else {
        return Ok(None);
    };
    let committed = present(record.get_bool("c"))?.unwrap_or(false);
    Ok(Some((t, committed)))
}

/// The session record a committed transaction leaves: its number, no retryable
/// statements, and that it committed, so that a retried `commitTransaction` succeeds.
pub fn committed_record(number: i64) -> MongoResult<Vec<u8>> {
    let record = doc! {"t": number, "s": {}, "u": bson::DateTime::now(), "c": true};
    bson::to_vec(&record).map_err(|e| MongoError::internal(format!("session record: {e}")))
}

/// A retry names the namespace its first attempt wrote to (records written before the
/// namespace was kept name none, and pass).
fn check_same_namespace(recorded: Option<&str>, ns: &str, txn: i64) -> MongoResult<()> {
    match recorded {
        Some(recorded) if recorded != ns => Err(MongoError::new(
            ErrorCode::RetryableWriteOtherNamespace,
            format!(
                "retryable write on {ns} is not compatible with the previous write of \
                 txnNumber {txn} in this session, on {recorded}"
            ),
        )),
        _ => Ok(()),
    }
}

/// `lsid.id` (and `lsid.uid` when present) as the session table's key. The router sets
/// `uid` to its authenticated user's, so one user's records are not another's.
pub fn session_key(lsid: &Document) -> MongoResult<Vec<u8>> {
    let mut key = match lsid.get("id") {
        Some(Bson::Binary(b)) => b.bytes.clone(),
        _ => {
            return Err(MongoError::failed_to_parse(
                "lsid must be an object with a UUID 'id' field",
            ))
        }
    };
    if let Some(Bson::Binary(uid)) = lsid.get("uid") {
        key.extend_from_slice(&uid.bytes);
    }
    Ok(key)
}

/// The engine a retryable write's command writes through: every write that follows a
/// staged statement carries the session record with it, atomically.
pub struct RecordingEngine {
    pub inner: Arc<dyn Engine>,
    pub retry: Arc<Retry>,
}

impl Layer for RecordingEngine {
    fn below(&self) -> &dyn Engine {
        self.inner.as_ref()
    }

    fn write_layered(&self, mut batch: WriteBatch) -> Result<()> {
        if !self.retry.append_record(&mut batch) {
            return self.inner.write_owned(batch);
        }
        let result = self.inner.write_owned(batch);
        self.retry.settle(result.is_ok());
        result
    }
}

/// One command at a time per session, as MongoDB checks a session out: a retry that
/// arrives while the first attempt still runs waits for it instead of racing it.
#[derive(Default)]
pub struct SessionLocks {
    stripes: [Mutex<SessionMap>; 16],
}

/// Sessions with a command running (or waiting), by session key.
type SessionMap = HashMap<Vec<u8>, Arc<Mutex<()>>>;

impl SessionLocks {
    /// Runs `f` holding the session's lock.
    pub fn with<T>(&self, lsid: &Document, f: impl FnOnce() -> T) -> MongoResult<T> {
        Ok(self.with_key(&session_key(lsid)?, f))
    }

    /// Runs `f` holding the lock of the session stored under `key` in the session table.
    pub fn with_key<T>(&self, key: &[u8], f: impl FnOnce() -> T) -> T {
        let key = key.to_vec();
        let stripe = &self.stripes[key.iter().fold(0usize, |h, b| h ^ *b as usize) % 16];
        let lock = stripe
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let out = {
            let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
            f()
        };
        let mut map = stripe.lock().unwrap_or_else(|p| p.into_inner());
        // Two references left (the map's and ours): nobody else waits, so forget it.
        if Arc::strong_count(&lock) == 2 {
            map.remove(&key);
        }
        out
    }
}

/// How long a session's record is kept after its last write: MongoDB's
/// `logicalSessionTimeoutMinutes` (30), after which the session itself has expired and a
/// driver no longer retries in it.
pub const SESSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Deletes the session records last written before `cutoff` (records from before `u`
/// was kept count as old), each under its session's lock and checked again there, so a
/// session that just wrote keeps its record. Only a writable member prunes; the
/// deletions replicate. Returns how many went.
pub fn prune(
    engine: &dyn Engine,
    sessions: &SessionLocks,
    cutoff: bson::DateTime,
) -> MongoResult<usize> {
    let old = |bytes: &[u8]| {
        Document::from_reader(&mut &bytes[..])
            .ok()
            .is_some_and(|d| d.get_datetime("u").map_or(true, |u| *u < cutoff))
    };
    let mut scan = storage::KeyRange::all();
    let mut pruned = 0;
    loop {
        let page = engine
            .scan(TXN_TABLE, &scan, false, 1000)
            .map_err(crate::error::storage_to_mongo)?;
        let done = page.len() < 1000;
        for (key, value) in &page {
            scan.start = std::ops::Bound::Excluded(key.clone());
            if !old(value) {
                continue;
            }
            let gone = sessions.with_key(key, || -> MongoResult<bool> {
                let now = engine
                    .get(TXN_TABLE, key)
                    .map_err(crate::error::storage_to_mongo)?;
                if !now.as_deref().is_some_and(old) {
                    return Ok(false);
                }
                let mut batch = WriteBatch::default();
                batch.delete(TXN_TABLE, key.clone());
                engine
                    .write_owned(batch)
                    .map_err(crate::error::storage_to_mongo)?;
                Ok(true)
            })?;
            pruned += usize::from(gone);
        }
        if done {
            return Ok(pruned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_idle_past_the_cutoff_are_pruned_and_others_kept() {
        let engine = storage::MemoryEngine::default();
        engine.create_table(TXN_TABLE).unwrap();
        let sessions = SessionLocks::default();
        let now = bson::DateTime::now();
        let hour_ago = bson::DateTime::from_millis(now.timestamp_millis() - 3_600_000);
        let mut batch = WriteBatch::default();
        for (key, u) in [(b"old".to_vec(), hour_ago), (b"new".to_vec(), now)] {
            let record = doc! {"t": 1_i64, "s": {"0": 1}, "u": u};
            batch.put(TXN_TABLE, key, bson::to_vec(&record).unwrap());
        }
        engine.write(&batch).unwrap();
        let cutoff = bson::DateTime::from_millis(now.timestamp_millis() - 60_000);
        assert_eq!(prune(&engine, &sessions, cutoff).unwrap(), 1);
        assert!(engine.get(TXN_TABLE, b"old").unwrap().is_none());
        assert!(engine.get(TXN_TABLE, b"new").unwrap().is_some());
    }

    /// `load` reads the record raw: a retry of the same number sees its statements, a new
    /// number sees none, an older one is refused, and an unreadable record is an error
    /// (never taken for a fresh session, which could apply a retry twice).
    #[test]
    fn load_sees_a_retry_refuses_an_old_number_and_a_corrupt_record() {
        let engine = storage::MemoryEngine::default();
        engine.create_table(TXN_TABLE).unwrap();
        let lsid = doc! {"id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![7; 16] }};
        let key = session_key(&lsid).unwrap();
        let store = |bytes: Vec<u8>| {
            let mut batch = WriteBatch::default();
            batch.put(TXN_TABLE, key.clone(), bytes);
            engine.write(&batch).unwrap();
        };
        store(bson::to_vec(&doc! {"t": 7_i64, "s": {"0": Bson::Null, "1": 3}}).unwrap());
        let retry = Retry::load(&engine, &lsid, 7, "d.c").unwrap();
        assert_eq!(retry.executed(0), Some(Bson::Null));
        assert_eq!(retry.executed(1), Some(Bson::Int32(3)));
        assert_eq!(
            Retry::load(&engine, &lsid, 8, "d.c").unwrap().executed(0),
            None
        );
        let old = Retry::load(&engine, &lsid, 6, "d.c").err().unwrap();
        assert_eq!(old.code, ErrorCode::TransactionTooOld as i32);
        // A retry naming another collection than its first attempt is refused: it would
        // read back that write's reply (a findAndModify's document).
        store(
            bson::to_vec(&doc! {"t": 7_i64, "n": "d.c", "s": {"0": {"value": "secret"}}}).unwrap(),
        );
        assert!(Retry::load(&engine, &lsid, 7, "d.c").is_ok());
        let other = Retry::load(&engine, &lsid, 7, "d.other").err().unwrap();
        assert_eq!(other.code, 40606);
        assert!(Retry::load(&engine, &lsid, 8, "d.other").is_ok());
        // A well-framed record whose `t` element runs past its end.
        store(vec![12, 0, 0, 0, 0x12, b't', 0, 1, 2, 3, 4, 0]);
        let corrupt = Retry::load(&engine, &lsid, 8, "d.c").err().unwrap();
        assert!(
            corrupt.message.contains("corrupt session record"),
            "{corrupt:?}"
        );
    }

    #[test]
    fn merged_records_keep_the_newest_number_and_every_statement_of_it() {
        let held = doc! {"t": 5_i64, "s": {"0": 1}};
        assert_eq!(merge_record(None, &held), held);
        let older = doc! {"t": 4_i64, "s": {"3": 1}};
        assert_eq!(merge_record(Some(&held), &older), held);
        assert_eq!(merge_record(Some(&older), &held), held);
        let same = doc! {"t": 5_i64, "s": {"1": 2}};
        let merged = merge_record(Some(&held), &same);
        assert_eq!(merged.get_i64("t"), Ok(5));
        let s = merged.get_document("s").unwrap();
        assert!(s.contains_key("0") && s.contains_key("1"), "{merged}");
    }
}
