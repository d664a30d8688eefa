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
/// The same after a file was renamed into place (complete at once: only
/// the events of the same deploy are gathered).
const QUIET_RENAMED: Duration = Duration::from_millis(10);
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
                let Some(mut complete) = event else {
                    // the watcher is gone: fall back to the periodic rescan
                    tokio::time::sleep(RESCAN).await;
                    continue;
                };
                // a copy in progress produces a stream of events: wait for quiet
                let settle = tokio::time::Instant::now() + Duration::from_secs(1);
                loop {
                    let quiet = if complete { QUIET_RENAMED } else { QUIET };
                    let until = settle.min(tokio::time::Instant::now() + quiet);
                    match tokio::time::timeout_at(until, events.recv()).await {
                        Ok(Some(renamed)) => complete &= renamed,
                        _ => break,
                    }
                }
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

/// A change that may matter; `true` when it is a file renamed into place
/// (whole at once), `false` for anything that may still be going on.
type Events = mpsc::UnboundedSender<bool>;

fn start_watcher(config: &Config, tx: Events) -> notify::Result<notify::RecommendedWatcher> {
    use notify::event::{ModifyKind, RenameMode};
    use notify::{EventKind, RecursiveMode, Watcher};
    let config_name = config.path.file_name().map(|n| n.to_owned());
    let matters = move |path: &Path| {
        path.extension().is_some_and(|x| x == "wasm")
            || config_name
                .as_deref()
                .is_some_and(|n| path.file_name() == Some(n))
    };
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else {
            // the watcher lost track (its queue overflowed): rescan to be sure
            let _ = tx.send(false);
            return;
        };
        // opening and closing without writing changes nothing; nor do other
        // files (a deploy's temporary file, an editor's swap file)
        if matches!(event.kind, EventKind::Access(_))
            || (!event.paths.is_empty() && !event.paths.iter().any(|p| matters(p)))
        {
            return;
        }
        let renamed = matches!(
            event.kind,
            EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
        );
        let _ = tx.send(renamed);
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
