//! The runner: loads every handler, connects, then claims due jobs in
//! priority order and runs each in a fresh instance until shut down.
//!
//! Tasks: the scheduler (claims, spawns attempts, requeues expired leases),
//! one task per attempt, the committer (batches state changes into Redis),
//! and the wake listener (pub/sub). Shutdown is a future passed to
//! [`Runner::run`]: claiming stops, running attempts get the grace period,
//! the rest are stopped and released.

mod attempt;
mod commit;
mod scheduler;
mod wake;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::sync::{Semaphore, broadcast, mpsc};

use crate::config::{Config, RedisTarget, TopicConfig};
use crate::events::{Event, EventKind, EventSender};
use crate::redis::embedded::EmbeddedRedis;
use crate::redis::{Queue, TopicKeys};
use crate::wasm::{LoadedHandler, Runtime};

/// Instance slots beyond the configured concurrency, so a burst never finds the pool empty.
const SPARE_SLOTS: u32 = 8;

/// A topic as the worker serves it.
pub(crate) struct Topic {
    pub cfg: TopicConfig,
    pub keys: TopicKeys,
    pub handler: LoadedHandler,
    pub permits: Arc<Semaphore>,
}

/// What every task of the worker shares.
pub(crate) struct Shared {
    pub queue: Queue,
    pub runtime: Runtime,
    pub config: Config,
    pub events: EventSender,
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
    let (url, embedded) = match &config.redis.target {
        RedisTarget::Url(url) => (url.clone(), None),
        RedisTarget::Embedded { dir } => {
            let dir = dir.clone();
            let server = tokio::task::spawn_blocking(move || EmbeddedRedis::start(&dir)).await??;
            (server.url().to_owned(), Some(server))
        }
    };
    let queue = Queue::connect(&url, &config.redis.namespace)
        .await
        .with_context(|| format!("connecting to redis at {url}"))?;
    queue
        .ping()
        .await
        .with_context(|| format!("redis at {url} does not answer"))?;
    Ok((queue, embedded))
}

/// A runner with its handlers loaded and Redis connected, ready to [`Runner::run`].
pub struct Runner {
    shared: Arc<Shared>,
    topics: Vec<Arc<Topic>>,
    _embedded: Option<EmbeddedRedis>,
}

impl Runner {
    /// Compile every handler (failing on the first that cannot serve), then connect.
    pub async fn start(config: Config) -> anyhow::Result<Runner> {
        let slots = config.runner.concurrency + SPARE_SLOTS;
        let runtime =
            Runtime::new(slots, config.max_memory()).context("creating the WebAssembly engine")?;
        let (runtime, handlers) = tokio::task::spawn_blocking(move || {
            let mut handlers = HashMap::new();
            for topic in &config.topics {
                let handler = runtime
                    .load(&topic.handler)
                    .with_context(|| format!("loading the handler of topic {:?}", topic.name))?;
                handlers.insert(topic.name.clone(), handler);
            }
            anyhow::Ok(((runtime, config), handlers))
        })
        .await??;
        let (runtime, config) = runtime;
        let (queue, embedded) = connect(&config).await?;
        let mut topics: Vec<Arc<Topic>> = config
            .topics
            .iter()
            .map(|cfg| {
                Arc::new(Topic {
                    cfg: cfg.clone(),
                    keys: queue.keys(&cfg.name),
                    handler: handlers[&cfg.name].clone(),
                    permits: Arc::new(Semaphore::new(cfg.concurrency as usize)),
                })
            })
            .collect();
        // strict priority: the scheduler walks topics in this order
        topics.sort_by_key(|t| std::cmp::Reverse(t.cfg.priority));
        let shared = Arc::new(Shared {
            queue,
            runtime,
            config,
            events: broadcast::channel(1 << 16).0,
            inflight: Mutex::new(HashMap::new()),
        });
        Ok(Runner {
            shared,
            topics,
            _embedded: embedded,
        })
    }

    /// Events about jobs from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// The connection the runner uses (handy for producing from the same process).
    pub fn queue(&self) -> &Queue {
        &self.shared.queue
    }

    /// Serve until `shutdown` completes, then shut down gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Runner {
            shared,
            topics,
            _embedded,
        } = self;
        let (commits, commit_rx) = mpsc::channel(4096);
        let committer = tokio::spawn(commit::run(shared.clone(), commit_rx));
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let listener = tokio::spawn(wake::listen(shared.queue.clone(), wake_tx));
        tracing::info!(
            topics = topics.len(),
            concurrency = shared.config.runner.concurrency,
            "hourglass running; Ctrl-C or SIGTERM stops it gracefully"
        );
        // returns once every attempt has finished or been stopped, dropping every commit sender
        let leftover = scheduler::Scheduler::new(shared.clone(), topics, commits)
            .run(wake_rx, shutdown)
            .await;
        listener.abort();
        let _ = committer.await;
        let released = scheduler::release(&shared, leftover).await;
        tracing::info!(released, "hourglass stopped");
        Ok(())
    }
}
