//! One client connection: read a message, run the command, write the reply.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bson::{Bson, Document};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, Instrument};
use wire::{
    Compressor, DocSequence, ErrorCode, Incoming, MongoError, MsgHeader, OpMsg, Request, WireError,
};

use crate::commands;
use crate::context::{RouterState, Session};

/// Serves one client over a plain TCP or a TLS stream.
pub async fn handle<S: AsyncRead + AsyncWrite + Send + Unpin>(
    stream: S,
    peer: SocketAddr,
    id: u64,
    state: Arc<RouterState>,
    shutdown: CancellationToken,
    x509_subject: Option<String>,
) {
    let span = info_span!("conn", id, %peer);
    async move {
        debug!("connection opened");
        let (rd, wr) = tokio::io::split(stream);
        let mut rd = BufReader::new(rd);
        let mut wr = BufWriter::new(wr);
        let registration = state.current_ops.register(id, &peer.to_string());
        let slot = registration.slot.clone();
        let mut session = Session::new(id, peer, state, slot, x509_subject);
        let Some(pass) = admit(&session, &shutdown).await else {
            return;
        };
        let mut pass = Some(pass);
        let pass_idle =
            std::time::Duration::from_millis(session.state.config.handshake_queue_wait_ms);
        let mut buf = Vec::new();
        loop {
            let incoming = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = wire::read_message(&mut rd, &mut buf) => r,
                // A client that stalls mid-handshake gives its slot back. (An async block:
                // select! builds every branch's future each time round, and a bare sleep
                // would read the clock on every command of every connection.)
                _ = async { tokio::time::sleep(pass_idle).await }, if pass.is_some() => {
                    pass = None;
                    continue;
                }
            };
            let incoming = match incoming {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) if e.is_fatal() => {
                    debug!(error = %e, "closing connection after a framing error");
                    break;
                }
                Err(e) => {
                    // A well-framed message with a bad body: answer it and keep going.
                    let Some(header) = MsgHeader::parse(&buf) else {
                        break;
                    };
                    // A client that set moreToCome reads no reply; answering would
                    // desynchronise its stream, so the bad message is dropped.
                    if header.op_code == wire::OP_MSG && buf.get(16).is_some_and(|f| f & 0b10 != 0)
                    {
                        continue;
                    }
                    let reply = e.to_mongo_error().to_document();
                    let op = if header.op_code == wire::OP_QUERY {
                        wire::OP_REPLY
                    } else {
                        wire::OP_MSG
                    };
                    let frame = session.encode_reply(&header, op, &reply, None);
                    if wr.write_all(&frame).await.is_err() || wr.flush().await.is_err() {
                        break;
                    }
                    continue;
                }
            };
            // While the command runs, watch the socket: a client that hangs up (a driver
            // whose timeout fired) is waiting for nothing, so its command is dropped —
            // queued work leaves the shard's queue, and a forwarded call is cancelled.
            let mut peer_sent_more = false;
            // `killOp` cancels this: the command is dropped like a hung-up client's,
            // and the client is told it was interrupted.
            let cancel = CancellationToken::new();
            session.arm_cancel(cancel.clone());
            let (header, more_to_come) = (
                incoming.header,
                matches!(&incoming.request, Request::Msg(m) if m.more_to_come()),
            );
            let frame = {
                let respond = session.respond(incoming);
                tokio::pin!(respond);
                loop {
                    tokio::select! {
                        f = &mut respond => break Some(f),
                        more = rd.fill_buf(), if !peer_sent_more => match more {
                            Ok([]) | Err(_) => break None,
                            // The next request arrived early; it stays buffered.
                            Ok(_) => peer_sent_more = true,
                        },
                        _ = cancel.cancelled() => break Some(None),
                    }
                }
            };
            // Killed: answered once the dropped command has let go of the session.
            let frame = match frame {
                Some(None) if cancel.is_cancelled() => {
                    Some(session.interrupted(&header, more_to_come))
                }
                other => other,
            };
            session.ops.finish();
            let Some(frame) = frame else {
                session.state.counters.add(
                    session.id,
                    crate::counters::Op::CancelledByDisconnect,
                    1,
                );
                debug!("client closed the connection mid-command; command dropped");
                break;
            };
            if session.closing {
                break;
            }
            // The handshake is over once no SASL conversation is in progress: after the
            // first reply (a monitoring connection's hello), or when SCRAM completes.
            if pass.is_some() && session.auth.conversation.is_none() {
                pass = None;
            }
            let Some(frame) = frame else {
                continue;
            };
            if wr.write_all(&frame).await.is_err() || wr.flush().await.is_err() {
                break;
            }
        }
        debug!("connection closed");
    }
    .instrument(span)
    .await
}

/// Lets a new connection through the connection rate limit, where a connection waits its
/// turn or is closed at once when too many already wait, and then the handshake gate,
/// which lets it handshake newest first under a storm. `None`: close it (refused, shed,
/// or shutting down).
async fn admit(
    session: &Session,
    shutdown: &CancellationToken,
) -> Option<crate::overload::ingress::HandshakePass> {
    if let Some(rate) = &session.state.connection_rate {
        match rate.admit() {
            None => {
                debug!("connection refused by the connection rate limit");
                return None;
            }
            Some(wait) if !wait.is_zero() => tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = tokio::time::sleep(wait) => {}
            },
            Some(_) => {}
        }
    }
    let gate = session.state.handshakes.clone();
    tokio::select! {
        _ = shutdown.cancelled() => None,
        p = gate.enter() => {
            if p.is_none() {
                debug!("connection shed by the handshake queue");
            }
            p
        }
    }
}

impl Session {
    /// The reply to a command `killOp` stopped (none when the client wants no reply).
    fn interrupted(&mut self, header: &MsgHeader, more_to_come: bool) -> Option<Vec<u8>> {
        debug!("command killed by killOp");
        if more_to_come {
            return None;
        }
        let reply = MongoError::new(wire::ErrorCode::Interrupted, "operation was interrupted")
            .to_document();
        let op = if header.op_code == wire::OP_QUERY {
            wire::OP_REPLY
        } else {
            wire::OP_MSG
        };
        Some(self.encode_reply(header, op, &reply, None))
    }

    /// Runs one request; `None` when the client asked for no reply (`moreToCome`).
    async fn respond(&mut self, incoming: Incoming) -> Option<Vec<u8>> {
        let Incoming {
            header,
            request,
            compressor,
        } = incoming;
        // Its `maxTimeMS` counts from here, for a refusal at the front as for a command run.
        self.request_started = Instant::now();
        match request {
            Request::Msg(msg) => {
                let more_to_come = msg.more_to_come();
                let reply = match forwarded_raw(msg) {
                    Ok((cmd, sequences)) => {
                        if let Some(refusal) = self.refusal(&cmd) {
                            return (!more_to_come)
                                .then(|| self.encode_raw_reply(&header, &refusal, compressor));
                        }
                        self.run_with(cmd, sequences).await
                    }
                    Err(e) => e.to_mongo_error().to_document(),
                };
                if more_to_come {
                    return None;
                }
                Some(self.encode_reply(&header, wire::OP_MSG, &reply, compressor))
            }
            Request::Query(q) => {
                let reply = match q.command() {
                    Some(mut cmd) if q.full_collection_name.ends_with(".$cmd") => {
                        cmd.insert("$db", q.database().to_string());
                        // Boxed: a legacy path, kept out of every command's future.
                        Box::pin(self.run(cmd)).await
                    }
                    _ => MongoError::new(ErrorCode::OpQueryUnsupported, "OP_QUERY is no longer supported. The client driver may require an upgrade.")
                        .to_document(),
                };
                Some(self.encode_reply(&header, wire::OP_REPLY, &reply, None))
            }
        }
    }

    /// [`Session::encode_reply`] for a reply already encoded as BSON.
    fn encode_raw_reply(
        &mut self,
        header: &MsgHeader,
        reply: &bson::RawDocumentBuf,
        compressor: Option<Compressor>,
    ) -> Vec<u8> {
        let id = self.next_request_id();
        wire::encode_op_msg_raw(id, header.request_id, reply.as_bytes(), compressor)
    }

    /// The reply to a command refused at once as overloaded (`shed`), or none when it
    /// goes on. Asked before anything else is done for the command (its registration in
    /// `currentOp`, fail points, dispatch, authorization, parsing), and answered with a
    /// reply built straight to BSON (`refusal.rs`): under a burst most of what the router
    /// does is refusing.
    fn refusal(&mut self, cmd: &Document) -> Option<bson::RawDocumentBuf> {
        let name = cmd.keys().next()?;
        let message = self.shed(name, cmd)?;
        Some(crate::overload::refusal::overloaded(
            &message,
            crate::cluster_time::now(),
        ))
    }

    fn encode_reply(
        &mut self,
        header: &MsgHeader,
        op: i32,
        reply: &Document,
        compressor: Option<Compressor>,
    ) -> Vec<u8> {
        let id = self.next_request_id();
        if op == wire::OP_REPLY {
            wire::encode_op_reply(id, header.request_id, reply)
        } else {
            wire::encode_op_msg(id, header.request_id, reply, compressor)
        }
    }

    /// Under load, a forwarded command with a deadline may be refused at once as
    /// overloaded (462 with `SystemOverloadedError` and `RetryableError`; see
    /// `runtime_lag` and `MongoError::overloaded`): the client keeps its
    /// connection and its time. Decided before the command is dispatched, authorized or
    /// parsed further, because a refusal that costs nearly as much as an answer takes the
    /// CPU the admitted commands need (a refusal is most of what an overloaded router
    /// does).
    fn shed(&self, name: &str, cmd: &Document) -> Option<String> {
        if !self.state.config.propagate_deadlines
            || !commands::find(name).is_some_and(|c| c.is_forwarded())
        {
            return None;
        }
        let max_time_ms = match cmd.get("maxTimeMS") {
            Some(Bson::Int32(n)) if *n > 0 => *n as u64,
            Some(Bson::Int64(n)) if *n > 0 => *n as u64,
            Some(Bson::Double(n)) if *n >= 1.0 => *n as u64,
            _ => return None,
        };
        // A command without its database gets that error (`OpMsgMissingDb`, 40571, in
        // `run_with`), not a refusal a retry would only turn into it.
        if !matches!(cmd.get("$db"), Some(Bson::String(_))) {
            return None;
        }
        let lag = &self.state.lag;
        let (why, counted) = if self.state.fail_points.shed_commands() {
            let why = "the shedCommands fail point is on".to_string();
            (why, crate::counters::Op::ShedByRouter)
        } else if lag.cannot_finish(max_time_ms) {
            let why = format!(
                "answers take up to {} ms now, longer than maxTimeMS {max_time_ms}",
                lag.answer.due().as_millis()
            );
            (why, crate::counters::Op::ShedByAnswerTime)
        } else if lag.should_shed(max_time_ms) {
            let why = format!(
                "commands wait {} ms in this router now (its tasks run late, or the member's answers come late), too long for maxTimeMS {max_time_ms}",
                lag.pressure().as_millis()
            );
            (why, crate::counters::Op::ShedByRouter)
        } else {
            return self.refused_by_gate(max_time_ms);
        };
        self.state.counters.add(self.id, counted, 1);
        Some(format!(
            "router overloaded: {why}; nothing was started, retry"
        ))
    }

    /// The shard's line (`forward_gate`) asked at the front of the path too, where its
    /// refusal costs what the shedder's does: in a pools-of-100 burst the router refused
    /// about 6,000 commands a second after parsing and dispatching them, and took 600 ms
    /// of the cluster's 1,000 a second. Only without sharding, where the shard is known
    /// before routing; `forward` asks again after routing, and for a sharded cluster.
    fn refused_by_gate(&self, max_time_ms: u64) -> Option<String> {
        if self.state.cluster.is_some() {
            return None;
        }
        let split = crate::deadline::split(max_time_ms, self.request_started.elapsed()).ok()??;
        let gate = self.state.shard.gate();
        let refused = gate.admit(Some(split.router_wait)).err()?;
        self.state
            .counters
            .add(self.id, crate::counters::Op::ShedByForwardGate, 1);
        Some(refused.message(gate.limit(), max_time_ms))
    }

    /// Runs a command document and returns the reply (errors become `{ok: 0}` documents).
    pub async fn run(&mut self, cmd: Document) -> Document {
        self.run_with(cmd, Vec::new()).await
    }

    /// [`Session::run`] for a command whose document sequences stay raw (see
    /// [`forwarded_raw`]); they travel to the shard as they came.
    pub async fn run_with(&mut self, cmd: Document, sequences: Vec<DocSequence>) -> Document {
        // Set when the request was read (`respond`).
        let started = self.request_started;
        let name = cmd.keys().next().cloned().unwrap_or_default();
        let db = match cmd.get("$db") {
            Some(Bson::String(db)) => db.clone(),
            _ => {
                return MongoError::new(
                    ErrorCode::OpMsgMissingDb,
                    "OP_MSG requests require a $db argument",
                )
                .to_document();
            }
        };
        // `$external` holds users authenticated elsewhere (SASL on that database).
        if db != "$external" {
            if let Err(e) = wire::namespace::check_db(&db) {
                return e.to_document();
            }
        }
        if self.app_name.is_none() && matches!(name.as_str(), "hello" | "isMaster" | "ismaster") {
            self.app_name = cmd
                .get_document("client")
                .and_then(|c| c.get_document("application"))
                .and_then(|a| a.get_str("name"))
                .ok()
                .map(str::to_string);
            self.ops.app_name.lock().clone_from(&self.app_name);
        }
        let cancel = self.take_cancel();
        self.ops.begin(&name, &db, cancel, self.auth.owner());
        let retryable_write = crate::error_labels::is_retryable_write(&cmd);
        let in_transaction = crate::transactions::in_transaction(&cmd);
        let fail = self
            .state
            .fail_points
            .check(&name, self.app_name.as_deref());
        if let Some(d) = fail.as_ref().and_then(|f| f.block) {
            tokio::time::sleep(d).await;
        }
        if fail.as_ref().is_some_and(|f| f.close_connection) {
            self.closing = true;
            return Document::new();
        }
        let result = match fail.as_ref().and_then(|f| f.error_code) {
            Some(code) => Ok(bson::doc! {
                "ok": 0.0,
                "errmsg": "Failing command via 'failCommand' failpoint",
                "code": code,
                "codeName": wire::error::code_name(code),
            }),
            None => {
                let audited = self
                    .state
                    .audit
                    .as_ref()
                    .map(|_| crate::audit::AuditLog::param(&name, &db, &cmd));
                let result = commands::dispatch(self, &db, &name, cmd, sequences).await;
                if let (Some(log), Some(param)) = (&self.state.audit, audited) {
                    let code = result.as_ref().err().map(|e| e.code);
                    log.command(&self.actor(), &name, param, code);
                }
                result
            }
        };
        let elapsed = started.elapsed();
        let mut reply = match result {
            Ok(mut reply) => {
                if !reply.contains_key("ok") {
                    reply.insert("ok", 1.0);
                }
                reply
            }
            Err(e) => e.to_document(),
        };
        if let Some(f) = fail {
            if let Some(mut wce) = f.write_concern_error {
                if let Some(labels) = wce.remove("errorLabels") {
                    reply.insert("errorLabels", labels);
                }
                reply.insert("writeConcernError", wce);
            }
            if let Some(labels) = f.error_labels {
                reply.insert("errorLabels", labels);
            }
        }
        if retryable_write {
            crate::error_labels::label(&mut reply);
        }
        if in_transaction {
            crate::error_labels::label_transaction(&mut reply, &name);
        }
        let now = crate::cluster_time::now();
        crate::cluster_time::stamp(&mut reply, now);
        let ok = matches!(reply.get("ok"), Some(Bson::Double(d)) if *d == 1.0)
            || matches!(reply.get("ok"), Some(Bson::Int32(1)));
        let ms = elapsed.as_millis() as u64;
        let shard_waits = self.last_waits.take();
        if let Some(w) = shard_waits {
            if self.transit_sampler.due() {
                self.state.lag.record_transit(w.transit);
                // Everything but the member's execution, which is the command's own (a long
                // scan, an awaitData getMore); a member's expiry is cut off at the
                // deadline (`answer_time`).
                let expired = reply.get_i32("code") == Ok(wire::ErrorCode::MaxTimeMSExpired as i32);
                let waited = elapsed.saturating_sub(w.exec);
                self.state.lag.answer.record(waited, expired);
            }
            use crate::wait_histograms::Wait;
            let h = &self.state.waits;
            h.record(self.id, Wait::RouterQueue, w.router_queue);
            h.record(self.id, Wait::ShardQueue, w.queued);
            h.record(self.id, Wait::ShardExec, w.exec);
            h.record(self.id, Wait::Replication, w.replication);
            h.record(self.id, Wait::Total, elapsed);
        }
        let waits = shard_waits.unwrap_or_default();
        if ms >= self.state.config.slow_ms {
            // Every wait is named: the router's line for a slot, the shard's ticket
            // queue, its execution (of which replication), and the rest (router and
            // network).
            let named_ms = (waits.router_queue + waits.queued + waits.exec).as_millis() as u64;
            info!(
                command = %name,
                %db,
                ms,
                ok,
                router_queue_ms = waits.router_queue.as_millis() as u64,
                shard_queue_ms = waits.queued.as_millis() as u64,
                shard_exec_ms = waits.exec.as_millis() as u64,
                replication_ms = waits.replication.as_millis() as u64,
                router_and_network_ms = ms.saturating_sub(named_ms),
                "slow command"
            );
        } else {
            debug!(command = %name, %db, us = elapsed.as_micros() as u64, ok, "command");
        }
        reply
    }
}

/// The command body, and the sequences left raw when the command only passes them on;
/// otherwise the sequences folded into the body, as every other command expects.
fn forwarded_raw(msg: OpMsg) -> Result<(Document, Vec<DocSequence>), WireError> {
    let raw = msg
        .body
        .keys()
        .next()
        .and_then(|name| commands::find(name))
        .is_some_and(|c| c.raw_sequences);
    if raw {
        Ok((msg.body, msg.sequences))
    } else {
        Ok((msg.into_command()?, Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns (a future), without calling it.
    fn returned_size<'a, R>(_: impl FnOnce(&'a mut Session, Incoming) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    fn dispatch_size<'a, R>(
        _: impl FnOnce(&'a mut Session, &'a str, &'a str, Document, Vec<DocSequence>) -> R,
    ) -> usize {
        std::mem::size_of::<R>()
    }

    /// A future lives inline in its caller's, and each level moves it in whole when it
    /// starts it: a command's future is copied several times on every command, refused
    /// ones included. Inline, a lookup's came to 40 KB (`docs/overload.md`, "Small command
    /// futures");
    /// the large and the rarely taken awaits are boxed to keep it small.
    #[test]
    fn a_command_future_stays_small() {
        let respond = returned_size(Session::respond);
        let dispatch = dispatch_size(commands::dispatch);
        assert!(
            respond <= 4096,
            "Session::respond's future is {respond} bytes"
        );
        assert!(
            dispatch <= 4096,
            "commands::dispatch's future is {dispatch} bytes"
        );
    }
}
