//! Mutual TLS between nodes (issue 39): a replica set whose members replicate over TLS
//! and whose routers reach them over TLS serves a driver, and a stranger — no
//! certificate, or one from another CA — can neither run a command on a member nor send
//! it a Raft message.

use std::path::Path;
use std::time::Duration;

use bson::{doc, Document};
use proto::cluster_tls::{ClusterTls, MEMBER_NAME};
use tests::replica_set::{ClusterTlsFiles, TestReplicaSet};

/// A CA and one certificate it signed for `MEMBER_NAME`, as PEM files in `dir`.
fn member_pki(dir: &Path, label: &str) -> ClusterTlsFiles {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{label} CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![MEMBER_NAME.to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, MEMBER_NAME);
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let write = |name: &str, text: String| {
        let p = dir.join(format!("{label}-{name}"));
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    ClusterTlsFiles {
        cert: write("member.pem", cert.pem()),
        key: write("member.key", key.serialize_pem()),
        ca: write("ca.pem", ca.pem()),
    }
}

fn load(files: &ClusterTlsFiles) -> std::sync::Arc<ClusterTls> {
    ClusterTls::load(&files.cert, &files.key, &files.ca)
        .unwrap()
        .unwrap()
}

/// Runs `hello` on the member at `addr` as a caller with `tls` (or none).
async fn command_as(
    addr: &str,
    tls: Option<std::sync::Arc<ClusterTls>>,
) -> Result<Document, String> {
    let handle = router::shard_client::ShardHandle::connect_with(addr, "", tls)
        .map_err(|e| e.to_string())?;
    let fwd = router::shard_client::Forward {
        max_time_ms: 3_000,
        ..Default::default()
    };
    let hello = doc! {"hello": 1};
    let call = handle.run("admin", &hello, &fwd, "stranger");
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok((reply, _, _))) => Ok(reply),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".into()),
    }
}

/// Runs `hello` on the member at `addr` over TLS that trusts the cluster's CA (`ca`) but
/// presents no certificate.
async fn without_certificate(addr: &str, ca: &str) -> Result<(), String> {
    use proto::shard::shard_client::ShardClient;
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name(MEMBER_NAME);
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let request = proto::shard::CommandRequest {
        db: "admin".into(),
        command: bson::to_vec(&doc! {"hello": 1}).unwrap().into(),
        max_time_ms: 3_000,
        ..Default::default()
    };
    let mut client = ShardClient::new(channel);
    match tokio::time::timeout(Duration::from_secs(10), client.run_command(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".into()),
    }
}

/// Sends one Raft batch to the member at `addr` as a caller with `tls` (or none).
async fn raft_as(addr: &str, tls: Option<&ClusterTls>) -> Result<(), String> {
    use proto::raft::raft_client::RaftClient;
    use proto::raft::RaftBatch;
    let channel = proto::cluster_tls::endpoint(addr, tls)?
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let batch = RaftBatch {
        set_name: "rs0".into(),
        messages: Vec::new(),
    };
    let mut client = RaftClient::new(channel);
    let call = client.stream(tokio_stream::iter(vec![batch]));
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_replicate_over_mutual_tls_and_refuse_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = member_pki(dir.path(), "cluster");
    let stranger = member_pki(dir.path(), "stranger");
    let set = TestReplicaSet::start_with_cluster_tls(cluster.clone()).await;

    // Majority writes need the followers: the Raft streams run over TLS.
    let client = set.client(1, "").await;
    let coll = client.database("app").collection::<Document>("c");
    for i in 0..20 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 20);

    let member = set.configs[0].host.clone();
    // A member certificate of the cluster's CA is served.
    let ok = command_as(&member, Some(load(&cluster))).await.unwrap();
    assert_eq!(ok.get_f64("ok"), Ok(1.0), "{ok}");
    // Strangers trust the cluster's CA, so the member's certificate satisfies them: what
    // refuses them is the member checking theirs.
    let foreign_cert = ClusterTlsFiles {
        ca: cluster.ca.clone(),
        ..stranger.clone()
    };
    let foreign = command_as(&member, Some(load(&foreign_cert))).await;
    assert!(
        foreign.is_err(),
        "a stranger's certificate ran a command: {foreign:?}"
    );
    let no_cert = without_certificate(&member, &cluster.ca).await;
    assert!(
        no_cert.is_err(),
        "a caller without a certificate ran a command"
    );
    let plain = command_as(&member, None).await;
    assert!(
        plain.is_err(),
        "a plain-text caller ran a command: {plain:?}"
    );
    let foreign_raft = raft_as(&member, Some(&load(&foreign_cert))).await;
    assert!(foreign_raft.is_err(), "a stranger sent a Raft batch");
    let plain_raft = raft_as(&member, None).await;
    assert!(plain_raft.is_err(), "a plain-text Raft batch was taken");
    // The set's own certificate reaches the Raft service (an empty batch is taken).
    raft_as(&member, Some(&load(&cluster))).await.unwrap();
    set.stop().await;
}
