//! Asking the set's other data-bearing members something over the shard service (the
//! same gRPC server that carries their Raft traffic), for a primary that must know what
//! its secondaries are doing: today, whether a cursor there still reads a range the
//! primary is about to delete (`range_deleter`).
//!
//! These calls are rare and each opens its own connection: nothing here sits on the write
//! path. Cut links (`Faults`) are honoured, so a partitioned member is unreachable here
//! too.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use proto::cluster_auth::ClusterAuth;
use proto::shard::shard_client::ShardClient;
use proto::shard::CommandRequest;
use tonic::Request;

use super::transport::Faults;

/// The other data-bearing members of a set, as this member dials them.
pub struct Peers {
    /// (member id, gRPC address).
    members: Vec<(u64, String)>,
    faults: Arc<Faults>,
    auth: ClusterAuth,
    rt: tokio::runtime::Handle,
}

impl Peers {
    pub fn new(
        members: Vec<(u64, String)>,
        faults: Arc<Faults>,
        auth: ClusterAuth,
        rt: &tokio::runtime::Handle,
    ) -> Peers {
        Peers {
            members,
            faults,
            auth,
            rt: rt.clone(),
        }
    }

    /// Runs the internal command `cmd` (in database `db`) on every other data-bearing
    /// member at once, each given `timeout`; each member's reply document, or why there is
    /// none. Blocks the calling thread, which must not be a runtime thread.
    pub fn ask_all(
        &self,
        db: &str,
        cmd: &Document,
        timeout: Duration,
    ) -> Vec<(u64, Result<Document, String>)> {
        let Ok(bytes) = bson::to_vec(cmd) else {
            return Vec::new();
        };
        // Spawned, so the members are asked at once and a dead one costs one timeout.
        let calls: Vec<_> = self
            .members
            .iter()
            .map(|(id, addr)| {
                let (id, addr, bytes) = (*id, addr.clone(), bytes.clone());
                let cut = self.faults.is_cut(id);
                let (auth, db) = (self.auth.clone(), db.to_string());
                self.rt.spawn(async move {
                    if cut {
                        return Err(format!("member {id} is unreachable"));
                    }
                    tokio::time::timeout(timeout, ask(addr, db, bytes, auth, timeout))
                        .await
                        .unwrap_or_else(|_| Err(format!("member {id} did not answer in time")))
                })
            })
            .collect();
        self.rt.block_on(async {
            let mut answers = Vec::with_capacity(calls.len());
            for ((id, _), call) in self.members.iter().zip(calls) {
                answers.push((*id, call.await.unwrap_or_else(|e| Err(e.to_string()))));
            }
            answers
        })
    }
}

async fn ask(
    addr: String,
    db: String,
    command: Vec<u8>,
    auth: ClusterAuth,
    timeout: Duration,
) -> Result<Document, String> {
    let channel = auth
        .endpoint(&addr)?
        .tcp_nodelay(true)
        .connect_timeout(timeout)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut req = Request::new(CommandRequest {
        db,
        command: command.into(),
        max_time_ms: timeout.as_millis() as u64,
        ..Default::default()
    });
    if let Some(key) = auth.header() {
        req.metadata_mut().insert(proto::cluster_key::HEADER, key);
    }
    let reply = ShardClient::new(channel)
        .run_command(req)
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner();
    bson::from_slice(&reply.reply).map_err(|e| e.to_string())
}
