//! The scheduler: claims due jobs in strict priority order while there is
//! capacity, sleeps until the earliest known due time (or a wake message, a
//! finished attempt or a reload), requeues expired leases, sweeps follow-ups
//! whose delivery is overdue, and on shutdown waits out the grace period
//! before stopping what still runs (a stopped attempt's guard releases its
//! job through the committer).
//!
//! A claim round (`scheduler/claim.rs`) is the one place jobs are claimed
//! and their attempts started.

mod claim;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::attempt::{Completion, InFlight};
use super::capacity::Capacity;
use super::heartbeat::Heartbeat;
use super::rollout::{Route, Routes};
use super::watch::tenants::CHARGE_EVERY;
use super::{Shared, Topic, housekeeping};
use crate::clock::{millis, now_ms};
use crate::config::Config;
use crate::redis::Wake;
use crate::reload::{Reload, Snapshot};
use crate::wasm::Sandbox;

/// How often expired leases are looked for.
const LEASE_SCAN: Duration = Duration::from_secs(1);
/// How often dead-letter retention (count and age) is enforced, beyond each burial.
const RETENTION_SCAN: Duration = Duration::from_secs(60);
/// A safety net under the wake messages: every topic is looked at this often
/// even if no message arrives (a lost message never leaves due jobs waiting).
const WATCHDOG: Duration = Duration::from_secs(1);

const NEVER: u64 = u64::MAX; // a due time never known

/// How long before its due time a job may be claimed (it starts at its due
/// time, never before: `attempt::run` holds it). On a 2-core VM a claim
/// sometimes took 2 to 7 ms to come back (Redis itself paused for up to
/// 4 ms in a script a few jobs long), and every job due meanwhile started
/// that late: lateness p99 9 ms. Claiming this much ahead hides such pauses.
/// Not for a rate-limited topic: its limit counts starts when they are claimed.
const CLAIM_AHEAD: u64 = 5;

pub(super) struct Scheduler {
    shared: Arc<Shared>,
    /// The configuration in force (replaced by reloads).
    config: Arc<Config>,
    /// Highest priority first.
    topics: Vec<Arc<Topic>>,
    /// When each topic (same index) next has a due job, as far as we know.
    next_due: Vec<u64>,
    /// Weighted topics: the starts each is owed (deficit round robin).
    credit: Vec<f64>,
    /// Each topic's route (same index) if not its file's version: `rollout.rs`.
    route: Vec<Option<Arc<Route>>>,
    /// Routes as the rollout task publishes them.
    routes: watch::Receiver<Arc<Routes>>,
    global: Arc<tokio::sync::Semaphore>,
    commits: mpsc::UnboundedSender<Completion>,
    /// Running attempts; each returns its guard, dropped (freeing its slot)
    /// only when reaped here, so capacity never changes in the middle of a
    /// claim round (strict priority would otherwise let a lower topic take a
    /// slot freed meanwhile).
    tasks: JoinSet<InFlight>,
    /// Where heavy attempts run (light ones run here, on this task's
    /// thread): see [`Scheduler::new`].
    pool: tokio::runtime::Handle,
    /// What this runner tells the others (and `hourglass runners`).
    heartbeat: Heartbeat,
    /// Topics served without fairness whose jobs queued per key (from when
    /// they had it) must go back to their time index: set by each apply.
    unfair: Vec<Arc<Topic>>,
}

impl Scheduler {
    /// A scheduler serving `snapshot`, its attempts ending in `commits`.
    /// A handler's attempts run on this task's thread while they are light
    /// (cheaper than Redis's work per job: one thread then keeps up, and
    /// no job moves between threads), on `pool`'s workers when heavier.
    pub fn new(
        shared: Arc<Shared>,
        snapshot: Snapshot,
        routes: watch::Receiver<Arc<Routes>>,
        commits: mpsc::UnboundedSender<Completion>,
        pool: tokio::runtime::Handle,
    ) -> Scheduler {
        let global = Arc::new(tokio::sync::Semaphore::new(
            snapshot.config.runner.concurrency as usize,
        ));
        let mut scheduler = Scheduler {
            heartbeat: Heartbeat::new(shared.runner_id.clone(), now_ms()),
            shared,
            config: snapshot.config.clone(),
            topics: Vec::new(),
            next_due: Vec::new(),
            credit: Vec::new(),
            route: Vec::new(),
            routes,
            global,
            commits,
            tasks: JoinSet::new(),
            pool,
            unfair: Vec::new(),
        };
        scheduler.apply(snapshot);
        scheduler
    }

    /// Serve `snapshot` from now on. Topics keep their capacity (resized) and
    /// what is known of their next due time; attempts already running keep the
    /// topic version (settings and handler) they started with.
    fn apply(&mut self, snapshot: Snapshot) {
        let max_payload = self.config.runner.max_payload;
        let mut next: Vec<(Arc<Topic>, (u64, f64))> = snapshot
            .config
            .topics
            .iter()
            .map(|cfg| {
                let old = self.topics.iter().position(|t| t.cfg.name == cfg.name);
                let capacity = match old {
                    Some(i) => {
                        let c = self.topics[i].capacity.clone();
                        c.resize(cfg.concurrency);
                        c
                    }
                    None => Capacity::new(cfg.concurrency),
                };
                let topic = Topic {
                    cfg: cfg.clone(),
                    keys: self.shared.queue.keys(&cfg.name),
                    handler: snapshot.handlers.get(&cfg.name).cloned(),
                    sandbox: Sandbox::for_topic(cfg, max_payload),
                    capacity,
                };
                let kept = old.map_or((0, 0.0), |i| (self.next_due[i], self.credit[i]));
                (Arc::new(topic), kept)
            })
            .collect();
        // strict priority: claim rounds walk topics in this order
        next.sort_by_key(|(t, _)| std::cmp::Reverse(t.cfg.priority));
        let (topics, kept): (Vec<_>, Vec<_>) = next.into_iter().unzip();
        self.unfair = topics
            .iter()
            .filter(|t| t.cfg.fairness.is_none())
            .cloned()
            .collect();
        self.topics = topics;
        (self.next_due, self.credit) = kept.into_iter().unzip();
        self.shared
            .serving
            .send_replace(Arc::new(snapshot.serving()));
        self.config = snapshot.config.clone();
        self.shared.served.send_replace(snapshot);
        self.refresh_routes();
    }

    /// Take the rollout task's latest routes.
    fn refresh_routes(&mut self) {
        let routes = self.routes.borrow_and_update().clone();
        self.route = self
            .topics
            .iter()
            .map(|t| routes.get(&t.cfg.name).cloned())
            .collect();
    }

    /// Whether topic `i` has a version to serve: its route's, or (without a
    /// route) its file's. A topic under a rollout policy serves only by its
    /// route, which says which version is stable.
    fn serves(&self, i: usize) -> bool {
        match &self.route[i] {
            Some(route) => route.serve.is_some(),
            None => self.topics[i].handler.is_some() && self.topics[i].cfg.rollout.is_none(),
        }
    }

    /// Serve until `shutdown`, then shut down: every attempt has finished or
    /// been stopped (and released) when this returns.
    pub async fn run(
        mut self,
        mut wake: mpsc::UnboundedReceiver<Wake>,
        mut reload: mpsc::Receiver<Reload>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut next_scan = 0;
        let mut next_trim = 0;
        let mut next_probe = now_ms() + millis(WATCHDOG);
        let mut next_charge = 0;
        let mut pause = Duration::from_millis(50);
        // since when claiming has failed (Redis unreachable), if it has
        let mut outage: Option<tokio::time::Instant> = None;
        loop {
            if self.routes.has_changed().unwrap_or(false) {
                self.refresh_routes();
            }
            let now = now_ms();
            if now >= next_probe {
                self.next_due.iter_mut().for_each(|d| *d = (*d).min(now));
                next_probe = now + millis(WATCHDOG);
            }
            // housekeeping waits while Redis is away: claiming tells when it is back
            if outage.is_none() && now >= next_scan {
                housekeeping::requeue_expired(&self.shared, &self.topics, now).await;
                housekeeping::sweep_outboxes(&self.shared, &self.topics, now).await;
                self.heartbeat
                    .beat_if_due(&self.shared, &self.topics, self.tasks.len(), now)
                    .await;
                next_scan = now + millis(LEASE_SCAN);
            }
            if outage.is_none() && now >= next_charge {
                self.shared.tenants.flush(&self.shared.queue, now).await;
                next_charge = now + millis(CHARGE_EVERY);
                self.fairness_off().await;
            }
            if outage.is_none() && now >= next_trim {
                housekeeping::enforce_retention(&self.shared, &self.topics, now).await;
                next_trim = now + millis(RETENTION_SCAN);
            }
            let sleep = match self.claim_round(now).await {
                Ok(()) => {
                    if let Some(since) = outage.take() {
                        tracing::info!(
                            "redis reachable again after {:.1}s; claiming resumes",
                            since.elapsed().as_secs_f64()
                        );
                    }
                    pause = Duration::from_millis(50);
                    let until = self.next_wake().min(next_scan).min(next_probe);
                    Duration::from_millis(until.saturating_sub(now_ms()))
                }
                Err(e) => {
                    self.shared.meter.redis_error();
                    if outage.is_none() {
                        tracing::warn!(
                            "claiming failed: {e}; retrying with backoff up to 2s (running jobs go on, nothing is lost)"
                        );
                        outage = Some(tokio::time::Instant::now());
                    } else {
                        tracing::debug!("claiming failed again, retrying in {pause:?}: {e}");
                    }
                    let p = pause;
                    pause = (pause * 2).min(Duration::from_secs(2));
                    p
                }
            };
            self.shared
                .metrics
                .instances_in_use
                .set(i64::from(self.shared.runtime.in_use().now()));
            // biased, rare events first: under load a finished attempt is
            // almost always ready, and would otherwise keep a reload (a new
            // handler version) or a wake-up waiting for a lull
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(Reload { snapshot, notices }) = reload.recv() => {
                    if let Some(snapshot) = snapshot {
                        self.apply(snapshot);
                    }
                    for notice in notices {
                        self.shared.reloaded(notice, now_ms());
                    }
                }
                Some(msg) = wake.recv() => self.on_wake(msg),
                Ok(()) = self.routes.changed() => self.refresh_routes(),
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    reaped(joined);
                    while let Some(joined) = self.tasks.try_join_next() {
                        reaped(joined);
                    }
                }
                () = tokio::time::sleep(sleep) => {}
            }
        }
        self.shut_down().await
    }

    /// Give topics that no longer claim fairly their queued jobs back.
    async fn fairness_off(&mut self) {
        for topic in std::mem::take(&mut self.unfair) {
            if let Err(e) = self.shared.queue.tenants().fairness_off(&topic.keys).await {
                tracing::warn!(topic = %topic.cfg.name, "jobs queued per key not yet back in due order: {e}");
                self.unfair.push(topic);
            }
        }
    }

    fn on_wake(&mut self, msg: Wake) {
        match msg {
            Wake::All => self.next_due.iter_mut().for_each(|d| *d = 0),
            Wake::Due(topic, due) => {
                if let Some(i) = self.topics.iter().position(|t| t.cfg.name == topic) {
                    // a batched topic's first due job waits for others
                    let wait = self.topics[i].cfg.batch.map_or(0, |b| millis(b.wait));
                    self.next_due[i] = self.next_due[i].min(due + wait);
                }
            }
        }
    }

    /// When to claim next: the earliest due time of a topic that could take
    /// a job now, less how far ahead it claims.
    fn next_wake(&self) -> u64 {
        if self.global.available_permits() == 0 {
            return NEVER;
        }
        self.topics
            .iter()
            .zip(&self.next_due)
            .enumerate()
            .filter(|(i, (t, _))| self.serves(*i) && t.capacity.available() > 0)
            .map(|(i, (_, due))| due.saturating_sub(self.ahead(i)))
            .min()
            .unwrap_or(NEVER)
    }

    /// How far ahead of its due time topic `i` claims a job: [`CLAIM_AHEAD`].
    fn ahead(&self, i: usize) -> u64 {
        match self.topics[i].cfg.rate {
            Some(_) => 0,
            None => CLAIM_AHEAD,
        }
    }

    /// Stop claiming; give running attempts the grace period, then stop them
    /// (their guards release their jobs through the committer).
    async fn shut_down(mut self) {
        let grace = self.config.runner.shutdown_grace;
        tracing::info!(
            running = self.tasks.len(),
            "shutting down: waiting up to {grace:?} for running jobs"
        );
        let drained = tokio::time::timeout(grace, async {
            while let Some(joined) = self.tasks.join_next().await {
                reaped(joined);
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                stopped = self.tasks.len(),
                "grace period over: stopping the jobs still running; they are released, not counted as attempts"
            );
            self.tasks.shutdown().await;
        }
        self.heartbeat.leave(&self.shared, now_ms()).await;
    }
}

/// Drop a finished attempt's guard, freeing its slot.
fn reaped(joined: Result<InFlight, tokio::task::JoinError>) {
    if let Err(e) = joined
        && !e.is_cancelled()
    {
        tracing::error!("an attempt task failed: {e}");
    }
}
