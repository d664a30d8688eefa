//! Turning file-system events (debounced) and a periodic rescan into
//! [`Reload`]s for the scheduler.

use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Loader, Reload, Snapshot};
use crate::config::Config;

/// How long file events must be quiet before a rescan (a copy in progress
/// produces a stream of them).
const QUIET: Duration = Duration::from_millis(100);
/// A rescan happens at least this often, even without events.
const RESCAN: Duration = Duration::from_secs(5);

/// Watch the handlers folder and the configuration's folder; send a
/// [`Reload`] whenever a rescan finds something. Ends when `tx` is closed.
pub async fn watch(mut loader: Loader, mut current: Snapshot, tx: mpsc::Sender<Reload>) {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let watcher = start_watcher(&current.config, events_tx);
    if let Err(e) = &watcher {
        tracing::warn!(
            "cannot watch for changes ({e}); rescanning every {}s instead",
            RESCAN.as_secs()
        );
    }
    loop {
        tokio::select! {
            () = tx.closed() => return,
            event = events.recv() => {
                if event.is_none() {
                    // the watcher is gone: fall back to the periodic rescan
                    tokio::time::sleep(RESCAN).await;
                }
                // a copy in progress produces a stream of events: wait for quiet
                let settle = tokio::time::Instant::now() + Duration::from_secs(1);
                while let Ok(Some(_)) = tokio::time::timeout_at(
                    settle.min(tokio::time::Instant::now() + QUIET),
                    events.recv(),
                )
                .await
                {}
            }
            () = tokio::time::sleep(RESCAN) => {}
        }
        if let Some(reload) = loader.rescan(&current).await {
            if let Some(next) = &reload.snapshot {
                current = next.clone();
            }
            if tx.send(reload).await.is_err() {
                return;
            }
        }
    }
}

type Events = mpsc::UnboundedSender<()>;

fn start_watcher(config: &Config, tx: Events) -> notify::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // opening and closing without writing changes nothing
        if !matches!(&event, Ok(e) if matches!(e.kind, EventKind::Access(_))) {
            let _ = tx.send(());
        }
    })?;
    watcher.watch(&config.runner.handlers_dir, RecursiveMode::NonRecursive)?;
    // the folder, not the file: editors replace a file by renaming over it
    let folder = config
        .path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    watcher.watch(folder, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
