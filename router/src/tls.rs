//! Client TLS (rustls). In `allowTLS` and `preferTLS` one port serves both kinds of
//! client, told apart by peeking at the first bytes: a TLS client opens with a handshake
//! record, `0x16 0x03 0x0v`. A MongoDB client opens with its message length, little-endian;
//! those bytes would need a first message of about 200 KB, and the first message is a
//! small `hello`. `requireTLS` closes plain connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::{RouterConfig, RouterError};

/// A client that opens a connection but neither speaks nor finishes a TLS handshake
/// within this long is dropped, so it cannot hold a connection slot forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Disabled,
    Allow,
    Prefer,
    Require,
}

impl TlsMode {
    pub fn parse(s: &str) -> Result<TlsMode, String> {
        match s {
            "disabled" => Ok(TlsMode::Disabled),
            "allowTLS" => Ok(TlsMode::Allow),
            "preferTLS" => Ok(TlsMode::Prefer),
            "requireTLS" => Ok(TlsMode::Require),
            other => Err(format!(
                "tls_mode must be disabled, allowTLS, preferTLS or requireTLS, not \"{other}\""
            )),
        }
    }
}

pub struct Tls {
    pub mode: TlsMode,
    acceptor: TlsAcceptor,
}

impl Tls {
    /// `None` when TLS is disabled.
    pub fn from_config(c: &RouterConfig) -> Result<Option<Tls>, RouterError> {
        let mode = TlsMode::parse(&c.tls_mode).map_err(RouterError::Tls)?;
        if mode == TlsMode::Disabled {
            return Ok(None);
        }
        if c.tls_cert.is_empty() || c.tls_key.is_empty() {
            return Err(RouterError::Tls(format!(
                "tls_mode {} needs tls_cert and tls_key",
                c.tls_mode
            )));
        }
        let err = |what: &str, path: &str, e: &dyn std::fmt::Display| {
            RouterError::Tls(format!("{what} {path}: {e}"))
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&c.tls_cert)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| err("reading certificate", &c.tls_cert, &e))?;
        let key = PrivateKeyDer::from_pem_file(&c.tls_key)
            .map_err(|e| err("reading key", &c.tls_key, &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| RouterError::Tls(e.to_string()))?;
        let builder = if c.tls_ca.is_empty() {
            builder.with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&c.tls_ca)
                .map_err(|e| err("reading CA", &c.tls_ca, &e))?
            {
                roots
                    .add(cert.map_err(|e| err("reading CA", &c.tls_ca, &e))?)
                    .map_err(|e| err("adding CA", &c.tls_ca, &e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if c.tls_require_client_cert {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| RouterError::Tls(e.to_string()))?,
            )
        };
        let config = builder
            .with_single_cert(certs, key)
            .map_err(|e| RouterError::Tls(format!("certificate and key: {e}")))?;
        Ok(Some(Tls {
            mode,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        }))
    }
}

/// An accepted connection, ready for the wire protocol.
pub enum Accepted {
    Plain(TcpStream),
    /// With the subject of the client's certificate, when it sent one (verified against
    /// `tls_ca` during the handshake).
    Tls(
        Box<tokio_rustls::server::TlsStream<TcpStream>>,
        Option<String>,
    ),
}

/// Tells TLS from plain by the mode and the first bytes, and runs the TLS handshake;
/// `None` when the connection is to be closed.
pub async fn accept(
    tls: &Tls,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: &CancellationToken,
) -> Option<Accepted> {
    let mut first = [0u8; 3];
    let peeked = tokio::select! {
        _ = shutdown.cancelled() => return None,
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)) => r,
    };
    let is_tls = match peeked {
        // A short peek (the bytes arrived in pieces) decides on what is there.
        Ok(Ok(n)) if n > 0 => {
            first[0] == 0x16 && (n < 2 || first[1] == 0x03) && (n < 3 || first[2] <= 0x04)
        }
        _ => return None,
    };
    if !is_tls {
        if tls.mode == TlsMode::Require {
            debug!(%peer, "closing a plain connection: tls_mode is requireTLS");
            return None;
        }
        return Some(Accepted::Plain(stream));
    }
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor.accept(stream)).await {
        Ok(Ok(s)) => {
            let subject = s
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| crate::cert_subject::subject_of(leaf));
            Some(Accepted::Tls(Box::new(s), subject))
        }
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}
