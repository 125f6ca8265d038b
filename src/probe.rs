//! `bulwark probe ADDR`: whether a member takes a call from a caller holding the given
//! credentials (none, a cluster key, a certificate). Operators check with it that a
//! member serves its cluster and refuses everyone else; `deploy/cluster.sh stranger` runs
//! it from a container on a site network with no certificate, and with one from another
//! CA. Exit status 0: the member took the call; 1: it refused.

use std::time::Duration;

use bson::doc;
use proto::cluster_auth::ClusterAuth;

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// The member's gRPC address (host:port).
    addr: String,
    /// A file holding the cluster key to present.
    #[arg(long, default_value = "")]
    cluster_key_file: String,
    /// The certificate, key and CA to connect with over TLS (all three, or none).
    #[arg(long, default_value = "")]
    tls_cluster_cert: String,
    #[arg(long, default_value = "")]
    tls_cluster_key: String,
    #[arg(long, default_value = "")]
    tls_cluster_ca: String,
    /// Send an empty Raft batch for this replica set instead of running `hello`.
    #[arg(long)]
    raft_set: Option<String>,
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// True when the member took the call.
pub async fn run(args: ProbeArgs) -> anyhow::Result<bool> {
    let tls = [
        &*args.tls_cluster_cert,
        &args.tls_cluster_key,
        &args.tls_cluster_ca,
    ];
    let auth = ClusterAuth::load("", &args.cluster_key_file, tls).map_err(anyhow::Error::msg)?;
    let outcome = match &args.raft_set {
        Some(set) => raft(&args.addr, &auth, set).await,
        None => hello(&args.addr, &auth).await,
    };
    match outcome {
        Ok(what) => {
            println!("{}: took the call ({what})", args.addr);
            Ok(true)
        }
        Err(why) => {
            println!("{}: refused the call ({why})", args.addr);
            Ok(false)
        }
    }
}

async fn hello(addr: &str, auth: &ClusterAuth) -> Result<String, String> {
    let handle = router::shard_client::ShardHandle::connect_with(addr, "", auth.tls.clone())
        .and_then(|h| {
            h.with_cluster_key(auth.sent_key())
                .map_err(router::RouterError::Config)
        })
        .map_err(|e| e.to_string())?;
    let fwd = router::shard_client::Forward {
        max_time_ms: TIMEOUT.as_millis() as u64,
        ..Default::default()
    };
    let cmd = doc! {"hello": 1};
    let call = handle.run("admin", &cmd, &fwd, "bulwark-probe");
    match tokio::time::timeout(TIMEOUT, call).await {
        Ok(Ok((reply, _, _))) if reply.get_f64("ok") == Ok(1.0) => Ok("hello: ok".into()),
        Ok(Ok((reply, _, _))) => Err(format!("hello answered {reply}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".into()),
    }
}

async fn raft(addr: &str, auth: &ClusterAuth, set: &str) -> Result<String, String> {
    use proto::raft::raft_client::RaftClient;
    use proto::raft::RaftBatch;
    let channel = auth
        .endpoint(addr)?
        .connect_timeout(TIMEOUT)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let batch = RaftBatch {
        set_name: set.to_string(),
        messages: Vec::new(),
    };
    let mut request = tonic::Request::new(tokio_stream::iter(vec![batch]));
    if let Some(key) = auth.header() {
        request
            .metadata_mut()
            .insert(proto::cluster_key::HEADER, key);
    }
    let mut client = RaftClient::new(channel);
    match tokio::time::timeout(TIMEOUT, client.stream(request)).await {
        Ok(Ok(_)) => Ok("an empty Raft batch was taken".into()),
        Ok(Err(status)) => Err(status.message().to_string()),
        Err(_) => Err("no answer".into()),
    }
}
