//! Forwarding a data command to the shard: strip the fields that only concern this hop
//! (sessions, read preference, cluster time) and turn `maxTimeMS` into a deadline.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use std::sync::Arc;

use super::table::{Command, Member};
use crate::context::Session;
use crate::read_preference::{Mode, ReadPreference};
use crate::session_cache::SessionKey;
use crate::shard_client::{Forward, ShardHandle};
use crate::sharding::routing::RoutingTable;
use crate::sharding::{versioning, Routed};
use crate::transactions::Joined;

/// Generic arguments the router consumes; the shard never sees them.
const ROUTER_ONLY: &[&str] = &[
    "$db",
    "lsid",
    "$clusterTime",
    "$readPreference",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "readConcern",
    "writeConcern",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "$audit",
    "mayBypassWriteBlocking",
    // Only this router asks a member's stream to answer on progress
    // (`sharding::change_stream`).
    "$_returnOnProgress",
];

/// Forwards `cmd`, with `sequences` (raw document sequences the router never parsed)
/// appended to it as array fields, in named steps: read the client's options, claim the
/// cursors it names, target a shard (or all of them), encode, send through the forward
/// gate within the deadline, send again where a shard says the routing was stale, and
/// record the cursor the reply opens. `command` is `cmd`'s entry in the command table.
pub async fn run(
    session: &mut Session,
    command: &'static Command,
    db: &str,
    mut cmd: Document,
    sequences: Vec<wire::DocSequence>,
) -> MongoResult<Document> {
    let name = cmd.keys().next().cloned().unwrap_or_default();
    let mut opts = options(session, command, &name, &cmd)?;
    // A cursor lives on the member that opened it, and belongs to the user who did.
    let owner = session.auth.owner();
    let mut target = Target::default();
    let cursors =
        match claim_cursors(session, &name, &mut cmd, &owner, &mut opts, &mut target).await? {
            Claimed::Answered(reply) => return Ok(reply),
            Claimed::Cursors(c) => c,
        };
    if name == "aggregate" && crate::sharding::change_stream::opens(&cmd)? {
        return Box::pin(crate::sharding::change_stream::aggregate(session, db, &cmd)).await;
    }
    if cursors.is_empty() {
        if let Some(reply) = route(session, db, &name, &mut cmd, &opts.fwd, &mut target).await? {
            return Ok(reply);
        }
    }
    let mut txn = None;
    if crate::transactions::in_transaction(&cmd) {
        txn = enlist(session, &mut cmd, &target)?;
    }
    let scatter_at = (target.scatter.is_some())
        .then(|| at_one_time(&mut opts))
        .flatten();
    let command = encode(session, cmd, sequences, &opts)?;
    opts.fwd.op_id = session.ops.current_opid();
    session.ops.forwarded(command.clone());
    if let (Some(table), Some(cluster)) = (target.scatter.take(), &session.state.cluster) {
        let ns = table.ns.clone();
        let call = ScatterCall::new(session, cluster, table, db, &opts, txn);
        let scatter = scatter_command(call, &name, decode(&command)?);
        return match Box::pin(scatter).await {
            Ok(mut reply) => {
                if let Some(at) = scatter_at {
                    stamp_snapshot(&mut reply, at);
                }
                Ok(reply)
            }
            Err(stale) if no_longer_sharded(cluster, &ns, &stale).await => {
                Box::pin(unsharded_again(
                    session, db, &name, &command, &mut opts, stale,
                ))
                .await
            }
            other => other,
        };
    }
    // Kept only where a stale version may send the command again.
    let kept = (target.versioned.is_some() || target.db_versioned).then(|| command.clone());
    let sent = match send(session, db, &target, command, &mut opts).await {
        Ok(sent) => sent,
        Err(e) => {
            if e.code == ErrorCode::CursorNotFound as i32 {
                let cursors_table = &session.state.cursors;
                cursors
                    .get_more
                    .into_iter()
                    .for_each(|id| cursors_table.closed(id));
            }
            return Err(e);
        }
    };
    let sent = match kept {
        Some(command) => {
            match resend_if_stale(session, db, &name, &mut target, command, &mut opts, sent).await?
            {
                Resent::Reply(sent) => sent,
                Resent::Answered(reply) => return Ok(reply),
            }
        }
        None => sent,
    };
    Ok(record_cursors(
        session, &cursors, target, &opts.fwd, owner, sent,
    ))
}

/// What the client asked of the forwarded command, read and checked once.
struct Options {
    fwd: Forward,
    /// The client's `maxTimeMS` (0: none).
    deadline_ms: u64,
    /// That deadline split between the member and the router's wait.
    split: Option<crate::deadline::Split>,
    linearizable: bool,
    after_cluster_time: Option<Bson>,
    /// A snapshot read's read concern as the shard takes it (`level`, and the time if the
    /// client or the router chose one).
    snapshot: Option<Document>,
}

fn options(
    session: &Session,
    command: &Command,
    name: &str,
    cmd: &Document,
) -> MongoResult<Options> {
    let (w, wtimeout_ms) = write_concern(cmd.get("writeConcern"))?;
    // Validated either way; forwarded (and used for shedding) only when deadlines are on.
    let deadline_ms = max_time_ms(cmd.get("maxTimeMS"))?;
    let split = resplit(session, deadline_ms)?;
    let writes = command.member == Member::Primary || writes_output(cmd);
    // Validated even where it is ignored: a write goes to the primary.
    let read_preference = ReadPreference::parse(cmd.get("$readPreference"))?;
    let fwd = Forward {
        max_time_ms: split.map_or(0, |s| s.shard_ms),
        read_preference: if writes {
            ReadPreference::default()
        } else {
            read_preference
        },
        w,
        wtimeout_ms,
        writes,
        pin: None,
        op_id: 0,
    };
    let level = read_concern(cmd.get("readConcern"))?;
    // A transaction's read concern goes to its shard as the client gave it.
    let txn = crate::transactions::in_transaction(cmd);
    let level = level.filter(|_| !txn);
    let linearizable = level == Some("linearizable");
    let snapshot = match level {
        // A snapshot session's driver sends the read concern with `getMore` as well: the
        // cursor already reads at the snapshot's time, on the member that opened it.
        Some("snapshot") if name == "getMore" => None,
        Some("snapshot") => Some(snapshot_read(name, fwd.writes, cmd)?),
        _ => None,
    };
    if linearizable && fwd.writes {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("{name} does not support linearizable read concern"),
        ));
    }
    if linearizable && fwd.read_preference.mode != Mode::Primary {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "linearizable read concern requires read preference primary",
        ));
    }
    let after_cluster_time = cmd
        .get_document("readConcern")
        .ok()
        .filter(|_| !txn)
        .and_then(|rc| rc.get("afterClusterTime"))
        .cloned();
    Ok(Options {
        fwd,
        deadline_ms,
        split,
        linearizable,
        after_cluster_time,
        snapshot,
    })
}

/// A snapshot read over several shards reads them all at one time: the client's
/// `atClusterTime`, or this router's cluster time, which every shard reaches before it
/// reads. Returns the time chosen here.
fn at_one_time(opts: &mut Options) -> Option<bson::Timestamp> {
    let rc = opts.snapshot.as_mut()?;
    if rc.contains_key("atClusterTime") {
        return None;
    }
    let at = read_time_of(rc);
    rc.remove("afterClusterTime");
    rc.insert("atClusterTime", at);
    Some(at)
}

/// The time read concern `rc` reads several shards at: its `atClusterTime`, or this
/// router's cluster time (its `afterClusterTime`, when that is later).
fn read_time_of(rc: &Document) -> bson::Timestamp {
    if let Ok(at) = rc.get_timestamp("atClusterTime") {
        return at;
    }
    let now = crate::cluster_time::now();
    match rc.get("afterClusterTime") {
        Some(Bson::Timestamp(t)) if (t.time, t.increment) > (now.time, now.increment) => *t,
        _ => now,
    }
}

/// Names the snapshot's time in a merged reply, where a shard's reply names it.
fn stamp_snapshot(reply: &mut Document, at: bson::Timestamp) {
    match reply.get_document_mut("cursor") {
        Ok(cursor) => {
            cursor.insert("atClusterTime", at);
        }
        Err(_) => {
            reply.insert("atClusterTime", at);
        }
    }
}

/// Checks a `readConcern: {level: "snapshot"}` outside a transaction: only reads that
/// MongoDB reads at a snapshot, and an `atClusterTime` this router has handed out.
fn snapshot_read(name: &str, writes: bool, cmd: &Document) -> MongoResult<Document> {
    if writes || !["find", "aggregate", "distinct"].contains(&name) {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            format!("{name} does not support readConcern level snapshot outside a transaction"),
        ));
    }
    let rc = cmd.get_document("readConcern").cloned().unwrap_or_default();
    match rc.get("atClusterTime") {
        None => {}
        Some(Bson::Timestamp(t)) => {
            let now = crate::cluster_time::now();
            if (t.time, t.increment) > (now.time, now.increment) {
                return Err(MongoError::new(
                    ErrorCode::InvalidOptions,
                    "readConcern.atClusterTime must not be greater than the current clusterTime",
                ));
            }
        }
        Some(_) => return Err(MongoError::type_mismatch(
            "BSON field 'readConcern.atClusterTime' is the wrong type, expected type 'timestamp'",
        )),
    }
    Ok(rc)
}

/// Where the command goes.
#[derive(Default)]
struct Target {
    /// The shard (`None`: the router's default shard).
    shard: Option<ShardHandle>,
    /// Every shard of a sharded collection, merged by `sharding::scatter`.
    scatter: Option<Arc<RoutingTable>>,
    /// The command carries a shard version: the shard it went to, when it is known (a
    /// sharded collection's one shard; `None` for an unsharded collection).
    versioned: Option<Option<String>>,
    /// The command carries the version of its database's primary shard.
    db_versioned: bool,
}

/// The router cursors a `getMore` or `killCursors` names.
#[derive(Default)]
struct CursorsNamed {
    get_more: Option<i64>,
    /// Left for the shard to kill.
    killed: Vec<i64>,
    /// Merged cursors killed at the router: the shard's reply lists them too.
    killed_here: Vec<i64>,
}

impl CursorsNamed {
    fn is_empty(&self) -> bool {
        self.get_more.is_none() && self.killed.is_empty()
    }
}

enum Claimed {
    /// Merged cursors, served or killed at the router.
    Answered(Document),
    Cursors(CursorsNamed),
}

/// Claims the cursors the command names for this user: they decide the member (and
/// shard) it goes to. Merged cursors live at the router and are served here.
async fn claim_cursors(
    session: &mut Session,
    name: &str,
    cmd: &mut Document,
    owner: &crate::owner::Owner,
    opts: &mut Options,
    target: &mut Target,
) -> MongoResult<Claimed> {
    let mut named = CursorsNamed::default();
    if name == "getMore" {
        if let Ok(id) = cmd.get_i64("getMore") {
            let claim = session.state.cursors.claim(id, owner)?;
            if let Some(merged) = claim.merged {
                return Box::pin(crate::sharding::merged_cursor_command::get_more(
                    session, id, merged, cmd,
                ))
                .await
                .map(Claimed::Answered);
            }
            opts.fwd.pin = claim.member;
            target.shard = claim.shard;
            opts.fwd.writes = false;
            named.get_more = Some(id);
        }
    }
    if name != "killCursors" {
        return Ok(Claimed::Cursors(named));
    }
    let cursors = &session.state.cursors;
    let killed_here = &mut named.killed_here;
    for id in kill_list(cmd) {
        // Ids this router never handed out are left for the shard to report as not found.
        match cursors.claim(id, owner) {
            Ok(claim) => {
                if let Some(merged) = claim.merged {
                    Box::pin(async { merged.lock().await.kill().await }).await;
                    killed_here.push(id);
                    continue;
                }
                opts.fwd.pin = opts.fwd.pin.or(claim.member);
                target.shard = target.shard.take().or(claim.shard);
            }
            Err(e) if e.code == ErrorCode::CursorNotFound as i32 => {}
            Err(e) => {
                // The merged cursors killed before this one are gone all the same.
                killed_here.iter().for_each(|id| cursors.closed(*id));
                return Err(e);
            }
        }
        opts.fwd.writes = false;
        named.killed.push(id);
    }
    if !killed_here.is_empty() {
        killed_here.iter().for_each(|id| cursors.closed(*id));
        if named.killed.is_empty() {
            return Ok(Claimed::Answered(bson::doc! {
                "cursorsKilled": killed_here.clone(),
                "cursorsNotFound": [],
                "cursorsAlive": [],
                "cursorsUnknown": [],
            }));
        }
        cmd.insert("cursors", named.killed.clone());
    }
    Ok(Claimed::Cursors(named))
}

/// In a sharded cluster, where the command goes by the catalog, with the versions it
/// carries; `Some` when the router answered it (commands about whole databases).
async fn route(
    session: &Session,
    db: &str,
    name: &str,
    cmd: &mut Document,
    fwd: &Forward,
    target: &mut Target,
) -> MongoResult<Option<Document>> {
    let Some(cluster) = &session.state.cluster else {
        return Ok(None);
    };
    let coll = super::table::target_collection(name, cmd);
    let routed = crate::sharding::route_command(session, cluster, name, db, cmd, fwd, coll);
    match Box::pin(routed).await? {
        Routed::To(h) => target.shard = Some(h),
        Routed::Primary(h, version) => {
            versioning::attach_db_version(cmd, version);
            target.db_versioned = true;
            target.shard = Some(h);
        }
        Routed::Unsharded(h, version) => {
            if versioning::attach_unsharded(name, cmd) {
                target.versioned = Some(None);
            }
            if let Some(version) = version {
                versioning::attach_db_version(cmd, version);
                target.db_versioned = true;
            }
            target.shard = Some(h);
        }
        Routed::Targeted(shard, table) => {
            versioning::attach(name, cmd, &table);
            target.shard = Some(shard.handle.clone());
            target.versioned = Some(Some(shard.name.clone()));
        }
        Routed::Scatter(table) => target.scatter = Some(table),
        Routed::Answered(reply) => return Ok(Some(reply)),
    }
    Ok(None)
}

/// Records the shard a statement of a transaction goes to; a statement that is the
/// transaction's first there starts it, at the transaction's read time. A statement
/// that scatters joins each shard as it reaches it (`sharding::scatter`): the
/// transaction it belongs to is returned for that; as the transaction's first, it picks
/// the read time for all of them.
fn enlist(
    session: &mut Session,
    cmd: &mut Document,
    target: &Target,
) -> MongoResult<Option<(SessionKey, i64)>> {
    let uid = super::sessions::connection_uid(session);
    let (key, number) = crate::transactions::named(cmd, uid)?;
    let state = &session.state;
    if target.scatter.is_some() {
        if cmd.get_bool("startTransaction") == Ok(true) {
            let rc = cmd.get_document("readConcern").cloned().unwrap_or_default();
            state.transactions.begin_at(key, number, read_time_of(&rc));
        }
        return Ok(Some((key, number)));
    }
    let shard = target.shard.as_ref().unwrap_or(&state.shard);
    let start = cmd.contains_key("startTransaction");
    match state.transactions.enlist(key, number, start, shard)? {
        Joined::New(at) => {
            cmd.insert("startTransaction", true);
            cmd.insert(
                "readConcern",
                bson::doc! {"level": "snapshot", "atClusterTime": at},
            );
        }
        _ if start => read_after_router_time(cmd),
        _ => {}
    }
    Ok(None)
}

/// A transaction's first shard reads at or after this router's cluster time: members'
/// clocks follow the router's, so a write another shard acknowledged through this router
/// has an earlier time, and the shard's own newest applied time may be older than it.
fn read_after_router_time(cmd: &mut Document) {
    let mut rc = cmd.get_document("readConcern").cloned().unwrap_or_default();
    if rc.contains_key("atClusterTime") {
        return;
    }
    rc.insert("afterClusterTime", read_time_of(&rc));
    cmd.insert("readConcern", rc);
}

/// The command as the shard takes it: the router's own fields removed, a retryable
/// write's session kept, the read concern the member needs, and the raw sequences folded
/// in.
fn encode(
    session: &mut Session,
    mut cmd: Document,
    sequences: Vec<wire::DocSequence>,
    opts: &Options,
) -> MongoResult<bytes::Bytes> {
    // A retryable write keeps its session and number: the shard records its statements
    // under them, so a retry (the driver's, or ours after a failover) applies once. A
    // statement of a transaction keeps them too, with the transaction's other fields.
    let txn = crate::transactions::in_transaction(&cmd);
    let kept: Vec<(&str, Bson)> = crate::transactions::FIELDS
        .iter()
        .filter(|_| txn)
        .filter_map(|f| cmd.get(*f).map(|v| (*f, v.clone())))
        .collect();
    let retryable = cmd.contains_key("txnNumber");
    let session_fields = if retryable {
        let lsid = cmd.remove("lsid").map(|l| {
            let (recent, auth) = (&mut session.recent_session, &session.auth);
            super::sessions::bind_to_user(session.state.auth.enabled, recent, auth, l)
        });
        (lsid, cmd.remove("txnNumber"))
    } else {
        (None, None)
    };
    for f in ROUTER_ONLY {
        cmd.remove(*f);
    }
    if let Some(rc) = &opts.snapshot {
        cmd.insert("readConcern", rc.clone());
    } else if opts.linearizable {
        cmd.insert("readConcern", bson::doc! {"level": "linearizable"});
    } else if let Some(after) = &opts.after_cluster_time {
        // A causally consistent read: the member applies everything committed before it.
        cmd.insert(
            "readConcern",
            bson::doc! {"afterClusterTime": after.clone()},
        );
    }
    if let (Some(lsid), Some(txn)) = session_fields {
        cmd.insert("lsid", lsid);
        cmd.insert("txnNumber", txn);
    }
    for (field, value) in kept {
        cmd.insert(field, value);
    }
    let command = wire::fold_sequences(&cmd, &sequences)
        .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
    Ok(bytes::Bytes::from(command))
}

fn decode(command: &bytes::Bytes) -> MongoResult<Document> {
    Document::from_reader(&mut command.as_ref())
        .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))
}

/// A reply, the member that gave it, and where the command waited.
type Sent = (Document, usize, crate::shard_client::Waits);

/// Sends through the shard's forward gate, within the deadline: at most the shard's
/// slots in flight; the rest wait in line here, and a command that would wait too long
/// for its deadline is refused before it is sent.
async fn send(
    session: &mut Session,
    db: &str,
    target: &Target,
    command: bytes::Bytes,
    opts: &mut Options,
) -> MongoResult<Sent> {
    let state = &session.state;
    let handle = target.shard.as_ref().unwrap_or(&state.shard);
    // The deadline split again: routing (a catalog read) took some of it.
    let split = resplit(session, opts.deadline_ms)?;
    opts.split = split;
    opts.fwd.max_time_ms = split.map_or(0, |s| s.shard_ms);
    let gate = handle.gate();
    if let Err(refused) = gate.admit(split.map(|s| s.router_wait)) {
        state
            .counters
            .add(session.id, crate::counters::Op::ShedByForwardGate, 1);
        return Err(refused.to_error(gate.limit(), opts.deadline_ms));
    }
    let sample_hold = session.hold_sampler.due();
    let ops = session.ops.clone();
    ops.in_line();
    let (request_started, deadline_ms) = (session.request_started, opts.deadline_ms);
    let fwd = &mut opts.fwd;
    // Boxed, as every rarely taken or large await here is: a future lives inline in its
    // caller's, and each level moves it in whole when it starts it. Inline, a lookup's
    // futures came to 40 KB and were copied level by level on every command, refused or
    // not (see `docs/overload.md`, "Small command futures").
    let call = async {
        let granted = Box::pin(async {
            ops.granted();
            // The member gets what is left after the line, still a margin before the
            // router gives up; nothing is sent once that is gone.
            if let Some(s) = split {
                let left = crate::deadline::split(deadline_ms, request_started.elapsed())?;
                fwd.max_time_ms = left.map_or(s.shard_ms, |l| l.shard_ms);
            }
            handle
                .run_encoded(db, command, fwd, &session.peer_text)
                .await
        });
        let (result, waited) = gate.run(sample_hold, granted).await;
        result.map(|(reply, member, mut waits)| {
            waits.router_queue = waited;
            (reply, member, waits)
        })
    };
    // Answered before the client's own deadline (see `deadline`); dropping the call
    // stops the shard's work too.
    crate::deadline::within(split, call, &mut session.transit_sampler, &state.lag).await
}

enum Resent {
    Reply(Sent),
    /// Routed again over every shard from fresh routing.
    Answered(Document),
}

/// Sends again where the reply says the routing was stale: to the database's new primary
/// shard, or through the general path from fresh routing, within the router's share of
/// the deadline.
async fn resend_if_stale(
    session: &mut Session,
    db: &str,
    name: &str,
    target: &mut Target,
    command: bytes::Bytes,
    opts: &mut Options,
    mut sent: Sent,
) -> MongoResult<Resent> {
    let Some(cluster) = &session.state.cluster else {
        return Ok(Resent::Reply(sent));
    };
    if target.db_versioned {
        if let Some(stale) = versioning::stale_db_error(&sent.0) {
            // The database's primary moved (or is moving): sent to the one the catalog
            // names now.
            let resend = Box::pin(cluster.resend_to_primary(
                db,
                decode(&command)?,
                &opts.fwd,
                &session.peer_text,
                stale,
            ));
            let lag = &session.state.lag;
            let (r, m, w, shard) =
                crate::deadline::within(opts.split, resend, &mut session.transit_sampler, lag)
                    .await?;
            sent = (r, m, w);
            target.shard = Some(shard);
        }
    }
    if let Some(shard) = &target.versioned {
        if let Some(stale) = versioning::stale_error(&sent.0) {
            // Routed with an outdated table (or the shard was behind): routed again from
            // fresh routing, through the general path, which retries as needed.
            let mut cmd = decode(&command)?;
            if crate::transactions::in_transaction(&cmd) {
                // Within a transaction the error ends the attempt (it is transient): the
                // statement may not be sent again elsewhere at another version.
                return Err(stale);
            }
            cmd.remove("shardVersion");
            cmd.remove("databaseVersion");
            let ns = format!(
                "{db}.{}",
                super::collection_of(name, &cmd).unwrap_or_default()
            );
            let fresh = Box::pin(cluster.on_stale(&ns, shard.as_deref(), &stale, 0)).await?;
            let Some(table) = fresh else {
                let again = unsharded_again(session, db, name, &command, opts, stale);
                return Box::pin(again).await.map(Resent::Answered);
            };
            let call = ScatterCall::new(session, cluster, table, db, opts, None);
            return Box::pin(scatter_command(call, name, cmd))
                .await
                .map(Resent::Answered);
        }
    }
    Ok(Resent::Reply(sent))
}

/// Whether `error` is a `StaleConfig` from a collection the catalog no longer has sharded
/// (dropped, perhaps created again unsharded). The routing was refreshed when the error
/// came, so the cached table is the catalog's.
async fn no_longer_sharded(
    cluster: &crate::sharding::Cluster,
    ns: &str,
    error: &MongoError,
) -> bool {
    error.code == ErrorCode::StaleConfig as i32 && matches!(cluster.table(ns).await, Ok(None))
}

/// Sends `command`, routed for a sharded collection that is sharded no more, once again as
/// the unsharded collection it is now. A shard refuses a command routed at another
/// version whole, and what ran before the drop went with the collection, so running it
/// whole is what the client asked for. A collection sharded again meanwhile returns the
/// `stale` error.
async fn unsharded_again(
    session: &mut Session,
    db: &str,
    name: &str,
    command: &bytes::Bytes,
    opts: &mut Options,
    stale: MongoError,
) -> MongoResult<Document> {
    let mut cmd = decode(command)?;
    cmd.remove("shardVersion");
    cmd.remove("databaseVersion");
    let mut target = Target::default();
    if let Some(reply) = route(session, db, name, &mut cmd, &opts.fwd, &mut target).await? {
        return Ok(reply);
    }
    if target.scatter.is_some() {
        return Err(stale);
    }
    let command =
        bson::to_vec(&cmd).map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
    let sent = send(session, db, &target, bytes::Bytes::from(command), opts).await?;
    let owner = session.auth.owner();
    let named = CursorsNamed::default();
    Ok(record_cursors(
        session, &named, target, &opts.fwd, owner, sent,
    ))
}

/// Records what the reply did to the router's cursors: the ones killed or exhausted are
/// closed, and a new one is remembered with its member and owner.
fn record_cursors(
    session: &mut Session,
    named: &CursorsNamed,
    target: Target,
    fwd: &Forward,
    owner: crate::owner::Owner,
    (mut reply, member, waits): Sent,
) -> Document {
    session.last_waits = Some(waits);
    if let Ok(killed) = reply.get_array_mut("cursorsKilled") {
        killed.extend(named.killed_here.iter().map(|&id| Bson::Int64(id)));
    }
    let cursors = &session.state.cursors;
    named.killed.iter().for_each(|id| cursors.closed(*id));
    if let Ok(id) = reply.get_document("cursor").and_then(|c| c.get_i64("id")) {
        if id == 0 {
            named.get_more.into_iter().for_each(|id| cursors.closed(id));
        } else if named.get_more.is_none() {
            let on = (fwd.read_preference.mode != Mode::Primary).then_some(member);
            match target.shard {
                Some(shard) => cursors.opened_on(id, shard, on, owner),
                None => cursors.opened(id, on, owner),
            }
        }
    }
    reply
}

/// What a scattered command runs with, beside the command itself.
struct ScatterCall<'a> {
    session: &'a Session,
    cluster: &'a crate::sharding::Cluster,
    table: std::sync::Arc<crate::sharding::routing::RoutingTable>,
    db: &'a str,
    fwd: Forward,
    split: Option<crate::deadline::Split>,
    /// The transaction the command is a statement of.
    txn: Option<(SessionKey, i64)>,
}

impl<'a> ScatterCall<'a> {
    fn new(
        session: &'a Session,
        cluster: &'a crate::sharding::Cluster,
        table: std::sync::Arc<crate::sharding::routing::RoutingTable>,
        db: &'a str,
        opts: &Options,
        txn: Option<(SessionKey, i64)>,
    ) -> ScatterCall<'a> {
        ScatterCall {
            session,
            cluster,
            table,
            db,
            fwd: opts.fwd.clone(),
            split: opts.split,
            txn,
        }
    }
}

/// Runs a command on a sharded collection over its shards (`sharding::scatter`), within
/// the router's share of the client's deadline.
async fn scatter_command(
    call: ScatterCall<'_>,
    name: &str,
    cmd: Document,
) -> MongoResult<Document> {
    let coll = super::collection_of(name, &cmd)
        .unwrap_or_default()
        .to_string();
    let ctx = crate::sharding::scatter::Ctx {
        session: call.session,
        cluster: call.cluster,
        table: call.table,
        db: call.db,
        coll: &coll,
        fwd: call.fwd,
        calls: Default::default(),
        txn: call.txn,
    };
    let run = crate::sharding::scatter::run(ctx, name, cmd);
    match call.split {
        Some(s) => tokio::time::timeout(s.router_wait, run)
            .await
            .unwrap_or_else(|_| Err(crate::deadline::expired())),
        None => run.await,
    }
}

/// The command's deadline split from now (`None`: no deadline, or deadlines are off).
fn resplit(session: &Session, deadline_ms: u64) -> MongoResult<Option<crate::deadline::Split>> {
    if !session.state.config.propagate_deadlines {
        return Ok(None);
    }
    crate::deadline::split(deadline_ms, session.request_started.elapsed())
}

/// Validates `readConcern` and returns its level. Reads are always majority-committed
/// here (members apply only committed entries), so `local`, `available` and `majority`
/// need nothing more; `linearizable` makes the primary confirm itself first.
fn read_concern(v: Option<&Bson>) -> MongoResult<Option<&str>> {
    let d = match v {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(d)) => d,
        Some(_) => {
            return Err(MongoError::type_mismatch(
                "BSON field 'readConcern' is the wrong type, expected type 'object'",
            ))
        }
    };
    match d.get("afterClusterTime") {
        None | Some(Bson::Timestamp(_)) => {}
        Some(_) => {
            return Err(MongoError::type_mismatch(
                "BSON field 'readConcern.afterClusterTime' is the wrong type, expected type 'timestamp'",
            ))
        }
    }
    let snapshot = d.get_str("level").ok() == Some("snapshot");
    if d.contains_key("atClusterTime") && !snapshot {
        return Err(MongoError::new(
            ErrorCode::InvalidOptions,
            "readConcern.atClusterTime is only valid with readConcern level snapshot",
        ));
    }
    match d.get("level") {
        None => Ok(None),
        Some(Bson::String(l)) => match l.as_str() {
            "local" | "available" | "majority" | "linearizable" | "snapshot" => {
                Ok(Some(l.as_str()))
            }
            other => Err(MongoError::failed_to_parse(format!(
                "Enumeration value '{other}' for field 'readConcern.level' is not a valid value."
            ))),
        },
        Some(_) => Err(MongoError::type_mismatch(
            "BSON field 'readConcern.level' is the wrong type, expected type 'string'",
        )),
    }
}

/// The cursor ids a `killCursors` names.
fn kill_list(cmd: &Document) -> Vec<i64> {
    cmd.get_array("cursors")
        .map(|a| a.iter().filter_map(Bson::as_i64).collect())
        .unwrap_or_default()
}

/// `aggregate` with `$out` or `$merge` writes, so it runs on the primary.
fn writes_output(cmd: &Document) -> bool {
    cmd.get_array("pipeline").is_ok_and(|stages| {
        stages
            .last()
            .and_then(bson::Bson::as_document)
            .is_some_and(|s| s.contains_key("$out") || s.contains_key("$merge"))
    })
}

/// `writeConcern`: `w` as a member count (0 = the default, majority) and `wtimeout`.
/// Every acknowledged write is journaled (`j` is always honoured).
pub(crate) fn write_concern(v: Option<&Bson>) -> MongoResult<(u32, u64)> {
    let d = match v {
        None | Some(Bson::Null) => return Ok((0, 0)),
        Some(Bson::Document(d)) => d,
        Some(_) => {
            return Err(MongoError::failed_to_parse(
                "writeConcern must be an object",
            ))
        }
    };
    let w = match d.get("w") {
        None => 0,
        Some(Bson::String(s)) if s == "majority" => 0,
        Some(Bson::String(tag)) => {
            return Err(MongoError::new(
                ErrorCode::UnknownReplWriteConcern,
                format!("Unrecognized write concern mode: {tag}"),
            ))
        }
        Some(Bson::Int32(n)) if *n >= 0 => *n as u32,
        Some(Bson::Int64(n)) if *n >= 0 => *n as u32,
        Some(Bson::Double(f)) if *f >= 0.0 && f.fract() == 0.0 => *f as u32,
        Some(_) => {
            return Err(MongoError::failed_to_parse(
                "w has to be a number or a string",
            ))
        }
    };
    let wtimeout = match d.get("wtimeout") {
        None => 0,
        Some(Bson::Int32(n)) => (*n).max(0) as u64,
        Some(Bson::Int64(n)) => (*n).max(0) as u64,
        Some(Bson::Double(f)) => f.max(0.0) as u64,
        Some(_) => return Err(MongoError::failed_to_parse("wtimeout must be a number")),
    };
    Ok((w, wtimeout))
}

/// Validates `maxTimeMS` as MongoDB does: a non-negative 32-bit integer (0 = no limit).
pub fn max_time_ms(v: Option<&Bson>) -> MongoResult<u64> {
    let n = match v {
        None | Some(Bson::Null) => return Ok(0),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) if d.fract() == 0.0 && d.is_finite() => *d as i64,
        Some(Bson::Double(_)) => {
            return Err(MongoError::bad_value("maxTimeMS has non-integral value"))
        }
        Some(_) => return Err(MongoError::bad_value("maxTimeMS must be a number")),
    };
    if !(0..=i64::from(i32::MAX)).contains(&n) {
        return Err(MongoError::bad_value(format!(
            "{n} value for maxTimeMS is out of range [0, 2147483647]"
        )));
    }
    Ok(n as u64)
}
