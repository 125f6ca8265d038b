//! Forwarding a data command to the shard: strip the fields that only concern this hop
//! (sessions, read preference, cluster time) and turn `maxTimeMS` into a deadline.

use bson::{Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::context::Session;
use crate::read_preference::{Mode, ReadPreference};
use crate::shard_client::Forward;

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
];

/// Forwards `cmd`, with `sequences` (raw document sequences the router never parsed)
/// appended to it as array fields.
pub async fn run(
    session: &mut Session,
    db: &str,
    mut cmd: Document,
    sequences: Vec<wire::DocSequence>,
) -> MongoResult<Document> {
    let name = cmd.keys().next().cloned().unwrap_or_default();
    let (w, wtimeout_ms) = write_concern(cmd.get("writeConcern"))?;
    // Validated either way; forwarded (and used for shedding) only when deadlines are on.
    let deadline_ms = max_time_ms(cmd.get("maxTimeMS"))?;
    let split = resplit(session, deadline_ms)?;
    let mut fwd = Forward {
        max_time_ms: split.map_or(0, |s| s.shard_ms),
        read_preference: ReadPreference::parse(cmd.get("$readPreference"))?,
        w,
        wtimeout_ms,
        writes: super::find(&name).is_none_or(|c| c.member == super::Member::Primary)
            || writes_output(&cmd),
        pin: None,
        op_id: 0,
    };
    if fwd.writes {
        fwd.read_preference = ReadPreference::default();
    }
    let linearizable = read_concern(cmd.get("readConcern"))? == Some("linearizable");
    let after_cluster_time = cmd
        .get_document("readConcern")
        .ok()
        .and_then(|rc| rc.get("afterClusterTime"))
        .cloned();
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
    // A cursor lives on the member that opened it, and belongs to the user who did.
    let owner = session.auth.owner();
    // A field borrow, not an `Arc` clone: no shared reference count touched per command.
    let state = &session.state;
    let cursors = &state.cursors;
    let cursor = match name.as_str() {
        "getMore" => cmd.get_i64("getMore").ok(),
        _ => None,
    };
    // The shard the command goes to (`None`: the router's default shard).
    let mut target = None;
    if let Some(id) = cursor {
        let claim = cursors.claim(id, &owner)?;
        if let Some(merged) = claim.merged {
            return Box::pin(crate::sharding::merged_cursor_command::get_more(
                session, id, merged, &cmd,
            ))
            .await;
        }
        fwd.pin = claim.member;
        target = claim.shard;
        fwd.writes = false;
    }
    let mut killed = match name.as_str() {
        "killCursors" => kill_list(&cmd),
        _ => Vec::new(),
    };
    let mut killed_here = Vec::new();
    for id in &killed {
        // Ids this router never handed out are left for the shard to report as not found.
        match cursors.claim(*id, &owner) {
            Ok(claim) => {
                if let Some(merged) = claim.merged {
                    Box::pin(async { merged.lock().await.kill().await }).await;
                    killed_here.push(*id);
                    continue;
                }
                fwd.pin = fwd.pin.or(claim.member);
                target = target.or(claim.shard);
            }
            Err(e) if e.code == ErrorCode::CursorNotFound as i32 => {}
            Err(e) => return Err(e),
        }
        fwd.writes = false;
    }
    if !killed_here.is_empty() {
        killed_here.iter().for_each(|id| cursors.closed(*id));
        killed.retain(|id| !killed_here.contains(id));
        if killed.is_empty() {
            return Ok(bson::doc! {
                "cursorsKilled": killed_here,
                "cursorsNotFound": [],
                "cursorsAlive": [],
                "cursorsUnknown": [],
            });
        }
        cmd.insert("cursors", killed.clone());
    }
    let mut scatter = None;
    // The command carries a shard version: the shard it went to, when it is known (a
    // sharded collection's one shard; `None` for an unsharded collection).
    let mut versioned: Option<Option<String>> = None;
    // The command carries the version of its database's primary shard.
    let mut db_versioned = false;
    if let (Some(cluster), None, true) = (&state.cluster, cursor, killed.is_empty()) {
        let coll = super::table::target_collection(&name, &cmd);
        let routed = crate::sharding::route_command(session, cluster, &name, db, &cmd, &fwd, coll);
        match Box::pin(routed).await? {
            crate::sharding::Routed::To(h) => target = Some(h),
            crate::sharding::Routed::Primary(h, version) => {
                crate::sharding::versioning::attach_db_version(&mut cmd, version);
                db_versioned = true;
                target = Some(h);
            }
            crate::sharding::Routed::Unsharded(h, version) => {
                if crate::sharding::versioning::attach_unsharded(&name, &mut cmd) {
                    versioned = Some(None);
                }
                if let Some(version) = version {
                    crate::sharding::versioning::attach_db_version(&mut cmd, version);
                    db_versioned = true;
                }
                target = Some(h);
            }
            crate::sharding::Routed::Targeted(shard, table) => {
                crate::sharding::versioning::attach(&name, &mut cmd, &table);
                target = Some(shard.handle.clone());
                versioned = Some(Some(shard.name.clone()));
            }
            crate::sharding::Routed::Scatter(table) => scatter = Some(table),
            crate::sharding::Routed::Answered(reply) => return Ok(reply),
        }
    }
    // A retryable write keeps its session and number: the shard records its statements
    // under them, so a retry (the driver's, or ours after a failover) applies once.
    let retryable = cmd.contains_key("txnNumber") && !cmd.contains_key("autocommit");
    let session_fields = if retryable {
        let lsid = cmd.remove("lsid").map(|l| {
            let (recent, auth) = (&mut session.recent_session, &session.auth);
            super::sessions::bind_to_user(state.auth.enabled, recent, auth, l)
        });
        (lsid, cmd.remove("txnNumber"))
    } else {
        (None, None)
    };
    for f in ROUTER_ONLY {
        cmd.remove(*f);
    }
    if linearizable {
        cmd.insert("readConcern", bson::doc! {"level": "linearizable"});
    } else if let Some(after) = after_cluster_time {
        // A causally consistent read: the member applies everything committed before it.
        cmd.insert("readConcern", bson::doc! {"afterClusterTime": after});
    }
    if let (Some(lsid), Some(txn)) = session_fields {
        cmd.insert("lsid", lsid);
        cmd.insert("txnNumber", txn);
    }
    let command = wire::fold_sequences(&cmd, &sequences)
        .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
    drop(sequences);
    let command = bytes::Bytes::from(command);
    fwd.op_id = session.ops.current_opid();
    session.ops.forwarded(command.clone());
    if let (Some(table), Some(cluster)) = (scatter, &state.cluster) {
        let cmd = Document::from_reader(&mut command.as_ref())
            .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
        return Box::pin(scatter_command(
            session, cluster, table, db, &name, cmd, fwd, split,
        ))
        .await;
    }
    let handle = target.as_ref().unwrap_or(&state.shard);
    // Kept only where a stale version may send the command again.
    let kept = (versioned.is_some() || db_versioned).then(|| command.clone());
    // The deadline split again: routing (a catalog read) took some of it.
    let split = resplit(session, deadline_ms)?;
    fwd.max_time_ms = split.map_or(0, |s| s.shard_ms);
    // At most the shard's slots in flight; the rest wait in line here, and a command
    // that would wait too long for its deadline is refused before it is sent.
    let gate = handle.gate();
    if let Err(refused) = gate.admit(split.map(|s| s.router_wait)) {
        state
            .counters
            .add(session.id, crate::counters::Op::ShedByForwardGate, 1);
        return Err(refused.to_error(gate.limit(), deadline_ms));
    }
    let sample_hold = session.hold_sampler.due();
    let ops = session.ops.clone();
    ops.in_line();
    let request_started = session.request_started;
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
                .run_encoded(db, command, &fwd, &session.peer_text)
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
    let result =
        crate::deadline::within(split, call, &mut session.transit_sampler, &state.lag).await;
    let (mut reply, mut member, mut waits) = match result {
        Ok(r) => r,
        Err(e) => {
            if e.code == ErrorCode::CursorNotFound as i32 {
                cursor.into_iter().for_each(|id| cursors.closed(id));
            }
            return Err(e);
        }
    };
    if let (true, Some(cluster), Some(command)) = (db_versioned, &state.cluster, &kept) {
        if let Some(stale) = crate::sharding::versioning::stale_db_error(&reply) {
            // The database's primary moved (or is moving): sent again to the one the
            // catalog names now, within the router's share of the deadline.
            let cmd = Document::from_reader(&mut command.as_ref())
                .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
            let resend =
                Box::pin(cluster.resend_to_primary(db, cmd, &fwd, &session.peer_text, stale));
            let (r, m, w, shard) =
                crate::deadline::within(split, resend, &mut session.transit_sampler, &state.lag)
                    .await?;
            (reply, member, waits) = (r, m, w);
            target = Some(shard);
        }
    }
    if let (Some(shard), Some(cluster), Some(command)) = (&versioned, &state.cluster, kept) {
        if let Some(stale) = crate::sharding::versioning::stale_error(&reply) {
            // Routed with an outdated table (or the shard was behind): routed again from
            // fresh routing, through the general path, which retries as needed.
            let mut cmd = Document::from_reader(&mut command.as_ref())
                .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
            cmd.remove("shardVersion");
            cmd.remove("databaseVersion");
            let ns = format!(
                "{db}.{}",
                super::collection_of(&name, &cmd).unwrap_or_default()
            );
            let fresh = Box::pin(cluster.on_stale(&ns, shard.as_deref(), &stale, 0)).await?;
            let Some(table) = fresh else {
                return Err(stale);
            };
            return Box::pin(scatter_command(
                session, cluster, table, db, &name, cmd, fwd, split,
            ))
            .await;
        }
    }
    session.last_waits = Some(waits);
    killed.iter().for_each(|id| cursors.closed(*id));
    if let Ok(id) = reply.get_document("cursor").and_then(|c| c.get_i64("id")) {
        if id == 0 {
            cursor.into_iter().for_each(|id| cursors.closed(id));
        } else if cursor.is_none() {
            let on = (fwd.read_preference.mode != Mode::Primary).then_some(member);
            match target {
                Some(shard) => cursors.opened_on(id, shard, on, owner),
                None => cursors.opened(id, on, owner),
            }
        }
    }
    Ok(reply)
}

/// Runs a command on a sharded collection over its shards (`sharding::scatter`), within
/// the router's share of the client's deadline.
#[allow(clippy::too_many_arguments)]
async fn scatter_command(
    session: &Session,
    cluster: &crate::sharding::Cluster,
    table: std::sync::Arc<crate::sharding::routing::RoutingTable>,
    db: &str,
    name: &str,
    cmd: Document,
    fwd: Forward,
    split: Option<crate::deadline::Split>,
) -> MongoResult<Document> {
    let coll = super::collection_of(name, &cmd)
        .unwrap_or_default()
        .to_string();
    let ctx = crate::sharding::scatter::Ctx {
        session,
        cluster,
        table,
        db,
        coll: &coll,
        fwd,
        calls: Default::default(),
    };
    let call = crate::sharding::scatter::run(ctx, name, cmd);
    match split {
        Some(s) => tokio::time::timeout(s.router_wait, call)
            .await
            .unwrap_or_else(|_| Err(crate::deadline::expired())),
        None => call.await,
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
    match d.get("level") {
        None => Ok(None),
        Some(Bson::String(l)) => match l.as_str() {
            "local" | "available" | "majority" | "linearizable" => Ok(Some(l.as_str())),
            "snapshot" => Err(MongoError::new(
                ErrorCode::InvalidOptions,
                "readConcern level 'snapshot' is not supported outside transactions here",
            )),
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
fn write_concern(v: Option<&Bson>) -> MongoResult<(u32, u64)> {
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
