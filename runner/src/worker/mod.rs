//! The runner: loads every handler, connects, then claims due jobs in
//! priority order and runs each in a fresh instance until shut down.
//!
//! Tasks: the scheduler (claims, spawns attempts, requeues expired leases,
//! sweeps undelivered follow-ups, applies reloads), one task per attempt, the
//! committer (batches state changes into Redis), the wake listener (pub/sub)
//! and the reload watcher. Shutdown is a future passed to [`Runner::run`]:
//! claiming stops, running attempts get the grace period, the rest are
//! stopped and released.

mod attempt;
mod capacity;
mod commit;
mod housekeeping;
mod scheduler;
mod wake;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{broadcast, mpsc};

use crate::config::{Config, RedisTarget, TopicConfig};
use crate::events::{Event, EventKind, EventSender};
use crate::redis::embedded::EmbeddedRedis;
use crate::redis::{Endpoint, Queue, QueueError, Tls, TopicKeys};
use crate::reload::{Loader, Notice, Snapshot};
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
    /// Attempts running now: (topic, id) → attempt. What is left here after
    /// the grace period is released.
    pub inflight: Mutex<HashMap<(String, String), u32>>,
}

impl Shared {
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

/// Connect to the configured Redis, starting the embedded server if asked to.
pub async fn connect(config: &Config) -> anyhow::Result<(Queue, Option<EmbeddedRedis>)> {
    let (urls, cluster, embedded) = match &config.redis.target {
        RedisTarget::Url(url) => (vec![url.clone()], false, None),
        RedisTarget::Cluster(nodes) => (nodes.clone(), true, None),
        RedisTarget::Embedded { dir } => {
            let dir = dir.clone();
            let server = tokio::task::spawn_blocking(move || EmbeddedRedis::start(&dir)).await??;
            (vec![server.url().to_owned()], false, Some(server))
        }
    };
    let tls = match &config.redis.tls {
        None => None,
        Some(files) => {
            let read = |path: &Option<std::path::PathBuf>| {
                path.as_ref()
                    .map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display())))
                    .transpose()
            };
            Some(Tls {
                ca: read(&files.ca)?,
                client: read(&files.cert)?.zip(read(&files.key)?),
            })
        }
    };
    let endpoint = Endpoint { urls, cluster, tls };
    let shown = endpoint.shown();
    let queue = Queue::open(&endpoint, &config.redis.namespace)
        .await
        .with_context(|| format!("connecting to redis at {shown}"))?
        .with_max_payload(config.runner.max_payload);
    queue
        .ping()
        .await
        .with_context(|| format!("redis at {shown} does not answer"))?;
    Ok((queue, embedded))
}

/// Connect like [`connect`], but while Redis is unreachable keep trying (with
/// backoff, saying so once); only a misconfiguration (credentials, URL, TLS,
/// an embedded server that cannot start) fails.
pub async fn connect_patiently(config: &Config) -> anyhow::Result<(Queue, Option<EmbeddedRedis>)> {
    let mut pause = Duration::from_secs(1);
    let mut waiting_since = None;
    loop {
        match connect(config).await {
            Ok(connected) => {
                if let Some(since) = waiting_since {
                    let since: tokio::time::Instant = since;
                    tracing::info!(
                        "redis answers after {:.1}s; starting",
                        since.elapsed().as_secs_f64()
                    );
                }
                return Ok(connected);
            }
            Err(e) => {
                let retryable = e
                    .downcast_ref::<QueueError>()
                    .is_some_and(QueueError::is_retryable);
                if !retryable {
                    return Err(e);
                }
                if waiting_since.is_none() {
                    tracing::warn!(
                        "{e:#}; waiting for it (retrying with backoff up to 30s; nothing is lost, jobs wait in Redis)"
                    );
                    waiting_since = Some(tokio::time::Instant::now());
                } else {
                    tracing::debug!("{e:#}; retrying in {pause:?}");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
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
        let mut loader = Loader::new(runtime.clone());
        let snapshot = loader.initial(config).await?;
        let (queue, embedded) = connect_patiently(&snapshot.config).await?;
        let shared = Arc::new(Shared {
            queue,
            runtime,
            events: broadcast::channel(1 << 16).0,
            notices: broadcast::channel(256).0,
            inflight: Mutex::new(HashMap::new()),
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
        let (commits, commit_rx) = mpsc::channel(4096);
        let committer = tokio::spawn(commit::run(shared.clone(), commit_rx));
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let listener = tokio::spawn(wake::listen(shared.queue.clone(), wake_tx));
        let (reload_tx, reload_rx) = mpsc::channel(4);
        let watcher = tokio::spawn(crate::reload::watch(loader, snapshot.clone(), reload_tx));
        tracing::info!(
            topics = snapshot.config.topics.len(),
            concurrency = snapshot.config.runner.concurrency,
            "hourglass running; Ctrl-C or SIGTERM stops it gracefully"
        );
        // returns once every attempt has finished or been stopped, dropping every commit sender
        let leftover = scheduler::Scheduler::new(shared.clone(), snapshot, commits)
            .run(wake_rx, reload_rx, shutdown)
            .await;
        listener.abort();
        watcher.abort();
        let _ = committer.await;
        let released = scheduler::release(&shared, leftover).await;
        tracing::info!(released, "hourglass stopped");
        Ok(())
    }
}
