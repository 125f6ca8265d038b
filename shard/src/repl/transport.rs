//! Raft messages between members over tonic, as opaque raft-proto bytes.
//!
//! Each peer has one sending task fed by an unbounded channel: the driver thread never
//! waits on the network, and a slow or dead peer delays only its own messages. The task
//! sends on one long-lived streaming call per peer, opened again when it ends. Raft
//! tolerates lost messages, so a failed send is dropped, not retried.
//!
//! `Faults` cuts links for tests (a member partitioned from the others), in both
//! directions, at this layer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;

use proto::cluster_auth::ClusterAuth;
use proto::raft::raft_client::RaftClient;
use proto::raft::raft_server::Raft;
use proto::raft::{RaftAck, RaftBatch, SnapshotChunk, SnapshotRequest};
use protobuf::Message as _;
use raft::eraftpb::Message;
use storage::Engine;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use super::driver::{encode_message, Event};
use super::snapshot::Installer;
use super::Status as MemberStatus;

/// Links this member refuses to use: bit `id` set = the peer with that id is unreachable.
#[derive(Default)]
pub struct Faults {
    cut: AtomicU64,
    /// Snapshots this member serves wait while this is set (so a test can look at a
    /// member in the middle of an install).
    hold_snapshots: std::sync::atomic::AtomicBool,
}

impl Faults {
    pub fn cut(&self, peer: u64) {
        self.cut.fetch_or(1 << peer, Ordering::Relaxed);
    }
    pub fn heal_all(&self) {
        self.cut.store(0, Ordering::Relaxed);
    }
    pub fn is_cut(&self, peer: u64) -> bool {
        self.cut.load(Ordering::Relaxed) & (1 << peer) != 0
    }
    pub fn hold_snapshots(&self, hold: bool) {
        self.hold_snapshots.store(hold, Ordering::Relaxed);
    }
    /// Waits while snapshots are held, at most `SNAPSHOT_IDLE`.
    async fn snapshot_released(&self) {
        let started = std::time::Instant::now();
        while self.hold_snapshots.load(Ordering::Relaxed) && started.elapsed() < SNAPSHOT_IDLE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub struct Outbox {
    peers: HashMap<u64, UnboundedSender<Vec<Message>>>,
    faults: Arc<Faults>,
    /// What fetching a snapshot from a peer needs (it is not a Raft message).
    addrs: HashMap<u64, String>,
    set_name: String,
    auth: ClusterAuth,
    rt: tokio::runtime::Handle,
}

/// How long a snapshot stream may stay silent before the fetch gives up.
const SNAPSHOT_IDLE: Duration = Duration::from_secs(30);
/// How often a member copying a snapshot from a member of its site tells the snapshot's
/// sender that the copy goes on (well within the sender's `SNAPSHOT_FETCH_START`).
const COPY_NOTICE_EVERY: Duration = Duration::from_secs(3);
/// How long a member asked for its data at an index it has not applied yet waits for its
/// applier before it refuses (a secondary applies what the primary committed within
/// milliseconds; one that lags further is not the member to copy from).
const SNAPSHOT_CATCH_UP: Duration = Duration::from_secs(2);

impl Outbox {
    /// Starts one sending task per peer (`peers`: id → gRPC address) on `rt`.
    pub fn start(
        set_name: &str,
        peers: &[(u64, String)],
        faults: Arc<Faults>,
        auth: &ClusterAuth,
        rt: &tokio::runtime::Handle,
    ) -> Outbox {
        let mut map = HashMap::new();
        for (id, addr) in peers {
            let (tx, rx) = unbounded_channel();
            map.insert(*id, tx);
            rt.spawn(send_loop(
                set_name.to_string(),
                addr.clone(),
                auth.clone(),
                rx,
            ));
        }
        Outbox {
            peers: map,
            faults,
            addrs: peers.iter().cloned().collect(),
            set_name: set_name.to_string(),
            auth: auth.clone(),
            rt: rt.clone(),
        }
    }

    /// A client of member `to`'s Raft service, connected.
    async fn client_of(&self, to: u64) -> Result<RaftClient<Channel>, String> {
        if self.faults.is_cut(to) {
            return Err(format!("member {to} is unreachable"));
        }
        let addr = self
            .addrs
            .get(&to)
            .ok_or_else(|| format!("no member {to}"))?;
        let channel = self
            .auth
            .endpoint(addr)?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(1))
            .initial_stream_window_size(Some(8 * 1024 * 1024))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(RaftClient::new(channel).max_decoding_message_size(256 * 1024 * 1024))
    }

    /// A snapshot request from member `me`, with the cluster key when there is one.
    fn snapshot_request(&self, me: u64, min_index: u64) -> Request<SnapshotRequest> {
        let mut req = Request::new(SnapshotRequest {
            set_name: self.set_name.clone(),
            member: me,
            min_index,
        });
        if let Some(key) = self.auth.header() {
            req.metadata_mut().insert(proto::cluster_key::HEADER, key);
        }
        req
    }

    /// Tells `sender` that `me` is copying its snapshot from another member. Best effort:
    /// a sender that does not hear it reports the transfer as failed after
    /// `SNAPSHOT_FETCH_START`, and raft-rs sends again.
    async fn tell_copying(&self, sender: u64, me: u64) {
        let told = tokio::time::timeout(Duration::from_secs(1), async {
            let mut client = self.client_of(sender).await?;
            client
                .snapshot_copying(self.snapshot_request(me, 0))
                .await
                .map_err(|s| s.message().to_string())
        })
        .await;
        if !matches!(told, Ok(Ok(_))) {
            debug!(
                sender,
                "could not tell the snapshot's sender that the copy goes on"
            );
        }
    }

    /// Fetches member `from`'s data into `engine`, replacing every table (see
    /// `snapshot`), and returns the applied index and term it reflects, at least
    /// `min_index`. Blocks the calling thread, which must not be a runtime thread. The
    /// tables are dropped only once `from` has answered. With `sender` (the member whose
    /// `MsgSnapshot` this is, when it is not `from`), tells it the copy is going on.
    pub fn fetch_snapshot(
        &self,
        from: u64,
        me: u64,
        min_index: u64,
        sender: Option<u64>,
        engine: &dyn Engine,
        dir: &Path,
    ) -> Result<(u64, u64), String> {
        self.rt.block_on(async {
            let mut client = self.client_of(from).await?;
            let mut stream = client
                .fetch_snapshot(self.snapshot_request(me, min_index))
                .await
                .map_err(|s| s.message().to_string())?
                .into_inner();
            let mut installer = Installer::begin(engine, dir).map_err(|e| e.to_string())?;
            // The sender hears that the copy goes on now and then, also while the stream
            // is silent (`Streaming::message` loses nothing when a tick interrupts it).
            let mut notices = tokio::time::interval(COPY_NOTICE_EVERY);
            let mut idle_until = tokio::time::Instant::now() + SNAPSHOT_IDLE;
            loop {
                let next = tokio::select! {
                    _ = notices.tick(), if sender.is_some() => {
                        self.tell_copying(sender.unwrap_or_default(), me).await;
                        continue;
                    }
                    next = tokio::time::timeout_at(idle_until, stream.message()) => next,
                };
                match next {
                    Err(_) => return Err("the snapshot stream stalled".to_string()),
                    Ok(Err(status)) => return Err(status.message().to_string()),
                    Ok(Ok(None)) => break,
                    Ok(Ok(Some(chunk))) => {
                        idle_until = tokio::time::Instant::now() + SNAPSHOT_IDLE;
                        installer.chunk(engine, chunk).map_err(|e| e.to_string())?
                    }
                }
            }
            let (rows, bytes) = (installer.rows, installer.bytes);
            let (index, term) = installer.finish(engine).map_err(|e| e.to_string())?;
            info!(from, index, term, rows, bytes, "installed a snapshot");
            Ok((index, term))
        })
    }

    pub fn send(&self, msgs: Vec<Message>) {
        let mut by_peer: HashMap<u64, Vec<Message>> = HashMap::new();
        for m in msgs {
            if !self.faults.is_cut(m.to) {
                by_peer.entry(m.to).or_default().push(m);
            }
        }
        for (to, batch) in by_peer {
            if let Some(tx) = self.peers.get(&to) {
                let _ = tx.send(batch);
            }
        }
    }
}

/// How many batches may be on their way to one peer, written to its stream and not yet
/// taken by HTTP/2, before the sender waits. While it waits, the driver's messages gather
/// into the next batch, as they did behind a call's reply before.
const IN_FLIGHT: usize = 4;
/// How long a batch may wait for room on a peer's stream before the stream is given up as
/// stuck and the batch dropped (Raft sends again what was lost).
const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 pings on a peer's connection: a stream over a connection that went silent (a
/// peer stopped or cut off) fails within about this, so that a new one is opened.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

async fn send_loop(
    set_name: String,
    addr: String,
    auth: ClusterAuth,
    mut rx: UnboundedReceiver<Vec<Message>>,
) {
    let Ok(endpoint) = auth.endpoint(&addr) else {
        return;
    };
    let key = auth.header();
    // No request timeout: it would end the long-lived stream. Keep-alive pings and
    // `SEND_TIMEOUT` find a dead peer instead.
    let channel = endpoint
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1))
        .http2_keep_alive_interval(KEEP_ALIVE)
        .keep_alive_timeout(2 * KEEP_ALIVE)
        .keep_alive_while_idle(true)
        .initial_stream_window_size(Some(8 * 1024 * 1024))
        .initial_connection_window_size(Some(32 * 1024 * 1024))
        .connect_lazy();
    let client = RaftClient::new(channel)
        .max_encoding_message_size(256 * 1024 * 1024)
        .max_decoding_message_size(256 * 1024 * 1024);
    let mut stream: Option<tokio::sync::mpsc::Sender<RaftBatch>> = None;
    while let Some(first) = rx.recv().await {
        // Everything the driver queued meanwhile goes in the same batch.
        let mut messages: Vec<Bytes> = Vec::new();
        let mut next = Some(first);
        while let Some(queued) = next {
            messages.extend(queued.iter().map(|m| Bytes::from(encode_message(m))));
            next = rx.try_recv().ok();
        }
        let batch = RaftBatch {
            set_name: set_name.clone(),
            messages,
        };
        let open = match stream.take() {
            Some(tx) if !tx.is_closed() => tx,
            _ => open_stream(client.clone(), key.clone(), &addr),
        };
        match tokio::time::timeout(SEND_TIMEOUT, open.send(batch)).await {
            Ok(Ok(())) => stream = Some(open),
            // The call ended (the peer is down, refused us, or the connection failed):
            // the next batch opens a new one.
            Ok(Err(_)) => debug!(peer = %addr, "raft stream closed"),
            // Dropping the sender ends the stuck stream from this side.
            Err(_) => debug!(peer = %addr, "raft stream stuck; opening another"),
        }
    }
}

/// Starts one streaming call to a peer on its own task; batches sent on the returned
/// channel go out on it in order. The channel closes when the call ends.
fn open_stream(
    mut client: RaftClient<tonic::transport::Channel>,
    key: Option<tonic::metadata::AsciiMetadataValue>,
    addr: &str,
) -> tokio::sync::mpsc::Sender<RaftBatch> {
    let (tx, rx) = tokio::sync::mpsc::channel(IN_FLIGHT);
    let mut req = Request::new(ReceiverStream::new(rx));
    if let Some(key) = key {
        req.metadata_mut().insert(proto::cluster_key::HEADER, key);
    }
    let addr = addr.to_string();
    tokio::spawn(async move {
        if let Err(e) = client.stream(req).await {
            debug!(peer = %addr, error = %e.message(), "raft stream ended");
        }
    });
    tx
}

/// The receiving side: hands decoded messages to the member's driver, and serves
/// snapshots.
pub struct RaftService {
    pub set_name: String,
    pub events: Sender<Event>,
    pub faults: Arc<Faults>,
    /// When set, peers must present it (`proto::cluster_key`).
    pub cluster_key: Option<proto::cluster_key::ClusterKey>,
    /// The member's data, for snapshots (weak: a stopped member must close WiredTiger).
    pub engine: Weak<dyn Engine>,
    /// What the driver publishes: whether the data is whole and how far it is applied.
    pub status: Arc<parking_lot::RwLock<MemberStatus>>,
    /// Arbiters hold no data to send.
    pub arbiter: bool,
    /// Cancelled when the member stops serving: open streams from peers end then.
    pub shutdown: CancellationToken,
}

impl RaftService {
    /// Whether this member's data may be copied to another: it holds data, is not in the
    /// middle of an install itself, replication has not halted on it, and it has applied
    /// `min_index` (waiting up to `SNAPSHOT_CATCH_UP` for its applier). Answered before
    /// the stream starts, so a refused receiver still has its own tables.
    #[allow(clippy::result_large_err)]
    async fn can_serve(&self, min_index: u64) -> Result<(), Status> {
        if self.arbiter {
            return Err(Status::failed_precondition("an arbiter holds no data"));
        }
        let started = tokio::time::Instant::now();
        loop {
            let (applied, whole) = {
                let s = self.status.read();
                (s.applied, !s.installing_snapshot && s.halted.is_none())
            };
            if !whole {
                return Err(Status::failed_precondition(
                    "this member's data is incomplete (installing a snapshot, or halted)",
                ));
            }
            if applied >= min_index {
                return Ok(());
            }
            if started.elapsed() >= SNAPSHOT_CATCH_UP {
                return Err(Status::failed_precondition(format!(
                    "this member has applied up to {applied}, not {min_index}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Decodes a batch (the entries' data stays a slice of the received buffer) and hands
    /// its messages to the driver, dropping those from peers cut off by a test.
    #[allow(clippy::result_large_err)]
    fn deliver(&self, batch: &RaftBatch) -> Result<(), Status> {
        let mut decoded = Vec::with_capacity(batch.messages.len());
        for bytes in &batch.messages {
            super::raft_frame::check_message(bytes)
                .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))?;
            let m = Message::parse_from_carllerche_bytes(bytes)
                .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))?;
            if !self.faults.is_cut(m.from) {
                decoded.push(m);
            }
        }
        for m in decoded {
            if self.events.send(Event::Message(Box::new(m))).is_err() {
                return Err(Status::unavailable("member is shutting down"));
            }
        }
        Ok(())
    }

    /// A peer must present the cluster key (when one is set) and belong to this set.
    /// (The error is the gRPC status the handlers return as is.)
    #[allow(clippy::result_large_err)]
    fn admit(&self, metadata: &MetadataMap, set_name: &str) -> Result<(), Status> {
        proto::cluster_key::admit(self.cluster_key.as_ref(), metadata)?;
        if set_name != self.set_name {
            return Err(Status::failed_precondition(format!(
                "this member belongs to replica set '{}', not '{set_name}'",
                self.set_name
            )));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Raft for RaftService {
    type FetchSnapshotStream = ReceiverStream<Result<SnapshotChunk, Status>>;

    /// Hands each batch's messages to the driver as it arrives, until the peer ends the
    /// stream or this member stops serving (a stream open at that moment would otherwise
    /// hold the server's graceful shutdown for as long as the peer kept sending).
    async fn stream(
        &self,
        request: Request<Streaming<RaftBatch>>,
    ) -> Result<Response<RaftAck>, Status> {
        let (metadata, _, mut batches) = request.into_parts();
        loop {
            let batch = tokio::select! {
                next = batches.message() => next?,
                _ = self.shutdown.cancelled() => None,
            };
            let Some(batch) = batch else {
                return Ok(Response::new(RaftAck {}));
            };
            self.admit(&metadata, &batch.set_name)?;
            self.deliver(&batch)?;
        }
    }

    /// A member is copying the data of a snapshot this member sent from another member:
    /// the driver counts the transfer as going on.
    async fn snapshot_copying(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<Response<RaftAck>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.admit(&metadata, &req.set_name)?;
        if self.faults.is_cut(req.member) {
            return Err(Status::unavailable("link cut"));
        }
        let _ = self.events.send(Event::SnapshotCopying(req.member));
        Ok(Response::new(RaftAck {}))
    }

    /// Exports this member's data on a blocking thread, a chunk at a time, and tells the
    /// driver when the transfer starts and how it ended (raft-rs waits for that report
    /// before it replicates to the member again).
    async fn fetch_snapshot(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<Response<Self::FetchSnapshotStream>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.admit(&metadata, &req.set_name)?;
        if self.faults.is_cut(req.member) {
            return Err(Status::unavailable("link cut"));
        }
        self.can_serve(req.min_index).await?;
        let engine = self
            .engine
            .upgrade()
            .ok_or_else(|| Status::unavailable("member is shutting down"))?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (events, to, status) = (self.events.clone(), req.member, self.status.clone());
        let _ = events.send(Event::SnapshotServing(to));
        let faults = self.faults.clone();
        tokio::spawn(async move {
            // A test may hold the transfer here, once the receiver has dropped its tables.
            faults.snapshot_released().await;
            tokio::task::spawn_blocking(move || {
                let r = super::snapshot::export(engine.as_ref(), &tx);
                match &r {
                    Ok(()) => status.write().snapshots_served += 1,
                    Err(e) => {
                        warn!(to, error = %e, "sending a snapshot failed");
                        let _ = tx.blocking_send(Err(Status::unavailable(e.to_string())));
                    }
                }
                let _ = events.send(Event::SnapshotServed { to, ok: r.is_ok() });
            });
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use proto::raft::raft_server::RaftServer;
    use raft::eraftpb::Entry;

    use super::*;

    /// A peer that counts the streams opened to it and the messages it reads. With
    /// `stall_first`, it never reads its first stream (a peer that stopped reading); with
    /// `one_batch_each`, it ends every stream after one batch.
    #[derive(Default, Clone)]
    struct Peer {
        streams: Arc<AtomicUsize>,
        received: Arc<AtomicUsize>,
        stall_first: bool,
        one_batch_each: bool,
    }

    #[tonic::async_trait]
    impl Raft for Peer {
        type FetchSnapshotStream = ReceiverStream<Result<SnapshotChunk, Status>>;

        async fn stream(
            &self,
            request: Request<Streaming<RaftBatch>>,
        ) -> Result<Response<RaftAck>, Status> {
            let n = self.streams.fetch_add(1, Ordering::SeqCst);
            let mut batches = request.into_inner();
            if self.stall_first && n == 0 {
                std::future::pending::<()>().await;
            }
            while let Some(batch) = batches.message().await? {
                self.received
                    .fetch_add(batch.messages.len(), Ordering::SeqCst);
                if self.one_batch_each {
                    break;
                }
            }
            Ok(Response::new(RaftAck {}))
        }

        async fn snapshot_copying(
            &self,
            _request: Request<SnapshotRequest>,
        ) -> Result<Response<RaftAck>, Status> {
            Ok(Response::new(RaftAck {}))
        }

        async fn fetch_snapshot(
            &self,
            _: Request<SnapshotRequest>,
        ) -> Result<Response<Self::FetchSnapshotStream>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
    }

    async fn serve(peer: Peer) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .initial_stream_window_size(Some(8 * 1024 * 1024))
                .initial_connection_window_size(Some(32 * 1024 * 1024))
                .add_service(RaftServer::new(peer).max_decoding_message_size(256 * 1024 * 1024))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        addr
    }

    /// A message to member 2 carrying one entry of `bytes` bytes.
    fn append(bytes: usize) -> Vec<Message> {
        let entry = Entry {
            data: vec![7u8; bytes].into(),
            ..Default::default()
        };
        vec![Message {
            to: 2,
            entries: vec![entry].into(),
            ..Default::default()
        }]
    }

    /// Starts a sending task to `peer` and sends it one-message batches of `bytes`, 50 ms
    /// apart, until `done` holds of it (at most 400 batches).
    async fn send_until(peer: &Peer, bytes: usize, done: impl Fn(&Peer) -> bool) {
        let addr = serve(peer.clone()).await;
        let (tx, rx) = unbounded_channel();
        tokio::spawn(send_loop("s".into(), addr, ClusterAuth::default(), rx));
        for _ in 0..400 {
            if done(peer) {
                return;
            }
            tx.send(append(bytes)).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn streams(peer: &Peer) -> usize {
        peer.streams.load(Ordering::SeqCst)
    }

    fn received(peer: &Peer) -> usize {
        peer.received.load(Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_the_peer_stopped_reading_is_given_up_for_a_new_one() {
        let peer = Peer {
            stall_first: true,
            ..Peer::default()
        };
        // 1 MiB batches: the stalled stream's 8 MiB window fills, then the four batches
        // the channel holds, and the next waits `SEND_TIMEOUT` for room.
        send_until(&peer, 1 << 20, |p| received(p) > 0).await;
        assert!(streams(&peer) >= 2, "no second stream");
        assert!(received(&peer) > 0, "nothing arrived on the new stream");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_the_peer_ended_is_opened_again() {
        let peer = Peer {
            one_batch_each: true,
            ..Peer::default()
        };
        send_until(&peer, 16, |p| streams(p) >= 3 && received(p) >= 3).await;
        assert!(streams(&peer) >= 3, "streams not reopened");
        assert!(received(&peer) >= 3, "the reopened streams carried nothing");
    }
}
