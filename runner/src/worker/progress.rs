//! Progress: running attempts post their reports on the runtime's board
//! (`wasm/report.rs`), the latest per job; this task writes the board to
//! Redis (`progress.lua`, one call per topic) at most every
//! [`PROGRESS_EVERY`], so a handler reporting in a tight loop costs Redis a
//! few writes a second per job. A report that cannot be written is dropped
//! (the next one says more).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::redis::{Progress, Report};

/// The shortest time between two writes of the board.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Write posted progress until aborted.
pub(super) async fn run(shared: Arc<Shared>) {
    let board = shared.runtime.progress();
    loop {
        board.posted().await;
        let mut by_topic: HashMap<String, Vec<Report>> = HashMap::new();
        for ((topic, id), r) in board.take() {
            by_topic.entry(topic).or_default().push(Report {
                id,
                progress: Progress {
                    attempt: r.attempt,
                    percent: r.percent,
                    detail: r.detail.and_then(|d| serde_json::from_str(&d).ok()),
                    at_ms: r.at_ms,
                },
            });
        }
        for (topic, reports) in by_topic {
            let keys = shared.queue.keys(&topic);
            if let Err(e) = shared.queue.pipeline().progress(&keys, &reports).await {
                tracing::debug!(topic, "progress of {} jobs dropped: {e}", reports.len());
            }
        }
        tokio::time::sleep(PROGRESS_EVERY).await;
    }
}
