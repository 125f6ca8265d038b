//! `bulwark local` security flags: authentication, TLS, and the per-run cluster key
//! between its router and shard. Kept apart from `local.rs` so the wiring there stays
//! a few lines.

use std::path::PathBuf;

#[derive(clap::Args, Default)]
pub struct SecurityArgs {
    /// Require clients to authenticate (SCRAM) and check their privileges.
    #[arg(long)]
    auth: bool,
    /// With --auth: a user created at start with the root role in admin.
    #[arg(long, requires = "admin_password")]
    admin_user: Option<String>,
    /// Password of --admin-user (never stored: only its salted SCRAM keys are).
    #[arg(long, requires = "admin_user")]
    admin_password: Option<String>,
    /// SCRAM nonce source: user (per-thread CSPRNG) or os (getrandom per nonce).
    #[arg(long, default_value = "user")]
    nonce_source: String,
    /// disabled, allowTLS, preferTLS or requireTLS.
    #[arg(long, default_value = "disabled")]
    tls_mode: String,
    /// PEM certificate chain the router presents.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// PEM CA bundle for verifying client certificates.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

impl SecurityArgs {
    /// Applies the flags to the router's config and returns the cluster key the router
    /// and shard share for this run (fresh each time; nothing else needs to know it).
    pub fn apply(&self, router: &mut router::RouterConfig) -> String {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        router.auth = self.auth;
        router.admin_user = self.admin_user.clone().unwrap_or_default();
        router.admin_password = self.admin_password.clone().unwrap_or_default();
        router.nonce_source = self.nonce_source.clone();
        router.tls_mode = self.tls_mode.clone();
        router.tls_cert = path(&self.tls_cert);
        router.tls_key = path(&self.tls_key);
        router.tls_ca = path(&self.tls_ca);
        let key = router::auth::nonce::NonceSource::Os.nonce();
        router.cluster_key = key.clone();
        key
    }
}
