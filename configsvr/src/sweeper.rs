//! Background passes the config server primary runs over the cluster to finish work left
//! half done (`move_recovery.rs`, `migration_recovery.rs`). Each pass is written so that
//! running it again, or after a former primary's pass, ends in the same state.

use std::future::Future;
use std::time::Duration;

use tracing::{debug, info};
use wire::MongoResult;

use crate::context::Ctx;
use crate::term::Term;

/// How often a paused pass looks whether it may run.
const PAUSED: Duration = Duration::from_millis(20);

/// One kind of pass.
pub trait Sweep: Send + 'static {
    /// The pause between passes.
    const EVERY: Duration;
    /// What a pass that did something did, for the log.
    const DONE: &'static str;
    /// One pass; how many things it finished.
    fn sweep(ctx: &Ctx) -> impl Future<Output = MongoResult<usize>> + Send;
}

/// Runs `S`'s pass at once and then every `S::EVERY` (while the coordinator is not
/// paused), until `stop`.
pub fn spawn<S: Sweep>(term: &Term) {
    let (ctx, settings, stop) = (term.ctx.clone(), term.settings.clone(), term.stop.clone());
    term.tasks.spawn(async move {
        loop {
            while settings.paused() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(PAUSED) => {}
                }
            }
            let pass = async {
                match S::sweep(&ctx).await {
                    Ok(0) => {}
                    Ok(n) => info!(n, "{}", S::DONE),
                    Err(e) => debug!(error = %e, "{}: pass failed", S::DONE),
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = pass => {}
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(S::EVERY) => {}
            }
        }
    });
}
