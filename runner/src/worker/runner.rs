//! [`Runner`]: the front door. `start` loads every handler and connects;
//! `run` starts the worker's tasks (committer, wake listener, schedules,
//! reload watcher, rollouts) and the scheduler, and returns once shut down.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{broadcast, mpsc, watch};

use super::{SPARE_SLOTS, Shared, commit, cron, heartbeat, leases, progress, rollout, scheduler};
use crate::config::Config;
use crate::events::Event;
use crate::metrics::Metrics;
use crate::redis::Queue;
use crate::redis::embedded::EmbeddedRedis;
use crate::reload::{Loader, Notice, Snapshot, Versions};
use crate::telemetry::{FLUSH_WITHIN, Telemetry};
use crate::wasm::Runtime;

/// A runner with its handlers loaded and Redis connected, ready to [`Runner::run`].
pub struct Runner {
    shared: Arc<Shared>,
    snapshot: Snapshot,
    loader: Loader,
    _embedded: Option<EmbeddedRedis>,
    /// Where heavy attempts run: [`Runner::start_with_pool`].
    pool: Option<tokio::runtime::Handle>,
}

impl Runner {
    /// Compile every handler (failing on the first that cannot serve), then
    /// connect, waiting for Redis while it is unreachable.
    pub async fn start(config: Config) -> anyhow::Result<Runner> {
        Runner::start_with_pool(config, None).await
    }

    /// [`Runner::start`], with heavy attempts (a handler version whose
    /// recent attempts took over `[runner] light_cpu` of CPU each, and batch
    /// calls) and the span export on `pool`'s workers; light attempts, the
    /// claiming and the committing stay on the runtime `run` is called on.
    /// Without a pool, all run there. `hourglass run` gives the runner a
    /// runtime of one worker and a pool of `--threads`.
    pub async fn start_with_pool(
        config: Config,
        pool: Option<tokio::runtime::Handle>,
    ) -> anyhow::Result<Runner> {
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
        runtime.set_journal_store(Arc::new(super::journal::RedisJournal(queue.clone())));
        let metrics = Arc::new(Metrics::new());
        metrics.instance_slots.set(i64::from(slots));
        let telemetry = match &snapshot.config.telemetry {
            Some(cfg) => {
                let on = pool.clone().unwrap_or_else(tokio::runtime::Handle::current);
                Telemetry::start_on(cfg, metrics.spans_dropped.clone(), &on)?
            }
            None => Telemetry::off(),
        };
        let upgrader = crate::upgrade::Upgrader::new(
            queue.clone(),
            runtime.clone(),
            snapshot.config.runner.max_payload,
        );
        let shared = Arc::new(Shared {
            upgrader,
            queue,
            runtime,
            events: broadcast::channel(1 << 16).0,
            notices: broadcast::channel(256).0,
            meter: super::watch::meter::Meter::new(metrics.clone()),
            metrics,
            serving: watch::channel(Arc::new(snapshot.serving())).0,
            reloads: Mutex::new(VecDeque::new()),
            served: watch::channel(snapshot.clone()).0,
            versions,
            keep_versions: snapshot.config.runner.keep_versions,
            runner_id: heartbeat::runner_id(),
            accounts: Default::default(),
            tenants: Default::default(),
            telemetry,
            missing: Mutex::default(),
            leases: Default::default(),
        });
        Ok(Runner {
            shared,
            snapshot,
            loader,
            _embedded: embedded,
            pool,
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
            telemetry: self.shared.telemetry.clone(),
            waiters: crate::redis::Waiters::new(self.shared.queue.clone()),
            queue: self.shared.queue.clone(),
            serving: self.shared.serving.subscribe(),
            metrics: self.shared.metrics.clone(),
            outbound: Some(self.outbound_counts()),
            reloads: Some({
                let shared = self.shared.clone();
                Arc::new(move || shared.recent_reloads())
            }),
            upgrades: Some({
                let shared = self.shared.clone();
                Arc::new(crate::upgrade::Service::new(
                    self.shared.upgrader.clone(),
                    self.shared.versions.clone(),
                    Box::new(move |topic| shared.served.borrow().handlers.get(topic).cloned()),
                ))
            }),
        }
    }

    /// Where this process's spans go (or not).
    pub fn telemetry(&self) -> Arc<Telemetry> {
        self.shared.telemetry.clone()
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
            pool,
        } = self;
        let pool = pool.unwrap_or_else(tokio::runtime::Handle::current);
        // unbounded, yet bounded: each running attempt sends one completion
        let (commits, commit_rx) = mpsc::unbounded_channel();
        let committer = tokio::spawn(commit::run(shared.clone(), commit_rx));
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let listener = tokio::spawn(crate::redis::listen_for_wakes(
            shared.queue.clone(),
            wake_tx,
        ));
        let schedules = tokio::spawn(cron::run(shared.clone()));
        let progress = tokio::spawn(progress::run(shared.clone()));
        let leases = tokio::spawn(leases::run(shared.clone()));
        let idle = tokio::spawn(drop_idle_instances(shared.clone()));
        // routes (rollouts, pins) are known before the first claim
        let (routes_tx, routes_rx) = watch::channel(Arc::default());
        let rollouts = rollout::start(shared.clone(), shared.versions.clone(), routes_tx).await;
        let (reload_tx, reload_rx) = mpsc::channel(4);
        let watcher = tokio::spawn(crate::reload::watch(loader, snapshot.clone(), reload_tx));
        tracing::info!(
            topics = snapshot.config.topics.len(),
            concurrency = snapshot.config.runner.concurrency,
            threads = pool.metrics().num_workers(),
            "hourglass running; Ctrl-C or SIGTERM stops it gracefully"
        );
        // returns once every attempt has finished or been stopped, dropping every commit sender
        scheduler::Scheduler::new(shared.clone(), snapshot, routes_rx, commits, pool)
            .run(wake_rx, reload_rx, shutdown)
            .await;
        listener.abort();
        watcher.abort();
        schedules.abort();
        progress.abort();
        idle.abort();
        rollouts.abort();
        // an aborted task may be mid-poll on another thread: once the
        // runner has stopped, it enqueues no fire time any more
        let _ = schedules.await;
        let released = committer.await.unwrap_or(0);
        leases.abort();
        // the last attempts' spans, still queued, go before the process does
        shared.telemetry.flush(FLUSH_WITHIN).await;
        tracing::info!(released, "hourglass stopped");
        Ok(())
    }
}

/// Drop reused instances (`reuse`) once idle past their topic's
/// `reuse.idle`, checking every second.
async fn drop_idle_instances(shared: Arc<Shared>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let dropped = shared.runtime.drop_idle_instances();
        if dropped > 0 {
            tracing::debug!(dropped, "idle reused instances dropped");
        }
    }
}
