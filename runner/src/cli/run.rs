//! `hourglass run`: the runner, until SIGINT or SIGTERM.

use std::path::Path;

use anyhow::Context;

use super::{Failure, load_config};
use crate::Runner;

pub(super) async fn run(config: &Path) -> Result<(), Failure> {
    let config = load_config(config)?;
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    // starting may wait for Redis: a signal meanwhile stops it cleanly
    let runner = tokio::select! {
        runner = Runner::start(config) => runner?,
        () = &mut shutdown => {
            tracing::info!("stopped before serving");
            return Ok(());
        }
    };
    runner.run(shutdown).await.context("running")?;
    Ok(())
}

/// Completes on the first SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
}
