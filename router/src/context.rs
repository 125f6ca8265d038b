//! What commands run with: the connection's [`Session`] and the router-wide
//! [`RouterState`]. The connection loop (`conn.rs`), the listener, the commands,
//! authorization and sharding depend on this module rather than on each other.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use wire::Compressor;

use crate::auth::AuthState;
use crate::counters::OpCounters;
use crate::shard_client::ShardHandle;
use crate::tls::Tls;
use crate::RouterConfig;

/// State shared by every connection of one router.
pub struct RouterState {
    pub config: RouterConfig,
    /// The one shard of an unsharded cluster; in a sharded cluster, the config server
    /// replica set (where users, roles and the `admin` and `config` databases live).
    pub shard: ShardHandle,
    /// Set in a sharded cluster: the catalog cache and the shards.
    pub cluster: Option<crate::sharding::Cluster>,
    pub started: Instant,
    pub counters: OpCounters,
    pub connections_total: AtomicU64,
    pub connection_slots: Arc<Semaphore>,
    /// New connections wait here to handshake (`ingress.rs`).
    pub handshakes: Arc<crate::overload::ingress::HandshakeGate>,
    /// The new-connection rate limit, when configured (`connection_rate.rs`).
    pub connection_rate: Option<crate::overload::connection_rate::ConnectionRate>,
    pub host: String,
    pub auth: Arc<AuthState>,
    /// The audit log, when `audit_log` is set.
    pub audit: Option<crate::audit::AuditLog>,
    /// `None` when `tls_mode` is disabled.
    pub tls: Option<Tls>,
    /// Open cursors: where each lives and who may use it.
    pub cursors: crate::cursors::Cursors,
    /// `configureFailPoint` state (test commands only).
    pub fail_points: crate::fail_point::FailPoints,
    /// Where forwarded commands waited (`serverStatus.bulwark.waits`).
    pub waits: crate::wait_histograms::WaitHistograms,
    /// How late the runtime runs tasks (`runtime_lag.rs`).
    pub lag: Arc<crate::overload::runtime_lag::RuntimeLag>,
    /// What each connection is running (`currentOp`, `killOp`).
    pub current_ops: Arc<crate::current_ops::CurrentOps>,
    /// The logical sessions commands named (`$listLocalSessions`).
    pub sessions: crate::session_cache::SessionCache,
    /// The shard each session's transaction runs on.
    pub transactions: crate::transactions::Transactions,
}

impl RouterState {
    pub fn current_connections(&self) -> i64 {
        (self.config.max_connections - self.connection_slots.available_permits()) as i64
    }
}

/// Per-connection state that commands can read or change.
pub struct Session {
    pub id: u64,
    pub peer: SocketAddr,
    /// `peer` formatted once; sent with every forwarded command.
    pub peer_text: String,
    pub state: Arc<RouterState>,
    /// Compressors agreed in the handshake (`hello.compression`).
    pub compressors: Vec<Compressor>,
    next_request_id: i32,
    /// Who is authenticated here, and any SASL conversation in progress.
    pub auth: crate::auth::ConnAuth,
    /// `client.application.name` from the handshake (fail points can target it).
    pub app_name: Option<String>,
    /// Set when the connection must close without answering (a fail point).
    pub closing: bool,
    /// Where the last forwarded command waited on the shard (for the slow-op log).
    pub last_waits: Option<crate::shard_client::Waits>,
    /// Picks the forwarded calls that measure transit.
    pub transit_sampler: crate::overload::runtime_lag::TransitSampler,
    /// Picks the forwarded calls whose slot hold time feeds the gate's mean.
    pub hold_sampler: crate::overload::runtime_lag::TransitSampler,
    /// This connection's slot in `currentOp`.
    pub ops: Arc<crate::current_ops::ConnOps>,
    /// Fires if the next command is killed (`killOp`); taken when the command starts.
    next_cancel: Option<CancellationToken>,
    /// When the router read the command being run (its `maxTimeMS` counts from here).
    pub request_started: Instant,
    /// The logical session this connection used last (`session_cache.rs`).
    pub recent_session: crate::session_cache::Recent,
}

impl Session {
    /// A new connection's session, registered in `currentOp` as `ops`.
    pub fn new(
        id: u64,
        peer: SocketAddr,
        state: Arc<RouterState>,
        ops: Arc<crate::current_ops::ConnOps>,
        x509_subject: Option<String>,
    ) -> Session {
        Session {
            id,
            peer,
            peer_text: peer.to_string(),
            state,
            compressors: Vec::new(),
            next_request_id: 1,
            auth: crate::auth::ConnAuth {
                x509_subject,
                ..Default::default()
            },
            app_name: None,
            closing: false,
            last_waits: None,
            transit_sampler: Default::default(),
            hold_sampler: Default::default(),
            ops,
            next_cancel: None,
            request_started: Instant::now(),
            recent_session: Default::default(),
        }
    }

    /// The id of the next reply this connection sends.
    pub fn next_request_id(&mut self) -> i32 {
        self.next_request_id = self.next_request_id.wrapping_add(1);
        self.next_request_id
    }

    /// Makes `cancel` fire the next command this connection runs (`killOp`).
    pub fn arm_cancel(&mut self, cancel: CancellationToken) {
        self.next_cancel = Some(cancel);
    }

    /// The token armed for this command, or a fresh one.
    pub fn take_cancel(&mut self) -> CancellationToken {
        self.next_cancel.take().unwrap_or_default()
    }

    /// Who this connection is, for the audit log.
    pub fn actor(&self) -> crate::audit::Actor<'_> {
        crate::audit::Actor {
            peer: &self.peer_text,
            user: self
                .auth
                .user
                .as_ref()
                .map(|u| (u.user.as_str(), u.db.as_str())),
        }
    }
}
