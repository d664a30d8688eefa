//! Progress of running attempts, between the `report` import (`host.rs`)
//! and the worker that writes it.
//!
//! Progress goes on a [`ProgressBoard`] shared by the whole runner: the
//! latest report per job replaces the one before, and the worker writes what
//! is on the board to Redis a few times a second. A handler that reports ten
//! thousand times a second costs a map insert per call and Redis one write
//! per job per flush.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::Notify;

/// Largest progress detail a handler may report, in bytes.
pub const MAX_DETAIL: usize = 4 << 10;

/// One job's latest progress report, not yet written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// The attempt that reported it (only that attempt's lease may write it).
    pub attempt: u32,
    /// 0–100.
    pub percent: Option<u8>,
    /// A JSON object.
    pub detail: Option<String>,
    /// When it was reported (ms since the Unix epoch).
    pub at_ms: u64,
}

/// The latest progress of every running job that reported since the last
/// flush, keyed by (topic, id).
#[derive(Debug, Default)]
pub struct ProgressBoard {
    latest: Mutex<HashMap<(String, String), Reported>>,
    posted: Notify,
}

impl ProgressBoard {
    pub(super) fn post(&self, topic: &str, id: &str, report: Reported) {
        let mut latest = self.latest.lock().expect("progress board");
        let first = latest.is_empty();
        // the latest report replaces the one before
        latest.insert((topic.to_owned(), id.to_owned()), report);
        drop(latest);
        if first {
            self.posted.notify_one();
        }
    }

    /// Everything on the board, leaving it empty.
    pub fn take(&self) -> HashMap<(String, String), Reported> {
        std::mem::take(&mut *self.latest.lock().expect("progress board"))
    }

    /// Wait until something is posted on an empty board (at once if the
    /// board already holds something).
    pub async fn posted(&self) {
        if !self.latest.lock().expect("progress board").is_empty() {
            return;
        }
        self.posted.notified().await
    }

    /// Drop what `attempt` of a job posted and nobody wrote yet: the attempt
    /// ended, and its end says more than its progress.
    pub(super) fn forget(&self, topic: &str, id: &str, attempt: u32) {
        let mut latest = self.latest.lock().expect("progress board");
        let key = (topic.to_owned(), id.to_owned());
        if latest.get(&key).is_some_and(|r| r.attempt == attempt) {
            latest.remove(&key);
        }
    }
}

/// A progress detail as the host accepts it: a JSON object of at most
/// [`MAX_DETAIL`] bytes.
pub fn check_detail(detail: &str) -> Result<(), String> {
    if detail.len() > MAX_DETAIL {
        return Err(format!(
            "progress detail of {} bytes is over the limit of {MAX_DETAIL} bytes",
            detail.len()
        ));
    }
    match serde_json::from_str::<serde_json::Value>(detail) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(_) => Err("progress detail must be a JSON object".into()),
        Err(e) => Err(format!("progress detail is not JSON: {e}")),
    }
}
