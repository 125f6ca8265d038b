//! `bulwark local`: a router and a shard node in one process, for development.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct LocalArgs {
    /// Port the router listens on (127.0.0.1).
    #[arg(long, default_value_t = 27017)]
    port: u16,
    /// Data directory; restarting on the same directory keeps all data.
    #[arg(long, default_value = "./bulwark-data")]
    dir: PathBuf,
    /// Storage engine: wiredtiger, or memory (nothing survives a restart).
    #[arg(long, default_value = "wiredtiger")]
    engine: String,
    /// Seconds between TTL monitor passes.
    #[arg(long, default_value_t = 60)]
    ttl_interval_secs: u64,
    #[command(flatten)]
    security: crate::local_security::SecurityArgs,
}

pub async fn run(args: LocalArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let shard_config = shard::ShardConfig {
        listen: "127.0.0.1:0".into(),
        dir: args.dir.join("shard0"),
        engine: args.engine.clone(),
        ttl_interval_secs: args.ttl_interval_secs,
        ..Default::default()
    };
    shard_config.validate().map_err(anyhow::Error::msg)?;
    let kind = shard_config.engine_kind().map_err(anyhow::Error::msg)?;
    let timeout = shard_config.cursor_timeout();
    let node = tokio::task::spawn_blocking(move || shard::Node::open(&kind, timeout))
        .await?
        .with_context(|| format!("opening the shard in {}", args.dir.display()))?;
    let shard_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let shard_addr = shard_listener.local_addr()?;
    let mut router_config = router::RouterConfig {
        listen: format!("127.0.0.1:{}", args.port),
        shard: shard_addr.to_string(),
        ..Default::default()
    };
    let cluster_key = args.security.apply(&mut router_config);
    router_config.validate().map_err(anyhow::Error::msg)?;
    let router_listener = router::listener::bind(&router_config.listen)
        .await
        .with_context(|| format!("binding the router to {}", router_config.listen))?;
    // When either role stops (failure or Ctrl-C), the other stops too.
    let (sd1, sd2) = (shutdown.clone(), shutdown.clone());
    let ttl = Duration::from_secs(args.ttl_interval_secs);
    let shard_task = tokio::spawn(async move {
        let r =
            shard::serve_with_key(node, shard_listener, ttl, Some(cluster_key), sd1.clone()).await;
        sd1.cancel();
        r
    });
    let router_task = tokio::spawn(async move {
        let r = router::serve(router_listener, router_config, sd2.clone()).await;
        sd2.cancel();
        r
    });
    println!(
        "Bulwark is running. Connect with: mongodb://127.0.0.1:{}/",
        args.port
    );
    println!(
        "Data directory: {}. Press Ctrl-C to stop.",
        args.dir.display()
    );
    let (r, s) = tokio::join!(router_task, shard_task);
    r?.context("router")?;
    s?.context("shard")?;
    println!("Bulwark stopped.");
    Ok(())
}
