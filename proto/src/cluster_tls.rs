//! Mutual TLS between nodes: router→member and member→member calls (commands, Raft
//! streams, snapshots) over TLS, each side presenting a certificate signed by the
//! cluster's CA (`tls_cluster_cert`, `tls_cluster_key`, `tls_cluster_ca`). A member
//! refuses a connection whose client presents no such certificate, so a machine on a
//! site network without one can neither send commands nor join the Raft group, and the
//! cluster key (`cluster_key`) never crosses a network in clear.
//!
//! Membership is the certificate, not the address: a member is dialled by whatever
//! address the configuration names, and its certificate must carry [`MEMBER_NAME`] as a
//! subject alternative name. One certificate can serve every node of a deployment, or each
//! node gets its own.

use std::sync::Arc;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// The name every member certificate carries, and that callers verify.
pub const MEMBER_NAME: &str = "bulwark-member";

/// A node's certificate and key, and the CA its peers' certificates must chain to.
pub struct ClusterTls {
    identity: Identity,
    ca: Certificate,
}

impl ClusterTls {
    /// Reads the three PEM files; `None` when none is configured. Setting only some of
    /// them is an error: half a TLS configuration would silently fall back to plain text.
    pub fn load(cert: &str, key: &str, ca: &str) -> Result<Option<Arc<ClusterTls>>, String> {
        let read = |what: &str, path: &str| {
            std::fs::read(path).map_err(|e| format!("reading {what} {path}: {e}"))
        };
        match (cert.is_empty(), key.is_empty(), ca.is_empty()) {
            (true, true, true) => Ok(None),
            (false, false, false) => Ok(Some(Arc::new(ClusterTls {
                identity: Identity::from_pem(
                    read("tls_cluster_cert", cert)?,
                    read("tls_cluster_key", key)?,
                ),
                ca: Certificate::from_pem(read("tls_cluster_ca", ca)?),
            }))),
            _ => {
                Err("tls_cluster_cert, tls_cluster_key and tls_cluster_ca are set together".into())
            }
        }
    }

    /// What a member's server takes: its certificate, and client certificates required
    /// and verified against the cluster CA.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
    }

    fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
            .domain_name(MEMBER_NAME)
    }
}

/// The endpoint of the node at `addr` (`host:port`, or a URL): `https` with this node's
/// certificate when the cluster runs TLS, plain `http` otherwise.
pub fn endpoint(addr: &str, tls: Option<&ClusterTls>) -> Result<Endpoint, String> {
    let bare = addr
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{bare}"))
        .map_err(|e| format!("bad node address {addr}: {e}"))?;
    match tls {
        Some(tls) => endpoint
            .tls_config(tls.client())
            .map_err(|e| format!("TLS for {addr}: {e}")),
        None => Ok(endpoint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_files_or_none() {
        assert!(ClusterTls::load("", "", "").unwrap().is_none());
        let half = ClusterTls::load("/c.pem", "", "").err().unwrap();
        assert!(half.contains("together"), "{half}");
        let missing = ClusterTls::load("/no/c.pem", "/no/k.pem", "/no/ca.pem")
            .err()
            .unwrap();
        assert!(missing.contains("tls_cluster_cert"), "{missing}");
    }

    #[test]
    fn endpoints_follow_the_scheme() {
        let plain = endpoint("10.0.0.1:27100", None).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let url = endpoint("http://10.0.0.1:27100", None).unwrap();
        assert_eq!(url.uri().host(), Some("10.0.0.1"));
    }
}
