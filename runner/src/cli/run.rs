//! `hourglass run`: the runner, until SIGINT or SIGTERM.

use std::path::Path;

use anyhow::Context;

use super::{Exit, load_config};
use crate::Runner;

/// Serve `config` until a signal; heavy attempts and the API on `pool`.
pub(super) async fn run(config: &Path, pool: Option<tokio::runtime::Handle>) -> Result<(), Exit> {
    let pool = pool.unwrap_or_else(tokio::runtime::Handle::current);
    let config = load_config(config)?;
    let config_http = config.http.as_ref().map(|h| h.listen);
    let mut shutdown = Box::pin(shutdown_signal());
    // starting may wait for Redis: a signal meanwhile stops it cleanly
    let runner = tokio::select! {
        runner = Runner::start_with_pool(config, Some(pool.clone())) => runner?,
        () = &mut shutdown => {
            tracing::info!("stopped before serving");
            return Ok(());
        }
    };
    let telemetry = runner.telemetry();
    // the API and dashboard: bound before jobs run, so a taken port fails at
    // once; served by the pool, away from the thread that claims
    let server = match &config_http {
        Some(addr) => {
            let listener = crate::http::bind(*addr).await.map_err(Exit::input)?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let mut ops = runner.ops();
            // a Redis connection of the API's own, driven on the pool: through
            // the runner's, each call of a request crossed to the runner's
            // thread and back (most of what a GET of a topic cost the runner).
            // Redis unreachable just now: the runner's, which reconnects too
            let queue = ops.queue.clone();
            let own = pool.spawn(async move { queue.reconnect().await }).await;
            match own
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                Ok(own) => ops.queue = own,
                Err(e) => tracing::warn!("the API shares the runner's Redis connection: {e}"),
            }
            let task = pool.spawn(crate::http::serve(listener, ops, async {
                let _ = stopped.await;
            }));
            Some((stop, task))
        }
        None => None,
    };
    // the runner's loop on a worker thread like every task it spawns (run
    // here, on the thread that blocks on the runtime, each finished attempt
    // would wake it across threads)
    tokio::spawn(runner.run(shutdown))
        .await
        .context("the runner stopped unexpectedly")?
        .context("running")?;
    if let Some((stop, task)) = server {
        let _ = stop.send(());
        let _ = task.await;
    }
    // what the API's last enqueues exported (the runner's own went with it)
    telemetry.flush(crate::telemetry::FLUSH_WITHIN).await;
    Ok(())
}

/// `hourglass serve`: the API, dashboard and metrics without claiming jobs.
pub(super) async fn serve(config: &Path) -> Result<(), Exit> {
    let config = super::load_producer_config(config)?;
    let Some(http) = config.http.clone() else {
        return Err(Exit::input(anyhow::anyhow!(
            "{} has no [http] section; add one, e.g.\n\n[http]\nlisten = \"127.0.0.1:9090\"",
            config.path.display()
        )));
    };
    let listener = crate::http::bind(http.listen).await.map_err(Exit::input)?;
    let (queue, _embedded) = crate::redis::connect(&config).await?;
    let ops = crate::http::Ops::without_jobs(queue, config)?;
    let telemetry = ops.telemetry.clone();
    tracing::info!("serving the API and dashboard only (no jobs are claimed here)");
    crate::http::serve(listener, ops, shutdown_signal()).await?;
    // the last enqueues' spans, still queued, go before the process does
    telemetry.flush(crate::telemetry::FLUSH_WITHIN).await;
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
