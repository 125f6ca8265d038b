//! Reaching a shard: a replica set of members, each over one shared HTTP/2 channel (no
//! per-request pool: requests wait in one visible place, not in a hidden pool queue), or,
//! when router and member share a process (`bulwark local`, tests), by calling the
//! member's gRPC service object directly: the same handler, without the encode/HTTP/2/
//! decode round trip.
//!
//! The router learns which member is primary, and each member's site, from the members'
//! own `hello`. Writes go to the primary; reads go where the read preference allows,
//! preferring members in the router's own site.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use parking_lot::RwLock;
use proto::cluster_tls::ClusterTls;
use proto::shard::shard_client::ShardClient;
use proto::shard::shard_server::Shard;
use proto::shard::CommandRequest;
use tonic::transport::Channel;
use wire::{ErrorCode, MongoError, MongoResult};

use crate::overload::forward_gate::ForwardGate;
use crate::read_preference::{Mode, ReadPreference};
use crate::RouterError;

/// Largest gRPC message either way (a 48 MB wire message plus envelope).
const MAX_GRPC_MESSAGE: usize = 64 * 1024 * 1024;
/// HTTP/2 flow-control windows (per stream, per connection).
pub const STREAM_WINDOW: u32 = 8 * 1024 * 1024;
pub const CONNECTION_WINDOW: u32 = 32 * 1024 * 1024;
/// How long a request waits for a new primary (an election takes 1–2 s).
const FAILOVER_WAIT: Duration = Duration::from_secs(10);
const UNKNOWN: usize = usize::MAX;
/// How often a replica set's members are asked for their state.
const MONITOR_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Clone)]
pub struct ShardHandle {
    inner: Arc<Inner>,
    /// Sent with every call when the cluster uses a shared key (`proto::cluster_key`).
    cluster_key: Option<tonic::metadata::AsciiMetadataValue>,
    /// Bounds the forwarded commands in flight to this shard (`forward_gate`).
    gate: Arc<ForwardGate>,
}

struct Inner {
    members: Vec<Member>,
    /// Index of the member last seen as primary (`UNKNOWN` when none).
    primary: AtomicUsize,
    /// The router's own site: reads that may go to any member prefer this site.
    site: String,
    /// The highest applied log index at each poll, for `maxStalenessSeconds`.
    history: parking_lot::Mutex<crate::staleness::History>,
}

struct Member {
    address: String,
    transport: Transport,
    /// What the member last said about itself (site tag, state).
    seen: RwLock<Seen>,
}

impl Member {
    /// The member's own name for itself once known (its `hello.me`), else its address.
    fn name(&self) -> String {
        let host = self.seen.read().host.clone();
        if host.is_empty() {
            self.address.clone()
        } else {
            host
        }
    }
}

#[derive(Clone, Default)]
struct Seen {
    site: String,
    host: String,
    primary: bool,
    secondary: bool,
    reachable: bool,
    /// The last log index it had applied.
    applied: u64,
}

#[derive(Clone)]
enum Transport {
    Grpc(ShardClient<Channel>),
    InProcess(Arc<dyn Shard>),
}

/// One way to reach a member.
pub enum MemberLink {
    /// gRPC address (host:port), and the cluster's TLS when it runs it.
    Grpc(String, Option<Arc<ClusterTls>>),
    /// A member served by this process: calls go straight to its service.
    InProcess {
        address: String,
        service: Arc<dyn Shard>,
    },
}

/// The command options that travel with a forwarded command.
#[derive(Debug, Clone, Default)]
pub struct Forward {
    pub max_time_ms: u64,
    pub read_preference: ReadPreference,
    /// Write concern `w` (0 = default, majority) and `wtimeout`.
    pub w: u32,
    pub wtimeout_ms: u64,
    pub writes: bool,
    /// Send to this member (a `getMore` follows its cursor to the member that has it).
    pub pin: Option<usize>,
    /// The router's id for the operation (the shard's `currentOp` entry carries it).
    pub op_id: u64,
}

impl ShardHandle {
    /// A single shard node at a gRPC address (or a comma-separated member list).
    pub fn connect_lazy(addr: &str, site: &str) -> Result<ShardHandle, RouterError> {
        ShardHandle::connect_with(addr, site, None)
    }

    /// [`ShardHandle::connect_lazy`] over the cluster's TLS when `tls` is set.
    pub fn connect_with(
        addr: &str,
        site: &str,
        tls: Option<Arc<ClusterTls>>,
    ) -> Result<ShardHandle, RouterError> {
        let links = addr
            .split(',')
            .map(|a| MemberLink::Grpc(a.trim().to_string(), tls.clone()))
            .collect();
        ShardHandle::replica_set(links, site)
    }

    /// A shard served by this process.
    /// True when some member is reached over the network (gRPC), where internal
    /// authentication must guard the calls.
    pub fn crosses_network(&self) -> bool {
        self.inner
            .members
            .iter()
            .any(|m| matches!(m.transport, Transport::Grpc(_)))
    }

    pub fn in_process(service: Arc<dyn Shard>) -> ShardHandle {
        ShardHandle::replica_set(
            vec![MemberLink::InProcess {
                address: "in-process".into(),
                service,
            }],
            "",
        )
        .expect("in-process links need no address")
    }

    /// A replica set whose members are reached through `links`, for a router in `site`.
    pub fn replica_set(links: Vec<MemberLink>, site: &str) -> Result<ShardHandle, RouterError> {
        let mut members = Vec::new();
        for link in links {
            let (address, transport) = match link {
                MemberLink::Grpc(a, tls) => {
                    let client = grpc_client(&a, tls.as_deref())?;
                    (a, Transport::Grpc(client))
                }
                MemberLink::InProcess { address, service } => {
                    (address, Transport::InProcess(service))
                }
            };
            members.push(Member {
                address,
                transport,
                seen: RwLock::new(Seen::default()),
            });
        }
        let primary = if members.len() == 1 { 0 } else { UNKNOWN };
        Ok(ShardHandle {
            inner: Arc::new(Inner {
                members,
                primary: AtomicUsize::new(primary),
                site: site.to_string(),
                history: Default::default(),
            }),
            cluster_key: None,
            gate: Arc::new(ForwardGate::new(
                crate::overload::forward_gate::DEFAULT_SLOTS,
            )),
        })
    }

    /// The same shard with `slots` forwarded commands in flight at most (0: no bound).
    pub fn with_forward_slots(mut self, slots: usize) -> ShardHandle {
        self.gate = Arc::new(ForwardGate::new(slots));
        self
    }

    /// Whether both handles reach the same replica set.
    pub fn same_shard(&self, other: &ShardHandle) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn gate(&self) -> &ForwardGate {
        &self.gate
    }

    pub fn with_cluster_key(mut self, key: Option<String>) -> Result<ShardHandle, String> {
        self.cluster_key = key
            .map(|k| {
                k.parse()
                    .map_err(|_| "cluster key is not valid ASCII".to_string())
            })
            .transpose()?;
        Ok(self)
    }

    /// Asks every member for its state (`hello`) and records the primary and sites.
    pub async fn refresh(&self) {
        let hello = bytes::Bytes::from(bson::to_vec(&doc! {"hello": 1}).expect("hello encodes"));
        let hello = &hello;
        let calls = self.inner.members.iter().map(|m| async move {
            let r = tokio::time::timeout(
                Duration::from_millis(500),
                self.call(&m.transport, "admin", hello, &Forward::default(), ""),
            )
            .await;
            let mut seen = m.seen.write();
            match r {
                Ok(Ok((h, _))) => {
                    seen.reachable = true;
                    seen.primary = h.get_bool("isWritablePrimary").unwrap_or(false);
                    seen.secondary = h.get_bool("secondary").unwrap_or(false);
                    seen.host = h.get_str("me").unwrap_or_default().to_string();
                    seen.applied = h.get_i64("bulwarkAppliedIndex").unwrap_or(0) as u64;
                    seen.site = h
                        .get_document("tags")
                        .ok()
                        .and_then(|t| t.get_str("site").ok())
                        .unwrap_or_default()
                        .to_string();
                }
                _ => {
                    seen.reachable = false;
                    seen.primary = false;
                }
            }
        });
        futures_join_all(calls).await;
        let highest = self
            .inner
            .members
            .iter()
            .map(|m| m.seen.read())
            .filter(|s| s.reachable)
            .map(|s| s.applied)
            .max();
        if let Some(highest) = highest {
            self.inner.history.lock().record(Instant::now(), highest);
        }
        let primary = self
            .inner
            .members
            .iter()
            .position(|m| m.seen.read().primary)
            .unwrap_or(UNKNOWN);
        if primary != UNKNOWN || self.inner.members.len() > 1 {
            self.inner.primary.store(primary, Ordering::Relaxed);
        }
    }

    /// Keeps the member view fresh until `shutdown`.
    pub async fn monitor(self, shutdown: tokio_util::sync::CancellationToken) {
        if self.inner.members.len() < 2 {
            return;
        }
        loop {
            self.refresh().await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(MONITOR_INTERVAL) => {}
            }
        }
    }

    /// Runs `cmd` on the member the options call for, following a failover: a command a
    /// member refused because it is not primary is sent again to the new primary.
    pub async fn run(
        &self,
        db: &str,
        cmd: &Document,
        fwd: &Forward,
        client: &str,
    ) -> MongoResult<(Document, usize, Waits)> {
        let command = bson::to_vec(cmd)
            .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
        self.run_encoded(db, command.into(), fwd, client).await
    }

    /// [`ShardHandle::run`] with the command already encoded as BSON.
    pub async fn run_encoded(
        &self,
        db: &str,
        command: bytes::Bytes,
        fwd: &Forward,
        client: &str,
    ) -> MongoResult<(Document, usize, Waits)> {
        let started = Instant::now();
        // A read, a write the shard records under its session, or a transaction's commit
        // or abort may be sent again even if the first attempt ran: it takes effect
        // once. A write inside a transaction may not: sent twice, it would be staged twice.
        let repeatable = !fwd.writes
            || bson::RawDocument::from_bytes(&command).is_ok_and(|d| {
                let has = |f: &str| d.get(f).is_ok_and(|v| v.is_some());
                let ends = has("commitTransaction") || has("abortTransaction");
                has("txnNumber") && (!has("autocommit") || ends)
            });
        loop {
            let target = fwd.pin.or_else(|| self.pick(fwd));
            let result = match target {
                Some(i) => {
                    let m = &self.inner.members[i];
                    let mut r = self.call(&m.transport, db, &command, fwd, client).await;
                    if let (Ok((reply, _)), true) =
                        (&mut r, fwd.read_preference.mode != Mode::Primary)
                    {
                        reply.insert("servedBy", m.name());
                    }
                    r.map(|(d, waits)| (d, i, waits))
                }
                None => Err(MongoError::new(
                    ErrorCode::HostUnreachable,
                    "no member of the shard's replica set matches the read preference",
                )),
            };
            // A transport error after the command was sent may come after it ran: only a
            // repeatable command goes again then.
            let sent = target.is_some();
            let retry = match &result {
                Err(e) if sent && !repeatable => refused_before_running(e.code),
                Err(e) => retryable(e) || (repeatable && interrupted(e.code)),
                Ok((reply, _, _)) => reply
                    .get_i32("code")
                    .is_ok_and(|c| refused_before_running(c) || (repeatable && interrupted(c))),
            };
            if !retry
                || fwd.pin.is_some()
                || started.elapsed() > FAILOVER_WAIT
                || self.inner.members.len() < 2
            {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.refresh().await;
        }
    }

    /// Runs `cmd` on every member at once, each bounded to a second: the member's name
    /// and its answer. For cluster-wide views (`currentOp`).
    pub async fn on_every_member(
        &self,
        db: &str,
        cmd: &Document,
    ) -> Vec<(String, MongoResult<Document>)> {
        let command = match bson::to_vec(cmd) {
            Ok(c) => bytes::Bytes::from(c),
            Err(e) => return vec![(String::new(), Err(MongoError::internal(e.to_string())))],
        };
        let answers: Vec<parking_lot::Mutex<Option<MongoResult<Document>>>> = self
            .inner
            .members
            .iter()
            .map(|_| parking_lot::Mutex::new(None))
            .collect();
        let calls = self.inner.members.iter().zip(&answers).map(|(m, slot)| {
            let command = &command;
            async move {
                let r = tokio::time::timeout(
                    Duration::from_secs(1),
                    self.call(&m.transport, db, command, &Forward::default(), ""),
                )
                .await
                .unwrap_or_else(|_| Err(time_limit_exceeded()))
                .map(|(d, _)| d);
                *slot.lock() = Some(r);
            }
        });
        futures_join_all(calls).await;
        self.inner
            .members
            .iter()
            .zip(answers)
            .map(|(m, slot)| {
                let r = slot
                    .into_inner()
                    .unwrap_or_else(|| Err(time_limit_exceeded()));
                (m.name(), r)
            })
            .collect()
    }

    /// Runs `cmd` on the member named `name` (as [`ShardHandle::on_every_member`] names it).
    pub async fn on_member(&self, name: &str, db: &str, cmd: &Document) -> MongoResult<Document> {
        let Some(m) = self.inner.members.iter().find(|m| m.name() == name) else {
            return Err(MongoError::new(
                ErrorCode::BadValue,
                format!("no shard member named {name}"),
            ));
        };
        let command = bson::to_vec(cmd)
            .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
        self.call(&m.transport, db, &command.into(), &Forward::default(), "")
            .await
            .map(|(d, _)| d)
    }

    /// The member to send to, by read preference (writes always go to the primary).
    fn pick(&self, fwd: &Forward) -> Option<usize> {
        let primary = self.inner.primary.load(Ordering::Relaxed);
        let primary = (primary != UNKNOWN).then_some(primary);
        if fwd.writes || fwd.read_preference.mode == Mode::Primary {
            return primary;
        }
        let members = &self.inner.members;
        // `maxStalenessSeconds` (-1 or absent: no limit) excludes secondaries that are
        // staler than that (see `staleness`); the primary is never stale.
        let max_staleness = fwd
            .read_preference
            .max_staleness_secs
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s as u64));
        let now = Instant::now();
        let fresh_enough = |s: &Seen| match max_staleness {
            None => true,
            Some(_) if s.primary => true,
            Some(max) => self
                .inner
                .history
                .lock()
                .staleness(s.applied, now, MONITOR_INTERVAL)
                .is_some_and(|stale| stale <= max),
        };
        let eligible = |i: usize, want_secondary: bool| {
            let s = members[i].seen.read();
            s.reachable
                && (if want_secondary {
                    s.secondary
                } else {
                    s.secondary || s.primary
                })
                && fwd.read_preference.tags_match(&s.site)
                && fresh_enough(&s)
        };
        let in_site = |i: &usize| members[*i].seen.read().site == self.inner.site;
        let choose = |want_secondary: bool| {
            let all: Vec<usize> = (0..members.len())
                .filter(|&i| eligible(i, want_secondary))
                .collect();
            all.iter()
                .copied()
                .find(in_site)
                .or_else(|| all.first().copied())
        };
        match fwd.read_preference.mode {
            Mode::Primary => primary,
            Mode::PrimaryPreferred => primary.or_else(|| choose(true)),
            Mode::Secondary => choose(true),
            Mode::SecondaryPreferred => choose(true).or(primary),
            Mode::Nearest => choose(false).or(primary),
        }
    }
}

impl ShardHandle {
    /// One call to one member; `max_time_ms` (0 = none) bounds both the member's work and
    /// the wait here.
    async fn call(
        &self,
        transport: &Transport,
        db: &str,
        command: &bytes::Bytes,
        fwd: &Forward,
        client: &str,
    ) -> MongoResult<(Document, Waits)> {
        let mut req = tonic::Request::new(CommandRequest {
            db: db.to_string(),
            command: command.clone(),
            max_time_ms: fwd.max_time_ms,
            client: client.to_string(),
            // A call pinned to a member follows a cursor opened there (`getMore`,
            // `killCursors`), whatever the member has become since; a sharded cursor on a
            // secondary was refused its second batch before.
            secondary_ok: fwd.read_preference.mode != Mode::Primary || fwd.pin.is_some(),
            w: fwd.w,
            wtimeout_ms: fwd.wtimeout_ms,
            op_id: fwd.op_id,
            cluster_time: crate::cluster_time::current(),
        });
        if let Some(key) = &self.cluster_key {
            req.metadata_mut()
                .insert(proto::cluster_key::HEADER, key.clone());
        }
        // A little slack so the shard reports MaxTimeMSExpired itself when it can.
        let limit = (fwd.max_time_ms > 0).then(|| Duration::from_millis(fwd.max_time_ms + 50));
        let sent = std::time::Instant::now();
        let reply = match transport {
            Transport::Grpc(client) => {
                if let Some(limit) = limit {
                    req.set_timeout(limit);
                }
                client.clone().run_command(req).await
            }
            Transport::InProcess(service) => match limit {
                Some(limit) => tokio::time::timeout(limit, service.run_command(req))
                    .await
                    .map_err(|_| time_limit_exceeded())?,
                None => service.run_command(req).await,
            },
        }
        .map_err(status_to_error)?
        .into_inner();
        crate::cluster_time::learn(reply.cluster_time);
        let (queued, exec) = (
            Duration::from_micros(reply.queued_us),
            Duration::from_micros(reply.exec_us),
        );
        let waits = Waits {
            queued,
            exec,
            replication: Duration::from_micros(reply.repl_us),
            transit: sent.elapsed().saturating_sub(queued + exec),
            router_queue: Duration::ZERO,
        };
        Document::from_reader(&mut reply.reply.as_slice())
            .map(|d| (d, waits))
            .map_err(|e| MongoError::internal(format!("shard sent an invalid reply: {e}")))
    }
}

/// A reply as a result: `ok: 0`, and the first write error of a write, become errors.
/// For the router's own calls (user store, catalog); client commands pass replies through.
pub fn reply_ok(reply: Document) -> MongoResult<Document> {
    let ok = match reply.get("ok") {
        Some(bson::Bson::Double(d)) => *d == 1.0,
        Some(bson::Bson::Int32(n)) => *n == 1,
        Some(bson::Bson::Int64(n)) => *n == 1,
        Some(bson::Bson::Boolean(b)) => *b,
        _ => false,
    };
    if !ok {
        let code = reply
            .get_i32("code")
            .unwrap_or(ErrorCode::InternalError as i32);
        let msg = reply.get_str("errmsg").unwrap_or("command failed");
        return Err(MongoError::coded(code, msg));
    }
    if let Ok(errors) = reply.get_array("writeErrors") {
        if let Some(bson::Bson::Document(e)) = errors.first() {
            let code = e.get_i32("code").unwrap_or(ErrorCode::InternalError as i32);
            return Err(MongoError::coded(
                code,
                e.get_str("errmsg").unwrap_or("write error"),
            ));
        }
    }
    Ok(reply)
}

/// Where a command's time went on the shard member that ran it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Waits {
    /// Waiting for a ticket in the member's admission queue.
    pub queued: Duration,
    /// Running, replication wait included.
    pub exec: Duration,
    /// Of `exec`, waiting for the write to replicate (the write concern).
    pub replication: Duration,
    /// The call's time minus `queued` and `exec`: the gRPC hop both ways, the member's
    /// scheduling before its handler ran, and this task's wake-up once the answer came.
    /// One call only, so the router's retries and failover waits are not in it.
    pub transit: Duration,
    /// Waiting in the router's line for one of the shard's slots (`forward_gate`).
    pub router_queue: Duration,
}

/// Errors after which the command certainly did not run, so sending it elsewhere is safe.
fn refused_before_running(code: i32) -> bool {
    code == ErrorCode::NotWritablePrimary as i32
        || code == ErrorCode::NotPrimaryNoSecondaryOk as i32
}

/// Errors after which the command may or may not have run (the member stepped down or
/// went away mid-command).
fn interrupted(code: i32) -> bool {
    code == ErrorCode::InterruptedDueToReplStateChange as i32
        || code == ErrorCode::InterruptedAtShutdown as i32
        || code == ErrorCode::ShutdownInProgress as i32
}

fn retryable(e: &MongoError) -> bool {
    refused_before_running(e.code) || e.code == ErrorCode::HostUnreachable as i32
}

/// Members answer in parallel: a dead one costs its timeout once, not once per member.
async fn futures_join_all<F: std::future::Future<Output = ()>>(futs: impl Iterator<Item = F>) {
    let mut pinned: Vec<_> = futs.map(Box::pin).collect();
    let mut pending: Vec<usize> = (0..pinned.len()).collect();
    std::future::poll_fn(|cx| {
        pending.retain(|&i| pinned[i].as_mut().poll(cx).is_pending());
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

fn grpc_client(addr: &str, tls: Option<&ClusterTls>) -> Result<ShardClient<Channel>, RouterError> {
    let channel = proto::cluster_tls::endpoint(addr, tls)
        .map_err(|_| RouterError::ShardAddress(addr.to_string()))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(10))
        // HTTP/2's default 64 KiB windows stall a 100 KiB insert batch for a
        // WINDOW_UPDATE round trip; give a batch room to go out in one flight.
        .initial_stream_window_size(Some(STREAM_WINDOW))
        .initial_connection_window_size(Some(CONNECTION_WINDOW))
        .connect_lazy();
    Ok(ShardClient::new(channel)
        .max_decoding_message_size(MAX_GRPC_MESSAGE)
        .max_encoding_message_size(MAX_GRPC_MESSAGE))
}

fn time_limit_exceeded() -> MongoError {
    MongoError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
}

fn status_to_error(s: tonic::Status) -> MongoError {
    match s.code() {
        tonic::Code::DeadlineExceeded => time_limit_exceeded(),
        tonic::Code::Unavailable => MongoError::new(
            ErrorCode::HostUnreachable,
            format!("shard unreachable: {}", s.message()),
        ),
        // The member went away while running the call (its process stopped).
        tonic::Code::Cancelled => MongoError::new(
            ErrorCode::InterruptedAtShutdown,
            format!("shard member went away during the call: {}", s.message()),
        ),
        tonic::Code::InvalidArgument => {
            MongoError::new(ErrorCode::InvalidBSON, s.message().to_string())
        }
        // Made here from a transport error (a status the member sent has no source): the
        // connection broke mid-call, as it does when the member is killed. A network
        // error, whose write the driver retries (the retry record makes it once), not an
        // InternalError, which the driver would hand to the application.
        _ if std::error::Error::source(&s).is_some() => MongoError::new(
            ErrorCode::HostUnreachable,
            format!("connection to the shard member broke: {}", s.message()),
        ),
        _ => MongoError::internal(format!("shard call failed: {}", s.message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_is_a_network_error_and_a_members_status_is_not() {
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "broken pipe",
        )));
        assert_eq!(
            status_to_error(broken).code,
            ErrorCode::HostUnreachable as i32
        );
        let sent = tonic::Status::internal("command task failed: it panicked");
        assert_eq!(status_to_error(sent).code, ErrorCode::InternalError as i32);
    }
}
