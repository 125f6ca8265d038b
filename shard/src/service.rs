//! The gRPC face of a shard node. Commands run on tokio's blocking pool because storage
//! calls block; the caller's remaining time becomes the command's deadline.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use proto::shard::shard_server::{Shard, ShardServer};
use proto::shard::{CommandReply, CommandRequest};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::info;

use crate::cursor::Deadline;
use crate::{Node, ShardConfig, ShardError};

/// Largest gRPC message either way: a 48 MB wire message plus envelope.
pub const MAX_GRPC_MESSAGE: usize = 64 * 1024 * 1024;

struct Service {
    node: Arc<Node>,
    /// When set, every call must carry this key (`proto::cluster_key`).
    cluster_key: Option<String>,
}

#[tonic::async_trait]
impl Shard for Service {
    async fn run_command(
        &self,
        request: Request<CommandRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        if let Some(key) = &self.cluster_key {
            let presented = request.metadata().get(proto::cluster_key::HEADER);
            if !proto::cluster_key::verify(key, presented.map(|v| v.as_bytes())) {
                return Err(Status::unauthenticated("missing or wrong cluster key"));
            }
        }
        let req = request.into_inner();
        let deadline = Deadline::after_ms(req.max_time_ms);
        let node = self.node.clone();
        let reply = tokio::task::spawn_blocking(move || {
            let cmd = Document::from_reader(&mut req.command.as_slice())
                .map_err(|e| Status::invalid_argument(format!("command is not BSON: {e}")))
                .map_err(Box::new)?;
            let reply = node.run_command(&req.db, &cmd, deadline);
            bson::to_vec(&reply).map_err(|e| Box::new(Status::internal(e.to_string())))
        })
        .await
        .map_err(|e| Status::internal(format!("command task failed: {e}")))?
        .map_err(|e| *e)?;
        Ok(Response::new(CommandReply { reply }))
    }
}

/// Opens the node described by `config` and serves it until `shutdown`.
pub async fn start(config: ShardConfig, shutdown: CancellationToken) -> Result<(), ShardError> {
    let kind = config.engine_kind().map_err(ShardError::Catalog)?;
    let cursor_timeout = config.cursor_timeout();
    let node = tokio::task::spawn_blocking(move || Node::open(&kind, cursor_timeout))
        .await
        .map_err(|e| ShardError::Catalog(e.to_string()))??;
    let listener = TcpListener::bind(&config.listen).await?;
    let key = proto::cluster_key::load(&config.cluster_key, &config.cluster_key_file)
        .map_err(ShardError::Catalog)?;
    info!(addr = %listener.local_addr()?, cluster_key = key.is_some(), "shard listening");
    let ttl = Duration::from_secs(config.ttl_interval_secs);
    serve_with_key(node, listener, ttl, key, shutdown).await
}

/// Serves an already opened node on an already bound listener (tests use port 0).
pub async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    ttl_interval: Duration,
    shutdown: CancellationToken,
) -> Result<(), ShardError> {
    serve_with_key(node, listener, ttl_interval, None, shutdown).await
}

/// [`serve`], refusing calls that do not carry `cluster_key` when one is given.
pub async fn serve_with_key(
    node: Arc<Node>,
    listener: TcpListener,
    ttl_interval: Duration,
    cluster_key: Option<String>,
    shutdown: CancellationToken,
) -> Result<(), ShardError> {
    let background = crate::ttl::spawn_background(node.clone(), ttl_interval, shutdown.clone());
    let svc = ShardServer::new(Service {
        node: node.clone(),
        cluster_key,
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
    let result = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        // HTTP/2's default 64 KiB windows would hold a 100 KiB insert batch for a
        // WINDOW_UPDATE round trip (the router sets the same for replies).
        .initial_stream_window_size(Some(8 * 1024 * 1024))
        .initial_connection_window_size(Some(32 * 1024 * 1024))
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled())
        .await;
    shutdown.cancel();
    let _ = background.await;
    // Flush everything to the data files so the next start does not replay the log.
    let engine = node.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.checkpoint()).await;
    result.map_err(ShardError::from)
}
