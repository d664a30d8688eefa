//! The seam around an attempt: everything that watches attempts (metrics and
//! rollout tallies, account usage, the event stream, the attempt's span, the
//! log) is told here, with the attempt's facts, as it starts and as it ends.
//! `attempt::run` calls [`Watchers::started`] and [`Watchers::ended`] once
//! each and names no watcher; a new watcher implements [`Watcher`] in a file
//! of its own and joins the list in [`Watchers::all`].
//!
//! Watchers are told before the committer writes the decision: they see
//! what the attempt did and asked for, not what Redis accepted (the
//! committer counts that, `commit.rs`).

pub(crate) mod accounts;
mod events;
mod log;
pub(crate) mod meter;
mod spans;
pub(crate) mod tenants;

use std::sync::Arc;

pub(crate) use events::send as send_event;

use super::decide::Decision;
use crate::events::EventSender;
use crate::redis::Usage;
use crate::telemetry::{AttemptTrace, Telemetry};
use crate::wasm::Finish;

/// What is known of an attempt from its start: the same for every watcher.
pub(crate) struct Attempt<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The job's id.
    pub id: &'a str,
    /// The attempt's number (1-based).
    pub number: u32,
    /// The handler version running it.
    pub version: &'a Arc<str>,
    /// The account the job is tagged with, if any.
    pub account: Option<&'a str>,
    /// Its tenant key, when its topic claims fairly ('' for none).
    pub key: Option<&'a str>,
    /// When it was due (ms).
    pub due_at_ms: u64,
    /// When its handler was called (ms).
    pub started_at_ms: u64,
    /// Its span, when spans are exported.
    pub span: Option<&'a AttemptTrace>,
    /// It runs on the pool (not on the runner's own thread).
    pub pooled: bool,
}

impl Attempt<'_> {
    /// How long after its due time it started (ms).
    pub fn late_ms(&self) -> u64 {
        self.started_at_ms.saturating_sub(self.due_at_ms)
    }
}

/// How an attempt ended.
pub(crate) struct Ending<'a> {
    /// What the handler answered (or why it has no answer).
    pub finish: &'a Finish,
    /// What it used.
    pub usage: &'a Usage,
    /// What its end asks of the job.
    pub decision: &'a Decision,
    /// When that was decided (ms).
    pub at_ms: u64,
}

/// Something that watches attempts. Each call is on the attempt's own path,
/// so it must be cheap and never wait: queue, count, or send.
pub(crate) trait Watcher {
    /// `attempt`'s handler is about to be called.
    fn started(&self, _attempt: &Attempt<'_>) {}
    /// `attempt` ended as `ending`.
    fn ended(&self, _attempt: &Attempt<'_>, _ending: &Ending<'_>) {}
}

/// The watchers of a runner's attempts.
pub(crate) struct Watchers<'a> {
    /// Per-topic and per-version counts (metrics, heartbeat, rollouts).
    pub meter: &'a meter::Meter,
    /// Usage of tagged jobs, on its way to Redis.
    pub accounts: &'a accounts::Accounts,
    /// CPU of tenant keys, on its way to Redis.
    pub tenants: &'a tenants::Tenants,
    /// The event stream of [`crate::Runner::subscribe`].
    pub events: &'a EventSender,
    /// Where spans go.
    pub telemetry: &'a Telemetry,
}

impl Watchers<'_> {
    /// Every watcher, in the order they are told.
    fn all(&self) -> [&dyn Watcher; 6] {
        [
            self.meter,
            &log::Log,
            self.events,
            self.accounts,
            self.tenants,
            self.telemetry,
        ]
    }

    /// Tell every watcher that `attempt` starts.
    pub fn started(&self, attempt: &Attempt<'_>) {
        for w in self.all() {
            w.started(attempt);
        }
    }

    /// Tell every watcher that `attempt` ended as `ending`.
    pub fn ended(&self, attempt: &Attempt<'_>, ending: &Ending<'_>) {
        for w in self.all() {
            w.ended(attempt, ending);
        }
    }
}
