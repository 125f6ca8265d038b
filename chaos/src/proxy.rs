//! Fault-injecting links for the local target. Every member→member and router→member
//! connection goes through a proxy owned by the runner, one per directed link, so a site
//! can be cut off from the others on loopback without root, namespaces or iptables.
//!
//! A cut link behaves like a partition, not like a refused port: open connections die,
//! and new ones are accepted but never answered until the link heals (as a SYN into a
//! black hole would be), so peers find out through their own timeouts.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One directed link: connections from `from_site` to `upstream` (in `to_site`).
pub struct Link {
    pub from_site: String,
    pub to_site: String,
    pub listen: SocketAddr,
    cut: watch::Sender<bool>,
}

impl Link {
    /// Starts forwarding `listen` → `upstream` until `shutdown`.
    pub async fn start(
        from_site: &str,
        to_site: &str,
        listen: SocketAddr,
        upstream: SocketAddr,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<Link>> {
        let listener = TcpListener::bind(listen).await?;
        let link = Arc::new(Link {
            from_site: from_site.into(),
            to_site: to_site.into(),
            listen: listener.local_addr()?,
            cut: watch::Sender::new(false),
        });
        let l = link.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else { continue };
                let cut = l.cut.subscribe();
                tokio::spawn(forward(client, upstream, cut, shutdown.clone()));
            }
        });
        Ok(link)
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }

    /// Whether cutting `site` off from the others cuts this link.
    pub fn crosses(&self, site: &str) -> bool {
        (self.from_site == site) != (self.to_site == site)
    }
}

async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut cut: watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    // Cut now: hold the connection unanswered until the link heals, then drop it.
    if *cut.borrow_and_update() {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = cut.wait_for(|c| !*c) => {}
        }
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = cut.wait_for(|c| *c) => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
    }
}

/// Every link of a cluster.
#[derive(Default)]
pub struct Links {
    links: Vec<Arc<Link>>,
}

impl Links {
    /// Starts a link `listen` → `upstream` and keeps it; returns its address.
    pub async fn open(
        &mut self,
        from_site: &str,
        to_site: &str,
        listen: SocketAddr,
        upstream: SocketAddr,
        shutdown: CancellationToken,
    ) -> anyhow::Result<SocketAddr> {
        let link = Link::start(from_site, to_site, listen, upstream, shutdown).await?;
        let at = link.listen;
        self.links.push(link);
        Ok(at)
    }

    /// Cuts `site` off from the other sites (its own links stay up).
    pub fn partition(&self, site: &str) {
        for l in self.links.iter().filter(|l| l.crosses(site)) {
            l.set_cut(true);
        }
    }

    pub fn heal(&self) {
        for l in &self.links {
            l.set_cut(false);
        }
    }
}
