//! The gRPC face of a shard node. Commands run on tokio's blocking pool because storage
//! calls block, except point reads (`point_read`), which are shorter than the hand-off;
//! the caller's remaining time becomes the command's deadline.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use proto::cluster_auth::ClusterAuth;
use proto::shard::shard_server::{Shard, ShardServer};
use proto::shard::{CommandReply, CommandRequest};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::info;

use crate::control::deadline::Deadline;
use crate::control::ops;
use crate::node::RunOptions;
use crate::repl::transport::RaftService;
use crate::sessions::write_concern::WriteConcern;
use crate::{Node, ShardConfig, ShardError};
use wire::ErrorCode;

/// Largest gRPC message either way: a 48 MB wire message plus envelope.
pub const MAX_GRPC_MESSAGE: usize = 64 * 1024 * 1024;
/// The largest HTTP/2 frame peers may send this server (1 MiB; HTTP/2 allows up to 16 MiB).
const MAX_FRAME: u32 = 1024 * 1024;

struct Service {
    node: Arc<Node>,
    /// When set, every call must carry this key (`proto::cluster_key`).
    cluster_key: Option<proto::cluster_key::ClusterKey>,
}

/// The node's command service as an object a router in the same process can call
/// directly (`bulwark local`, tests): the same handler the gRPC server runs.
pub fn in_process(node: Arc<Node>) -> Arc<dyn Shard> {
    Arc::new(Service {
        node,
        cluster_key: None,
    })
}

#[tonic::async_trait]
impl Shard for Service {
    async fn run_command(
        &self,
        request: Request<CommandRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        proto::cluster_key::admit(self.cluster_key.as_ref(), request.metadata())?;
        let req = request.into_inner();
        self.node.learn_cluster_time(req.cluster_time);
        let opts = RunOptions {
            deadline: Deadline::after_ms(req.max_time_ms),
            secondary_ok: req.secondary_ok,
            write_concern: WriteConcern {
                w: req.w,
                wtimeout: (req.wtimeout_ms > 0).then(|| Duration::from_millis(req.wtimeout_ms)),
            },
        };
        let name = bson::RawDocument::from_bytes(&req.command)
            .ok()
            .and_then(|d| d.iter().next())
            .and_then(|e| e.ok())
            .map(|(k, _)| k.to_string())
            .unwrap_or_default();
        let class = Node::admission_class(&name);
        // Listed in `currentOp` from now until it returns, queued or running.
        let registered = self.node.ops.register(ops::Describe {
            name,
            router_op: req.op_id,
            client: req.client.clone(),
            db: req.db.clone(),
            command: req.command.clone(),
            deadline: opts.deadline.0,
        });
        // If this call is dropped (the router's client hung up, or the router gave up),
        // the operation is told to stop: queued, it leaves the queue; running, it stops
        // at its next yield point.
        let mut stop_if_dropped = StopIfDropped(Some(registered.op.clone()));
        // The ticket is taken here, before a blocking thread is: a queued command holds
        // nothing but its place in line.
        let op = registered.op.clone();
        let admitted = tokio::select! {
            t = self.node.admission.admit(class, opts.deadline) => t,
            _ = op.killed() => {
                self.node.ops.count_interrupted();
                Err(op.interrupted().expect("killed operations have a reason"))
            }
        };
        let ticket = match admitted {
            Ok(t) => t,
            Err(e) => {
                let reply =
                    bson::to_vec(&e.to_document()).map_err(|e| Status::internal(e.to_string()))?;
                return Ok(Response::new(CommandReply {
                    reply,
                    cluster_time: self.node.cluster_time(),
                    ..Default::default()
                }));
            }
        };
        let queued_us = ticket.as_ref().map_or(0, |t| t.queued.as_micros() as u64);
        op.granted(ticket);
        let node = self.node.clone();
        let started = std::time::Instant::now();
        // A point read runs here: a thread hand-off would cost more than the read. Not
        // while a timed-out write is unresolved: the read waits for its outcome first.
        let inline = bson::RawDocument::from_bytes(&req.command)
            .is_ok_and(crate::control::point_read::is_point_read)
            && !self.node.timed_out_writes_pending();
        let runs_on = if inline {
            ops::RunsOn::Worker
        } else {
            ops::RunsOn::Blocking
        };
        let work = move || {
            let reply = ops::run_as(&registered, runs_on, || run_blocking(&node, &req, opts));
            registered.op.release_ticket();
            let reply = reply?;
            // Counted here: when the caller went away, no one awaits this task.
            let stopped = [
                ErrorCode::Interrupted as i32,
                ErrorCode::ClientDisconnect as i32,
            ];
            let code = reply.get_i32("code").ok();
            if registered.op.kill_reason() != ops::Kill::None
                && code.is_some_and(|c| stopped.contains(&c))
            {
                node.ops.count_interrupted();
            }
            let bytes =
                bson::to_vec(&reply).map_err(|e| Box::new(Status::internal(e.to_string())))?;
            Ok::<_, Box<Status>>(bytes)
        };
        let reply = if inline {
            // A panic stays this call's error, as a blocking task's does, instead of
            // unwinding through the gRPC stream's task.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .map_err(|_| Status::internal("command task failed: it panicked"))?
        } else {
            tokio::task::spawn_blocking(work)
                .await
                .map_err(|e| Status::internal(format!("command task failed: {e}")))?
        }
        .map_err(|e| *e)?;
        // Done: nothing left to stop.
        stop_if_dropped.0 = None;
        let (_, _, repl_us) = op.waits();
        Ok(Response::new(CommandReply {
            reply,
            queued_us,
            exec_us: started.elapsed().as_micros() as u64,
            repl_us,
            cluster_time: self.node.cluster_time(),
        }))
    }
}

/// Tells an operation to stop when the call running it is dropped before it is done.
struct StopIfDropped(Option<Arc<ops::Op>>);

impl Drop for StopIfDropped {
    fn drop(&mut self) {
        if let Some(op) = &self.0 {
            op.kill(ops::Kill::CallerGone);
        }
    }
}

/// Runs a command on a blocking thread. An insert's documents are stored as they came:
/// parsing each into a `Document` only to encode it again cost as much as the insert.
fn run_blocking(
    node: &Node,
    req: &CommandRequest,
    opts: RunOptions,
) -> Result<Document, Box<Status>> {
    Ok(match crate::commands::insert::split_raw(&req.command) {
        Some((body, docs)) => node.run_command_raw(&req.db, &body, Some(&docs), opts),
        None => {
            let cmd = Document::from_reader(&mut &req.command[..])
                .map_err(|e| Status::invalid_argument(format!("command is not BSON: {e}")))
                .map_err(Box::new)?;
            node.run_command_with(&req.db, &cmd, opts)
        }
    })
}

/// Opens the node described by `config` and serves it until `shutdown`.
pub async fn start(config: ShardConfig, shutdown: CancellationToken) -> Result<(), ShardError> {
    config.validate().map_err(ShardError::Catalog)?;
    let listener = TcpListener::bind(&config.listen).await?;
    let auth = config.cluster_auth().map_err(ShardError::Catalog)?;
    info!(
        addr = %listener.local_addr()?,
        cluster_key = auth.key.is_some(),
        tls = auth.tls.is_some(),
        "shard listening"
    );
    if config.replication.is_some() {
        let member = open_member(&config, listener).await?;
        shutdown.cancelled().await;
        member.shutdown.cancel();
        return member
            .task
            .await
            .map_err(|e| ShardError::Catalog(e.to_string()))?;
    }
    let ttl = Duration::from_secs(config.ttl_interval_secs);
    let kind = config.engine_kind().map_err(ShardError::Catalog)?;
    let cursor_timeout = config.cursor_timeout();
    let node = tokio::task::spawn_blocking(move || Node::open(&kind, cursor_timeout))
        .await
        .map_err(|e| ShardError::Catalog(e.to_string()))??;
    configure_admission(&node.admission, &config);
    serve_with_auth(node, listener, ttl, auth, shutdown).await
}

/// Opens the replica-set member `config` describes and serves it on `listener` in the
/// background, until its `shutdown` token is cancelled.
pub async fn open_member(
    config: &ShardConfig,
    listener: TcpListener,
) -> Result<RunningMember, ShardError> {
    let repl = config
        .replication
        .clone()
        .ok_or_else(|| ShardError::Catalog("not a replica set member: no [replication]".into()))?;
    let member = start_member(
        listener,
        config.dir.clone(),
        config.cache_mb,
        config.cursor_timeout(),
        Duration::from_secs(config.ttl_interval_secs),
        repl,
        config.cluster_auth().map_err(ShardError::Catalog)?,
    )
    .await?;
    configure_admission(&member.node.admission, config);
    Ok(member)
}

/// Serves an already opened node on an already bound listener (tests use port 0).
pub async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    ttl_interval: Duration,
    shutdown: CancellationToken,
) -> Result<(), ShardError> {
    let open = ClusterAuth::default();
    serve_member(node, None, listener, ttl_interval, open, shutdown).await
}

/// [`serve`], refusing calls that do not authenticate as `auth` says (the cluster key,
/// a member certificate over TLS).
pub async fn serve_with_auth(
    node: Arc<Node>,
    listener: TcpListener,
    ttl_interval: Duration,
    auth: ClusterAuth,
    shutdown: CancellationToken,
) -> Result<(), ShardError> {
    serve_member(node, None, listener, ttl_interval, auth, shutdown).await
}

/// Serves a node, and when it is a replica-set member, the Raft service its peers send
/// to, on one port; both refuse callers that do not authenticate as `auth` says.
pub async fn serve_member(
    node: Arc<Node>,
    raft: Option<RaftService>,
    listener: TcpListener,
    ttl_interval: Duration,
    auth: ClusterAuth,
    shutdown: CancellationToken,
) -> Result<(), ShardError> {
    let background = crate::ttl::spawn_background(node.clone(), ttl_interval, shutdown.clone());
    let (min, max) = node.admission.probe_bounds();
    let probed = node.clone();
    tokio::spawn(crate::control::throughput_probe::run(
        node.admission.reads.clone(),
        min,
        max,
        move || probed.admission.probing(),
        shutdown.clone(),
    ));
    let svc = ShardServer::new(Service {
        node: node.clone(),
        cluster_key: auth.key.clone(),
    })
    .max_decoding_message_size(MAX_GRPC_MESSAGE)
    .max_encoding_message_size(MAX_GRPC_MESSAGE);
    // tonic applies tcp_nodelay only to listeners it binds itself; without it, small gRPC
    // frames wait for delayed ACKs (40 ms per round trip).
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |s| {
            if let Ok(s) = &s {
                let _ = s.set_nodelay(true);
            }
            s
        },
    );
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &auth.tls {
        server = server.tls_config(tls.server())?;
    }
    let result = server
        .tcp_nodelay(true)
        // HTTP/2's default 64 KiB windows would hold a 100 KiB insert batch for a
        // WINDOW_UPDATE round trip (the router sets the same for replies).
        .initial_stream_window_size(Some(8 * 1024 * 1024))
        .initial_connection_window_size(Some(32 * 1024 * 1024))
        // HTTP/2's default 16 KiB frames cut a 100 KiB batch or Raft append into seven,
        // each its own `writev` at the sender and reads at this end (`strace -c` of
        // repl-bench, per Raft log sync: 17 writev and 20 reads, 11 and 10 with 1 MiB
        // frames); a frame may hold a whole message. Only frames sent to this server:
        // replies to the router keep its client's 16 KiB, which tonic does not expose.
        .max_frame_size(Some(MAX_FRAME))
        .add_service(svc)
        .add_optional_service(raft.map(|mut r| {
            r.shutdown = shutdown.clone();
            proto::raft::raft_server::RaftServer::new(r)
                .max_decoding_message_size(256 * 1024 * 1024)
        }))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled())
        .await;
    shutdown.cancel();
    let _ = background.await;
    node.stop_replication();
    // Flush everything to the data files so the next start does not replay the log.
    let engine = node.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.checkpoint()).await;
    result.map_err(ShardError::from)
}

/// A replica-set member running in this process (`bulwark local`, tests).
pub struct RunningMember {
    pub id: u64,
    pub addr: std::net::SocketAddr,
    pub node: Arc<Node>,
    /// Cancelling it stops this member alone (as a crash of its process would, minus
    /// the final checkpoint's absence: recovery replays the Raft log either way).
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), ShardError>>,
    /// Whether its WiredTiger has closed, which can come after `task` ends (a checkpoint
    /// running at the stop holds the engine until it finishes); see `stop`.
    pub storage: storage::CloseWatch,
}

/// How long `RunningMember::stop` waits for WiredTiger to close after serving ended.
const STORAGE_CLOSE_LIMIT: Duration = Duration::from_secs(60);

impl RunningMember {
    /// Stops this member (its port closes, its Raft thread stops) and returns once its
    /// WiredTiger has closed too, so that its directory may be deleted or opened again in
    /// this process: closing writes the checkpoint's metadata by path, so an engine still
    /// closing would write into its successor's files. Returns how serving ended, or an
    /// error when the storage is still open after `STORAGE_CLOSE_LIMIT`.
    pub async fn stop(self) -> Result<(), ShardError> {
        self.shutdown.cancel();
        let served = self
            .task
            .await
            .map_err(|e| ShardError::Catalog(format!("member task: {e}")))?;
        drop(self.node);
        let started = std::time::Instant::now();
        while !self.storage.is_closed() {
            if started.elapsed() > STORAGE_CLOSE_LIMIT {
                return Err(ShardError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("member {}'s storage still open after it stopped", self.id),
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        served
    }
}

/// Opens member `repl.me` in `dir` and serves it on `listener` (bound beforehand, so
/// every member's address is known before any starts).
pub async fn start_member(
    listener: TcpListener,
    dir: std::path::PathBuf,
    cache_mb: usize,
    cursor_timeout: Duration,
    ttl_interval: Duration,
    repl: crate::repl::ReplConfig,
    auth: ClusterAuth,
) -> Result<RunningMember, ShardError> {
    let id = repl.me;
    let addr = listener.local_addr()?;
    let rt = tokio::runtime::Handle::current();
    let member_auth = auth.clone();
    let (node, raft, storage) = tokio::task::spawn_blocking(move || {
        Node::open_member(&dir, cache_mb, cursor_timeout, repl, member_auth, &rt)
    })
    .await
    .map_err(|e| ShardError::Catalog(e.to_string()))??;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_member(
        node.clone(),
        Some(raft),
        listener,
        ttl_interval,
        auth,
        shutdown.clone(),
    ));
    Ok(RunningMember {
        id,
        addr,
        node,
        shutdown,
        task,
        storage,
    })
}

fn configure_admission(admission: &crate::control::admission::Admission, config: &ShardConfig) {
    if config.admission_control {
        admission.configure(config.read_tickets, config.write_tickets);
        admission.set_probe_bounds(config.read_tickets_min, config.read_tickets_max);
    } else {
        admission.disable();
    }
}
