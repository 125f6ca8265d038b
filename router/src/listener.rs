//! Accepting client connections. Each connection is one tokio task (an idle connection
//! costs a task and a few KB, not a thread). Beyond `max_connections` a new connection is
//! closed at once, cheaply, so a storm never starves the connections already admitted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::conn::handle;
use crate::context::RouterState;
use crate::counters::OpCounters;
use crate::shard_client::ShardHandle;
use crate::tls::{Accepted, Tls};
use crate::{RouterConfig, RouterError};

/// A listen backlog sized for connection storms (the kernel caps it at somaxconn).
const LISTEN_BACKLOG: u32 = 4096;
/// How often the accept thread looks at the shutdown token when no client connects.
const ACCEPT_POLL: std::time::Duration = std::time::Duration::from_millis(100);

pub async fn bind(addr: &str) -> Result<TcpListener, RouterError> {
    let addr: std::net::SocketAddr = tokio::net::lookup_host(addr)
        .await?
        .next()
        .ok_or_else(|| RouterError::Config(format!("cannot resolve {addr}")))?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket.listen(LISTEN_BACKLOG)?)
}

pub async fn start(config: RouterConfig, shutdown: CancellationToken) -> Result<(), RouterError> {
    let listener = bind(&config.listen).await?;
    serve(listener, config, shutdown).await
}

/// Serves clients on an already bound listener until `shutdown`, then waits for the
/// connection tasks to finish.
pub async fn serve(
    listener: TcpListener,
    config: RouterConfig,
    shutdown: CancellationToken,
) -> Result<(), RouterError> {
    let tls = config.cluster_auth().map_err(RouterError::Config)?.tls;
    if !config.config_servers.is_empty() {
        let dial_via =
            proto::dial_via::DialVia::parse(&config.dial_via).map_err(RouterError::Config)?;
        let links = crate::sharding::grpc_links(tls, dial_via);
        let config_rs =
            crate::sharding::replica_set_of(&config.config_servers, &links, &config.site)?;
        return serve_cluster(listener, config, config_rs, links, shutdown).await;
    }
    let shard = ShardHandle::connect_with(&config.shard, &config.site, tls)?;
    serve_with(listener, config, shard, shutdown).await
}

/// Serves a sharded cluster whose catalog is on the config server replica set
/// `config_rs`; `links` says how to reach each shard member it names.
pub async fn serve_cluster(
    listener: TcpListener,
    config: RouterConfig,
    config_rs: ShardHandle,
    links: crate::sharding::LinkFactory,
    shutdown: CancellationToken,
) -> Result<(), RouterError> {
    // A router only presents a key: the first, when its file holds several.
    let key = proto::cluster_key::load(&config.cluster_key, &config.cluster_key_file)
        .map_err(RouterError::Config)?
        .map(|k| k.sent().to_string());
    // One gate for the config servers, shared by the catalog's handle and the router's.
    let config_rs = config_rs
        .with_cluster_key(key.clone())
        .map_err(RouterError::Config)?
        .with_forward_slots(config.forward_slots);
    let cluster = crate::sharding::Cluster::new(
        config_rs.clone(),
        links,
        &config.site,
        key,
        shutdown.clone(),
    )
    .with_catalog_cache(std::time::Duration::from_millis(config.catalog_cache_ms))
    .with_forward_slots(config.forward_slots);
    serve_inner(listener, config, config_rs, Some(cluster), shutdown).await
}

/// With client authentication on, the calls the router makes to members over the
/// network must be authenticated too: otherwise anyone who reaches a member's port
/// runs commands as no user at all. A router that would make them without a cluster
/// key does not start.
fn require_internal_auth(
    config: &RouterConfig,
    authenticated: bool,
    networked: bool,
) -> Result<(), RouterError> {
    if config.auth && networked && !authenticated {
        return Err(RouterError::Config(
            "auth = true needs internal authentication between router and members: set \
             cluster_key or cluster_key_file (the members need the same key), or the \
             tls_cluster_* certificates"
                .into(),
        ));
    }
    Ok(())
}

/// Like [`serve`], with the shard handle given (an in-process shard, for example).
pub async fn serve_with(
    listener: TcpListener,
    config: RouterConfig,
    shard: ShardHandle,
    shutdown: CancellationToken,
) -> Result<(), RouterError> {
    let shard = shard.with_forward_slots(config.forward_slots);
    serve_inner(listener, config, shard, None, shutdown).await
}

async fn serve_inner(
    listener: TcpListener,
    config: RouterConfig,
    shard: ShardHandle,
    cluster: Option<crate::sharding::Cluster>,
    shutdown: CancellationToken,
) -> Result<(), RouterError> {
    config.validate().map_err(RouterError::Config)?;
    let local = listener.local_addr()?;
    let auth = config.cluster_auth().map_err(RouterError::Config)?;
    let networked = shard.crosses_network() || cluster.is_some();
    require_internal_auth(&config, auth.is_set(), networked)?;
    let shard = shard
        .with_cluster_key(auth.sent_key())
        .map_err(RouterError::Config)?;
    let state = Arc::new(RouterState {
        auth: Arc::new(crate::auth::setup::auth_state(&config, &shard)?),
        audit: crate::audit::AuditLog::open(&config.audit_log, config.audit_log_max_mb)
            .map_err(RouterError::Config)?,
        tls: Tls::from_config(&config)?,
        shard,
        cluster,
        connection_slots: Arc::new(Semaphore::new(config.max_connections)),
        connection_rate: crate::overload::connection_rate::ConnectionRate::new(
            config.connection_rate_per_sec,
            config.connection_rate_burst,
            config.connection_rate_queue,
        ),
        handshakes: crate::overload::ingress::HandshakeGate::new(
            config.handshake_concurrency(),
            config.handshake_queue_limit,
            std::time::Duration::from_millis(config.handshake_queue_wait_ms),
        ),
        config,
        started: Instant::now(),
        counters: OpCounters::default(),
        connections_total: AtomicU64::new(0),
        cursors: Default::default(),
        fail_points: Default::default(),
        waits: Default::default(),
        lag: Default::default(),
        current_ops: Default::default(),
        sessions: Default::default(),
        transactions: Default::default(),
        host: format!(
            "{}:{}",
            hostname::get()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".into()),
            local.port()
        ),
    });
    info!(addr = %local, shard = %state.config.shard, auth = state.config.auth, tls = %state.config.tls_mode, "router listening");
    crate::log_buffer::started();
    let tasks = TaskTracker::new();
    tasks.spawn(state.shard.clone().monitor(shutdown.clone()));
    state.lag.spawn(&tasks, shutdown.clone());
    crate::auth::setup::spawn_bootstrap(&tasks, &state, shutdown.clone());
    crate::auth::revocation::spawn(&tasks, &state.auth, shutdown.clone());
    if let (Some(_), Ok(shards), Ok(zones)) = (
        &state.cluster,
        state.config.shards_to_add(),
        state.config.zones_to_set(),
    ) {
        if !shards.is_empty() {
            let state = state.clone();
            tasks.spawn(async move {
                if let Some(cluster) = state.cluster.as_ref() {
                    cluster.add_shards_at_start(shards, zones).await;
                }
            });
        }
    }
    let acceptor = spawn_acceptor(listener, state, tasks.clone(), shutdown.clone())?;
    shutdown.cancelled().await;
    // The acceptor notices within its accept timeout.
    let _ = tokio::task::spawn_blocking(move || acceptor.join()).await;
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// Accepts on an OS thread of its own and spawns each connection's task on the runtime.
///
/// Why a thread: the kernel's accept queue is first-in first-out. An accept loop that is
/// one task among thousands waits its turn behind them in a storm, the queue grows, and
/// every connection it takes is already old, often older than its client's timeout; the
/// newest-first handshake gate (`ingress.rs`) can only help connections that have been
/// accepted. A thread keeps the kernel queue short whatever the runtime is doing.
fn spawn_acceptor(
    listener: TcpListener,
    state: Arc<RouterState>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) -> Result<std::thread::JoinHandle<()>, RouterError> {
    let listener = listener.into_std()?;
    listener.set_nonblocking(false)?;
    // accept(2) honours SO_RCVTIMEO: the thread wakes to see the shutdown token.
    socket2::SockRef::from(&listener).set_read_timeout(Some(ACCEPT_POLL))?;
    let runtime = tokio::runtime::Handle::current();
    let thread = std::thread::Builder::new()
        .name("router-accept".into())
        .spawn(move || {
            while !shutdown.is_cancelled() {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        admit(stream, peer, &state, &tasks, &runtime, &shutdown);
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock
                                | std::io::ErrorKind::TimedOut
                                | std::io::ErrorKind::Interrupted
                        ) => {}
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        warn!(error = %e, "accept failed");
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
            }
        })?;
    Ok(thread)
}

/// Starts serving one accepted connection, or closes it at once beyond `max_connections`.
fn admit(
    stream: std::net::TcpStream,
    peer: std::net::SocketAddr,
    state: &Arc<RouterState>,
    tasks: &TaskTracker,
    runtime: &tokio::runtime::Handle,
    shutdown: &CancellationToken,
) {
    let Ok(permit) = state.connection_slots.clone().try_acquire_owned() else {
        debug!(%peer, "connection refused: max_connections reached");
        return;
    };
    let _ = stream.set_nodelay(true);
    let _runtime = runtime.enter();
    let Ok(stream) = stream
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(stream))
    else {
        return;
    };
    // Only this thread writes it: the counter's cache line does not bounce.
    let id = state.connections_total.fetch_add(1, Ordering::Relaxed) + 1;
    let state = state.clone();
    let shutdown = shutdown.clone();
    tasks.spawn_on(
        async move {
            let accepted = match &state.tls {
                Some(tls) => crate::tls::accept(tls, stream, peer, &shutdown).await,
                None => Some(Accepted::Plain(stream)),
            };
            match accepted {
                Some(Accepted::Plain(s)) => handle(s, peer, id, state, shutdown, None).await,
                Some(Accepted::Tls(s, subject)) => {
                    handle(s, peer, id, state, shutdown, subject).await
                }
                None => {}
            }
            drop(permit);
        },
        runtime,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_over_the_network_needs_a_cluster_key() {
        let config = RouterConfig {
            auth: true,
            ..Default::default()
        };
        assert!(require_internal_auth(&config, false, true).is_err());
        assert!(require_internal_auth(&config, true, true).is_ok());
        // In one process (`bulwark local`'s in-process link) nothing crosses a network.
        assert!(require_internal_auth(&config, false, false).is_ok());
        let open = RouterConfig::default();
        assert!(require_internal_auth(&open, false, true).is_ok());
    }
}
