//! Forwarding commands to a shard over one shared HTTP/2 channel (no per-request pool:
//! requests wait in one visible place, not in a hidden pool queue).

use std::time::Duration;

use bson::Document;
use proto::shard::shard_client::ShardClient;
use proto::shard::CommandRequest;
use tonic::transport::{Channel, Endpoint};
use wire::{ErrorCode, MongoError, MongoResult};

use crate::RouterError;

/// Largest gRPC message either way (a 48 MB wire message plus envelope).
const MAX_GRPC_MESSAGE: usize = 64 * 1024 * 1024;
/// HTTP/2 flow-control windows (per stream, per connection).
pub const STREAM_WINDOW: u32 = 8 * 1024 * 1024;
pub const CONNECTION_WINDOW: u32 = 32 * 1024 * 1024;

#[derive(Clone)]
pub struct ShardHandle {
    client: ShardClient<Channel>,
    /// Sent with every call when the cluster uses a shared key (`proto::cluster_key`).
    cluster_key: Option<tonic::metadata::AsciiMetadataValue>,
}

impl ShardHandle {
    pub fn connect_lazy(addr: &str) -> Result<ShardHandle, RouterError> {
        let url = if addr.starts_with("http") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        let channel = Endpoint::from_shared(url)
            .map_err(|_| RouterError::ShardAddress(addr.to_string()))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(10))
            // HTTP/2's default 64 KiB windows stall a 100 KiB insert batch for a
            // WINDOW_UPDATE round trip; give a batch room to go out in one flight.
            .initial_stream_window_size(Some(STREAM_WINDOW))
            .initial_connection_window_size(Some(CONNECTION_WINDOW))
            .connect_lazy();
        let client = ShardClient::new(channel)
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE);
        Ok(ShardHandle {
            client,
            cluster_key: None,
        })
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

    /// Runs `cmd` on the shard; `max_time_ms` (0 = none) bounds both the shard's work and
    /// the wait here.
    pub async fn run(
        &self,
        db: &str,
        cmd: &Document,
        max_time_ms: u64,
        client: &str,
    ) -> MongoResult<Document> {
        let command = bson::to_vec(cmd)
            .map_err(|e| MongoError::new(ErrorCode::InvalidBSON, e.to_string()))?;
        let mut req = tonic::Request::new(CommandRequest {
            db: db.to_string(),
            command,
            max_time_ms,
            client: client.to_string(),
        });
        if let Some(key) = &self.cluster_key {
            req.metadata_mut()
                .insert(proto::cluster_key::HEADER, key.clone());
        }
        if max_time_ms > 0 {
            // A little slack so the shard reports MaxTimeMSExpired itself when it can.
            req.set_timeout(Duration::from_millis(max_time_ms + 50));
        }
        let reply = self
            .client
            .clone()
            .run_command(req)
            .await
            .map_err(status_to_error)?;
        Document::from_reader(&mut reply.into_inner().reply.as_slice())
            .map_err(|e| MongoError::internal(format!("shard sent an invalid reply: {e}")))
    }
}

fn status_to_error(s: tonic::Status) -> MongoError {
    match s.code() {
        tonic::Code::DeadlineExceeded => {
            MongoError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
        }
        tonic::Code::Unavailable => MongoError::new(
            ErrorCode::HostUnreachable,
            format!("shard unreachable: {}", s.message()),
        ),
        tonic::Code::InvalidArgument => {
            MongoError::new(ErrorCode::InvalidBSON, s.message().to_string())
        }
        _ => MongoError::internal(format!("shard call failed: {}", s.message())),
    }
}
