//! The runner: loads every handler, connects, then claims due jobs in
//! priority order and runs each in a fresh instance until shut down.
//!
//! A job's walk, one step per file: the scheduler claims it
//! (`scheduler.rs`) and gives it an `Attempt` guard holding its
//! capacity; `attempt.rs` runs it; `decide.rs` turns how it ended into a
//! decision; `commit.rs` writes the decision to Redis and reports it (event
//! and log line). A guard dropped without a decision (shutdown) releases its
//! job through the same committer.
//!
//! Tasks: the scheduler (claims, spawns attempts, requeues expired leases,
//! sweeps undelivered follow-ups, applies reloads), one task per attempt, the
//! committer, the wake listener (pub/sub) and the reload watcher. Shutdown is
//! a future passed to [`Runner::run`]: claiming stops, running attempts get
//! the grace period, the rest are stopped and released.

mod attempt;
mod capacity;
mod commit;
mod cron;
mod decide;
mod heartbeat;
mod housekeeping;
mod meter;
pub(crate) mod rollout;
mod scheduler;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::sync::{broadcast, mpsc, watch};

use crate::config::{Config, TopicConfig};
use crate::events::{Event, EventKind, EventSender};
use crate::metrics::Metrics;
use crate::redis::embedded::EmbeddedRedis;
use crate::redis::{Queue, TopicKeys};
use crate::reload::{Loader, Notice, Snapshot, Versions};
use crate::wasm::{LoadedHandler, Runtime, Sandbox};
use capacity::Capacity;

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
    pub meter: meter::Meter,
    /// Every Prometheus metric.
    pub metrics: Arc<Metrics>,
    /// What is served now, for the HTTP API.
    pub serving: watch::Sender<Arc<Serving>>,
    /// The most recent reload notices, oldest first.
    pub reloads: Mutex<VecDeque<ReloadRecord>>,
    /// What the scheduler serves now, handlers and all, for the rollout task.
    pub served: watch::Sender<Snapshot>,
    /// Every topic's kept handler versions.
    pub versions: Arc<Versions>,
    /// How many versions each topic keeps (`[runner] keep_versions`).
    pub keep_versions: u32,
    /// This runner's id, as its heartbeat and rollout verdicts name it.
    pub runner_id: String,
}

/// Reload notices kept for the API and dashboard.
const RECENT_RELOADS: usize = 50;

/// What a runner serves now: its configuration and each topic's handler
/// version. Replaced (not changed) by every reload.
#[derive(Debug, Clone)]
pub struct Serving {
    /// The configuration in force.
    pub config: Arc<Config>,
    /// Topic → the content hash of its handler; a topic without one claims nothing.
    pub handlers: BTreeMap<String, String>,
    /// Whether this process claims and runs jobs (`false` for `hourglass serve`).
    pub runs_jobs: bool,
}

impl Serving {
    /// A configuration served without running jobs (`hourglass serve`).
    pub fn without_jobs(config: Config) -> Serving {
        Serving {
            config: Arc::new(config),
            handlers: BTreeMap::new(),
            runs_jobs: false,
        }
    }
}

/// One reload notice and when it was sent.
#[derive(Debug, Clone)]
pub struct ReloadRecord {
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// What happened.
    pub notice: Notice,
}

/// What `snapshot` serves.
fn serving(snapshot: &Snapshot) -> Serving {
    Serving {
        config: snapshot.config.clone(),
        handlers: snapshot
            .handlers
            .iter()
            .map(|(topic, h)| (topic.clone(), h.hash().to_owned()))
            .collect(),
        runs_jobs: true,
    }
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

    fn emit(&self, topic: &str, id: &str, attempt: u32, kind: EventKind) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(Event {
                topic: topic.to_owned(),
                id: id.to_owned(),
                attempt,
                kind,
            });
        }
    }
}

/// A runner with its handlers loaded and Redis connected, ready to [`Runner::run`].
pub struct Runner {
    shared: Arc<Shared>,
    snapshot: Snapshot,
    loader: Loader,
    _embedded: Option<EmbeddedRedis>,
}

impl Runner {
    /// Compile every handler (failing on the first that cannot serve), then
    /// connect, waiting for Redis while it is unreachable.
    pub async fn start(config: Config) -> anyhow::Result<Runner> {
        let slots = config.runner.concurrency + SPARE_SLOTS;
        let runtime = Arc::new(
            Runtime::new(slots, config.runner.compile_cache.as_deref())
                .context("creating the WebAssembly engine")?,
        );
        let versions = Arc::new(Versions::open(
            &config.runner.versions_dir,
            config.runner.keep_versions,
            runtime.clone(),
        ));
        let mut loader = Loader::new(runtime.clone(), versions.clone());
        let snapshot = loader.initial(config).await?;
        let (queue, embedded) = crate::redis::connect_patiently(&snapshot.config).await?;
        let metrics = Arc::new(Metrics::new());
        metrics.instance_slots.set(i64::from(slots));
        let shared = Arc::new(Shared {
            queue,
            runtime,
            events: broadcast::channel(1 << 16).0,
            notices: broadcast::channel(256).0,
            meter: meter::Meter::new(metrics.clone()),
            metrics,
            serving: watch::channel(Arc::new(serving(&snapshot))).0,
            reloads: Mutex::default(),
            served: watch::channel(snapshot.clone()).0,
            versions,
            keep_versions: snapshot.config.runner.keep_versions,
            runner_id: heartbeat::runner_id(),
        });
        Ok(Runner {
            shared,
            snapshot,
            loader,
            _embedded: embedded,
        })
    }

    /// Events about jobs from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// What live reloads do from now on: handlers loaded, rejected or missing,
    /// configurations applied or rejected. Each notice is sent once the
    /// runner serves what it reports.
    pub fn subscribe_reloads(&self) -> broadcast::Receiver<Notice> {
        self.shared.notices.subscribe()
    }

    /// Outbound HTTP requests of the handlers, per (topic, status), from the
    /// start and as they happen.
    pub fn outbound_counts(&self) -> Arc<crate::wasm::OutboundCounts> {
        self.shared.runtime.outbound_counts()
    }

    /// How many handler instances are alive, now and whenever asked.
    pub fn instances_in_use(&self) -> crate::wasm::InUse {
        self.shared.runtime.in_use().clone()
    }

    /// What the HTTP API and dashboard need of this runner.
    pub fn ops(&self) -> crate::http::Ops {
        crate::http::Ops {
            queue: self.shared.queue.clone(),
            serving: self.shared.serving.subscribe(),
            metrics: self.shared.metrics.clone(),
            outbound: Some(self.outbound_counts()),
            reloads: Some({
                let shared = self.shared.clone();
                Arc::new(move || shared.recent_reloads())
            }),
        }
    }

    /// The connection the runner uses (handy for producing from the same process).
    pub fn queue(&self) -> &Queue {
        &self.shared.queue
    }

    /// Serve until `shutdown` completes, then shut down gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Runner {
            shared,
            snapshot,
            loader,
            _embedded,
        } = self;
        // unbounded, yet bounded: each running attempt sends one completion
        let (commits, commit_rx) = mpsc::unbounded_channel();
        let committer = tokio::spawn(commit::run(shared.clone(), commit_rx));
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let listener = tokio::spawn(crate::redis::listen_for_wakes(
            shared.queue.clone(),
            wake_tx,
        ));
        let schedules = tokio::spawn(cron::run(shared.clone()));
        // routes (rollouts, pins) are known before the first claim
        let (routes_tx, routes_rx) = watch::channel(Arc::default());
        let rollouts = rollout::start(shared.clone(), shared.versions.clone(), routes_tx).await;
        let (reload_tx, reload_rx) = mpsc::channel(4);
        let watcher = tokio::spawn(crate::reload::watch(loader, snapshot.clone(), reload_tx));
        tracing::info!(
            topics = snapshot.config.topics.len(),
            concurrency = snapshot.config.runner.concurrency,
            "hourglass running; Ctrl-C or SIGTERM stops it gracefully"
        );
        // returns once every attempt has finished or been stopped, dropping every commit sender
        scheduler::Scheduler::new(shared.clone(), snapshot, routes_rx, commits)
            .run(wake_rx, reload_rx, shutdown)
            .await;
        listener.abort();
        watcher.abort();
        schedules.abort();
        rollouts.abort();
        let released = committer.await.unwrap_or(0);
        tracing::info!(released, "hourglass stopped");
        Ok(())
    }
}
