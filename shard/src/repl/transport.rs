//! Raft messages between members over tonic, as opaque raft-proto bytes.
//!
//! Each peer has one sending task fed by an unbounded channel: the driver thread never
//! waits on the network, and a slow or dead peer delays only its own messages. Raft
//! tolerates lost messages, so a failed send is dropped, not retried.
//!
//! `Faults` cuts links for tests (a member partitioned from the others), in both
//! directions, at this layer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use proto::raft::raft_client::RaftClient;
use proto::raft::raft_server::Raft;
use proto::raft::{RaftAck, RaftBatch};
use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};
use tracing::debug;

use super::driver::{encode_message, Event};

/// Links this member refuses to use: bit `id` set = the peer with that id is unreachable.
#[derive(Default)]
pub struct Faults {
    cut: AtomicU64,
}

impl Faults {
    pub fn cut(&self, peer: u64) {
        self.cut.fetch_or(1 << peer, Ordering::Relaxed);
    }
    pub fn heal_all(&self) {
        self.cut.store(0, Ordering::Relaxed);
    }
    fn is_cut(&self, peer: u64) -> bool {
        self.cut.load(Ordering::Relaxed) & (1 << peer) != 0
    }
}

pub struct Outbox {
    peers: HashMap<u64, UnboundedSender<Vec<Message>>>,
    faults: Arc<Faults>,
}

impl Outbox {
    /// Starts one sending task per peer (`peers`: id → gRPC address) on `rt`.
    pub fn start(
        set_name: &str,
        peers: &[(u64, String)],
        faults: Arc<Faults>,
        cluster_key: Option<&str>,
        rt: &tokio::runtime::Handle,
    ) -> Outbox {
        let mut map = HashMap::new();
        for (id, addr) in peers {
            let (tx, rx) = unbounded_channel();
            map.insert(*id, tx);
            let key = cluster_key.as_ref().and_then(|k| k.parse().ok());
            rt.spawn(send_loop(set_name.to_string(), addr.clone(), key, rx));
        }
        Outbox { peers: map, faults }
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

async fn send_loop(
    set_name: String,
    addr: String,
    key: Option<tonic::metadata::AsciiMetadataValue>,
    mut rx: UnboundedReceiver<Vec<Message>>,
) {
    let url = format!("http://{addr}");
    let Ok(endpoint) = Endpoint::from_shared(url) else {
        return;
    };
    let channel = endpoint
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(2))
        .initial_stream_window_size(Some(8 * 1024 * 1024))
        .initial_connection_window_size(Some(32 * 1024 * 1024))
        .connect_lazy();
    let mut client = RaftClient::new(channel)
        .max_encoding_message_size(256 * 1024 * 1024)
        .max_decoding_message_size(256 * 1024 * 1024);
    while let Some(first) = rx.recv().await {
        let mut messages: Vec<Vec<u8>> = first.iter().map(encode_message).collect();
        while let Ok(more) = rx.try_recv() {
            messages.extend(more.iter().map(encode_message));
        }
        let mut req = Request::new(RaftBatch {
            set_name: set_name.clone(),
            messages,
        });
        if let Some(key) = &key {
            req.metadata_mut()
                .insert(proto::cluster_key::HEADER, key.clone());
        }
        if let Err(e) = client.send(req).await {
            debug!(peer = %addr, error = %e.message(), "raft send failed");
        }
    }
}

/// The receiving side: hands decoded messages to the member's driver.
pub struct RaftService {
    pub set_name: String,
    pub events: Sender<Event>,
    pub faults: Arc<Faults>,
    /// When set, peers must present it (`proto::cluster_key`).
    pub cluster_key: Option<String>,
}

#[tonic::async_trait]
impl Raft for RaftService {
    async fn send(&self, request: Request<RaftBatch>) -> Result<Response<RaftAck>, Status> {
        if let Some(key) = &self.cluster_key {
            let presented = request.metadata().get(proto::cluster_key::HEADER);
            if !proto::cluster_key::verify(key, presented.map(|v| v.as_bytes())) {
                return Err(Status::unauthenticated("missing or wrong cluster key"));
            }
        }
        let batch = request.into_inner();
        if batch.set_name != self.set_name {
            return Err(Status::failed_precondition(format!(
                "this member belongs to replica set '{}', not '{}'",
                self.set_name, batch.set_name
            )));
        }
        let mut decoded = Vec::with_capacity(batch.messages.len());
        for bytes in &batch.messages {
            let m = Message::parse_from_bytes(bytes)
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
        Ok(Response::new(RaftAck {}))
    }
}
