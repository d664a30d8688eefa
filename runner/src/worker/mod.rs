//! The runner: loads every handler, connects, then claims due jobs in
//! priority order and runs each in a fresh instance until shut down.
//!
//! A job's walk, one step per file: the scheduler claims it
//! (`scheduler.rs`) and gives it an `InFlight` guard holding its
//! capacity; `attempt.rs` runs it; `decide.rs` turns how it ended into a
//! decision; whatever watches attempts (metrics, accounts, events, spans,
//! the log) is told at one seam (`watch/`); `commit.rs` writes the decision
//! to Redis and reports it (event and log line). A guard dropped without a decision (shutdown) releases its
//! job through the same committer.
//!
//! Tasks: the scheduler (claims, spawns attempts, requeues expired leases,
//! sweeps undelivered follow-ups, applies reloads), one task per attempt, the
//! committer, the wake listener (pub/sub), the reload watcher, the schedules
//! (`cron.rs`), the rollouts (`rollout.rs`: which handler version serves)
//! the progress writer (`progress.rs`) and the lease keeper (`leases.rs`:
//! attempts still running or committing keep their jobs).
//! [`Runner`] (`runner.rs`) starts them; this file holds only what they
//! share. Shutdown is a future passed to [`Runner::run`]: claiming stops,
//! running attempts get the grace period, the rest are stopped and released.

mod attempt;
mod batch;
mod capacity;
mod commit;
mod cron;
mod decide;
mod heartbeat;
mod housekeeping;
mod journal;
mod leases;
mod minutes;
mod progress;
pub(crate) mod rollout;
mod runner;
mod scheduler;
mod verdict;
mod watch;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::config::TopicConfig;
use crate::events::{EventKind, EventSender};
use crate::metrics::Metrics;
use crate::redis::{Queue, TopicKeys};
use crate::reload::{Notice, ReloadRecord, Serving, Snapshot, Versions};
use crate::wasm::{LoadedHandler, Runtime, Sandbox};
use capacity::Capacity;
pub use runner::Runner;

/// Reload notices kept for the API and dashboard.
const RECENT_RELOADS: usize = 50;

/// Instance slots beyond the configured concurrency, so a burst never finds the pool empty.
const SPARE_SLOTS: u32 = 8;

/// A topic as the worker serves it: one version of its settings and handler.
/// A reload makes a new one; attempts keep the one they started with.
pub(crate) struct Topic {
    pub cfg: TopicConfig,
    pub keys: TopicKeys,
    /// `None` while its handler file is missing: the topic claims nothing.
    pub handler: Option<LoadedHandler>,
    pub sandbox: Sandbox,
    /// Shared by every version of the topic.
    pub capacity: Arc<Capacity>,
}

/// What every task of the worker shares.
pub(crate) struct Shared {
    pub queue: Queue,
    pub runtime: Arc<Runtime>,
    pub events: EventSender,
    /// What live reloads did, published once the scheduler serves the result.
    pub notices: broadcast::Sender<Notice>,
    /// Per-topic counts and lateness, for the heartbeat and Prometheus.
    pub meter: watch::meter::Meter,
    /// Every Prometheus metric.
    pub metrics: Arc<Metrics>,
    /// What is served now, for the HTTP API.
    pub serving: tokio::sync::watch::Sender<Arc<Serving>>,
    /// The most recent reload notices, oldest first.
    pub reloads: Mutex<VecDeque<ReloadRecord>>,
    /// What the scheduler serves now, handlers and all, for the rollout task.
    pub served: tokio::sync::watch::Sender<Snapshot>,
    /// Every topic's kept handler versions.
    pub versions: Arc<Versions>,
    /// How many versions each topic keeps (`[runner] keep_versions`).
    pub keep_versions: u32,
    /// This runner's id, as its heartbeat and rollout verdicts name it.
    pub runner_id: String,
    /// Usage of tagged jobs not yet added to Redis.
    pub accounts: watch::accounts::Accounts,
    /// CPU of tenant keys not yet added to Redis.
    pub tenants: watch::tenants::Tenants,
    /// Where spans go (or not).
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// Versions the rollout task was told to serve and this runner lacks
    /// (for the heartbeat; `hourglass_version_missing` counts them too).
    pub missing: Mutex<Vec<crate::redis::MissingVersion>>,
    /// Moves journaled jobs to another version after a replay check.
    pub upgrader: crate::upgrade::Upgrader,
    /// The jobs claimed and not committed yet, whose leases are kept.
    leases: leases::Leases,
}

impl Shared {
    /// Report `notice` (a reload the scheduler now serves) to subscribers,
    /// the recent list and the counter.
    fn reloaded(&self, notice: Notice, now_ms: u64) {
        let result = match &notice {
            Notice::Loaded { .. } => "handler_loaded",
            Notice::Rejected { .. } => "handler_rejected",
            Notice::Missing { .. } => "handler_missing",
            Notice::ConfigApplied => "config_applied",
            Notice::ConfigRejected { .. } => "config_rejected",
        };
        self.metrics
            .reloads
            .get_or_create(&crate::metrics::ResultLabel { result })
            .inc();
        let mut recent = self.reloads.lock().expect("reloads lock");
        if recent.len() == RECENT_RELOADS {
            recent.pop_front();
        }
        recent.push_back(ReloadRecord {
            at_ms: now_ms,
            notice: notice.clone(),
        });
        drop(recent);
        let _ = self.notices.send(notice);
    }

    /// The most recent reloads, newest first.
    pub(crate) fn recent_reloads(&self) -> Vec<ReloadRecord> {
        let recent = self.reloads.lock().expect("reloads lock");
        recent.iter().rev().cloned().collect()
    }

    /// Send `kind` about attempt `attempt` of job `id` of `topic` on the
    /// event stream, if anyone listens.
    fn emit(&self, topic: &str, id: &str, attempt: u32, kind: EventKind) {
        watch::send_event(&self.events, topic, id, attempt, || kind);
    }

    /// Whatever watches attempts (`watch/`).
    fn watchers(&self) -> watch::Watchers<'_> {
        watch::Watchers {
            meter: &self.meter,
            accounts: &self.accounts,
            tenants: &self.tenants,
            events: &self.events,
            telemetry: &self.telemetry,
        }
    }
}
