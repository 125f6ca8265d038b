//! How a node authenticates to the others: the cluster key (`cluster_key`), mutual TLS
//! (`cluster_tls`), or both. Every place that opens a connection to another node, or
//! serves one, takes this one value.

use std::sync::Arc;

use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Endpoint;

use crate::cluster_tls::ClusterTls;

#[derive(Clone, Default)]
pub struct ClusterAuth {
    /// Sent with every call and required of every caller.
    pub key: Option<crate::cluster_key::ClusterKey>,
    /// Every connection runs over TLS with certificates on both sides.
    pub tls: Option<Arc<ClusterTls>>,
}

impl ClusterAuth {
    /// From a node's settings: `cluster_key`, `cluster_key_file`, and `tls_cluster_cert`,
    /// `tls_cluster_key`, `tls_cluster_ca`.
    pub fn load(
        key: &str,
        key_file: &str,
        [cert, tls_key, ca]: [&str; 3],
    ) -> Result<ClusterAuth, String> {
        Ok(ClusterAuth {
            key: crate::cluster_key::load(key, key_file)?,
            tls: ClusterTls::load(cert, tls_key, ca)?,
        })
    }

    /// Only the key (tests, and deployments without TLS).
    pub fn key(key: Option<String>) -> ClusterAuth {
        ClusterAuth {
            key: key.map(crate::cluster_key::ClusterKey::single),
            tls: None,
        }
    }

    /// True when the node authenticates at all.
    pub fn is_set(&self) -> bool {
        self.key.is_some() || self.tls.is_some()
    }

    /// The key as the metadata value calls carry.
    pub fn header(&self) -> Option<AsciiMetadataValue> {
        self.key.as_ref().and_then(|k| k.sent().parse().ok())
    }

    /// The key this node presents, if any.
    pub fn sent_key(&self) -> Option<String> {
        self.key.as_ref().map(|k| k.sent().to_string())
    }

    /// The endpoint of the node at `addr`, over TLS when the cluster runs it.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        crate::cluster_tls::endpoint(addr, self.tls.as_deref())
    }
}
