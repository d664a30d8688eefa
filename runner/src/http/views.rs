//! Typed answers: the handlers build these and the OpenAPI description
//! derives their schemas from the same types, so the two cannot differ.

use serde::Serialize;
use utoipa::ToSchema;

use crate::redis::{RunnerInfo, Share, TopicStats};
use crate::reload::Serving;

/// One topic as `GET /api/topics` and the dashboard show it: settings
/// (null for a topic this runner does not serve), counts in Redis, and what
/// the live runners report (totals, CPU, recent lateness, peak memory).
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TopicView {
    name: String,
    priority: Option<i64>,
    concurrency: Option<u32>,
    timeout_ms: Option<u64>,
    max_attempts: Option<u32>,
    /// Its tenant fairness, if it has one.
    fairness: Option<FairnessView>,
    /// The handler version this runner serves (or the first a live runner reports).
    handler: Option<String>,
    /// The versions the live runners serve.
    handlers_live: Vec<String>,
    paused: bool,
    /// Jobs waiting for a later time.
    scheduled: u64,
    /// Jobs due and waiting for a slot.
    ready: u64,
    running: u64,
    dead: u64,
    /// Durable jobs asleep or waiting for a signal.
    suspended: u64,
    /// Jobs that expired (not started by their deadline), ever.
    expired: u64,
    /// Jobs the live runners acked since they started.
    done: u64,
    /// Attempts that failed on the live runners.
    failed: u64,
    late_p50_ms: Option<u64>,
    late_p99_ms: Option<u64>,
    /// CPU the live runners' attempts burned (µs).
    cpu_us: u64,
    /// The 99th percentile of attempts' peak memory (bytes).
    memory_p99: Option<u64>,
}

/// A topic's tenant fairness.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct FairnessView {
    /// `jobs` or `cpu`
    share: &'static str,
    key_concurrency: Option<u32>,
    key_rate_per_s: Option<f64>,
}

impl TopicView {
    pub(super) fn new(
        serving: &Serving,
        runners: &[RunnerInfo],
        name: &str,
        stats: &TopicStats,
    ) -> TopicView {
        let cfg = serving.config.topic(name);
        let (mut done, mut failed) = (0, 0);
        let (mut p50, mut p99) = (None, None);
        let (mut cpu_us, mut memory_p99) = (0, None);
        let mut versions: Vec<String> = Vec::new();
        for r in runners {
            if let Some(m) = r.meters.get(name) {
                done += m.done;
                failed += m.failed;
                p50 = p50.max(m.late_p50_ms);
                p99 = p99.max(m.late_p99_ms);
                cpu_us += m.cpu_us;
                memory_p99 = memory_p99.max(m.memory_p99);
            }
            if let Some(v) = r.handlers.get(name)
                && !versions.contains(v)
            {
                versions.push(v.clone());
            }
        }
        TopicView {
            name: name.to_owned(),
            priority: cfg.map(|c| c.priority),
            concurrency: cfg.map(|c| c.concurrency),
            timeout_ms: cfg.map(|c| c.timeout.as_millis() as u64),
            max_attempts: cfg.map(|c| c.max_attempts),
            fairness: cfg.and_then(|c| c.fairness.as_ref()).map(|f| FairnessView {
                share: match f.share {
                    Share::Jobs => "jobs",
                    Share::Cpu => "cpu",
                },
                key_concurrency: (f.key_concurrency > 0).then_some(f.key_concurrency),
                key_rate_per_s: f.key_rate.map(|r| 1000.0 / r.interval_ms),
            }),
            handler: serving
                .handlers
                .get(name)
                .cloned()
                .or_else(|| versions.first().cloned()),
            handlers_live: versions,
            paused: stats.paused,
            scheduled: stats.scheduled,
            ready: stats.ready,
            running: stats.running,
            dead: stats.dead,
            suspended: stats.suspended,
            expired: stats.expired,
            done,
            failed,
            late_p50_ms: p50,
            late_p99_ms: p99,
            cpu_us,
            memory_p99,
        }
    }
}

/// Every topic.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TopicList {
    pub(super) topics: Vec<TopicView>,
    /// Whether this process runs jobs (`run`) or only serves the API (`serve`).
    pub(super) runs_jobs: bool,
}

/// A page of a topic's dead letters, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct DeadPage {
    pub(super) topic: String,
    /// Dead letters in all.
    pub(super) total: u64,
    pub(super) offset: usize,
    pub(super) limit: usize,
    pub(super) letters: Vec<super::answers::DeadLetterView>,
}

/// A cancelled job: where it was.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobCancelled {
    pub(super) id: String,
    pub(super) cancelled: bool,
    /// `waiting`, `dead`, or `running (...)` (the attempt finishes; its
    /// outcome is discarded)
    pub(super) was: String,
}

/// A topic paused or resumed.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Paused {
    pub(super) topic: String,
    pub(super) paused: bool,
    /// Whether this call changed it.
    pub(super) changed: bool,
}

/// One tenant key paused or resumed.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KeyPaused {
    pub(super) topic: String,
    pub(super) key: String,
    pub(super) paused: bool,
    /// Whether this call changed it.
    pub(super) changed: bool,
}

/// One tenant key's new weight.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KeyWeighed {
    pub(super) topic: String,
    pub(super) key: String,
    pub(super) weight: u32,
}

/// A topic's tenant keys: the totals and the top keys.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KeysView {
    pub(super) topic: String,
    /// Jobs due and queued across all keys.
    pub(super) queued: u64,
    /// Jobs of the topic running.
    pub(super) running: u64,
    /// CPU burned over the last minute across all keys (µs).
    pub(super) cpu_us: u64,
    /// Keys with jobs queued.
    pub(super) keys_with_jobs: u64,
    /// The top keys by CPU of the last minute and by jobs queued, and the
    /// paused ones, most jobs queued first.
    pub(super) top: Vec<KeyView>,
}

/// One tenant key.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KeyView {
    /// The key ('' for jobs without one).
    key: String,
    queued: u64,
    running: u64,
    /// CPU its attempts burned over the last minute (µs).
    cpu_us: u64,
    paused: bool,
    weight: u32,
}

impl KeysView {
    pub(super) fn new(topic: String, stats: crate::redis::KeysStats) -> KeysView {
        KeysView {
            topic,
            queued: stats.queued,
            running: stats.running,
            cpu_us: stats.cpu_us,
            keys_with_jobs: stats.keys_with_jobs,
            top: stats
                .top
                .into_iter()
                .map(|k| KeyView {
                    key: k.key,
                    queued: k.queued,
                    running: k.running,
                    cpu_us: k.cpu_us,
                    paused: k.paused,
                    weight: k.weight,
                })
                .collect(),
        }
    }
}

/// A signal delivered to a durable job.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Delivered {
    pub(super) id: String,
    pub(super) signal: String,
    /// `woken` (it was waiting for it), `kept` (for when it waits) or
    /// `duplicate` (this signal was already delivered)
    pub(super) delivered: String,
}

/// A durable job woken from its sleep.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobWoken {
    pub(super) id: String,
    pub(super) woken: bool,
}

/// Jobs enqueued per topic by a flow change (`{topic: n}`).
type PerTopic = std::collections::BTreeMap<String, usize>;

/// A flow or batch created.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct FlowCreated {
    pub(super) id: String,
    /// Jobs in it.
    pub(super) jobs: usize,
    /// Jobs enqueued now (those that wait for nothing), per topic.
    #[schema(inline)]
    pub(super) enqueued: PerTopic,
}

/// Jobs added to an open batch.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BatchAdded {
    pub(super) id: String,
    pub(super) added: usize,
    /// Jobs enqueued now, per topic.
    #[schema(inline)]
    pub(super) enqueued: PerTopic,
}

/// A batch sealed.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BatchSealed {
    pub(super) id: String,
    /// Its callbacks enqueued now (its jobs had all ended), per topic.
    #[schema(inline)]
    pub(super) enqueued: PerTopic,
}

/// A flow cancelled.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct FlowCancelled {
    pub(super) id: String,
    /// Topics in which jobs were cancelled.
    pub(super) cancelled_in_topics: usize,
}

/// What became of one enqueued job.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EnqueuedOne {
    pub(super) id: String,
    /// `new`, `duplicate` (a live job has this id), `replaced`, or `running`
    /// / `journaled` (a replace that did not happen).
    pub(super) status: &'static str,
    /// false when a replace did not happen
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) replaced: Option<bool>,
}

/// The answer of many jobs, in order.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EnqueuedMany {
    pub(super) new: usize,
    pub(super) duplicate: usize,
    pub(super) jobs: Vec<EnqueuedOne>,
}
