//! Building the router's auth state from its configuration, and creating the bootstrap
//! admin user (`admin_user`/`admin_password`) once the shard answers.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::nonce::NonceSource;
use super::store::ShardUserStore;
use super::AuthState;
use crate::context::RouterState;
use crate::shard_client::ShardHandle;
use crate::{RouterConfig, RouterError};

pub fn auth_state(config: &RouterConfig, shard: &ShardHandle) -> Result<AuthState, RouterError> {
    let nonce = NonceSource::parse(&config.nonce_source).map_err(RouterError::Config)?;
    let store = Arc::new(ShardUserStore::new(shard.clone()));
    Ok(AuthState::new(config.auth, nonce, store))
}

/// Retries until the shard is reachable (in `bulwark local` both start together).
pub fn spawn_bootstrap(tasks: &TaskTracker, state: &Arc<RouterState>, shutdown: CancellationToken) {
    let c = &state.config;
    if c.admin_user.is_empty() {
        return;
    }
    let (user, password, auth) = (
        c.admin_user.clone(),
        c.admin_password.clone(),
        state.auth.clone(),
    );
    auth.set_bootstrap_pending(Some(user.clone()));
    tasks.spawn(async move {
        for attempt in 0u32.. {
            match auth.bootstrap_admin(&user, &password).await {
                Ok(created) => {
                    info!(%user, created, "bootstrap admin user ready");
                    auth.set_bootstrap_pending(None);
                    return;
                }
                Err(e) if attempt % 20 == 0 => {
                    warn!(%user, error = %e, "creating the bootstrap admin user; retrying")
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => {
                    auth.set_bootstrap_pending(None);
                    return;
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
}
