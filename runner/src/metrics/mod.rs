//! Prometheus metrics (`GET /metrics`): what the runner counts as it works,
//! and the gauges an operator's scrape reads from Redis.
//!
//! Recording is cheap on the job path: each topic's counters and histograms
//! are looked up once (see `worker/meter.rs`) and then cost an atomic add or
//! a short lock. Gauges that need Redis (depths, paused, runners) are set by
//! the scrape itself from a snapshot at most a second old (`http/scrape.rs`).
//! Names follow Prometheus' conventions: base units (seconds), `_total` on
//! counters, `_info` for a version.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod labels;
mod scale;

pub use labels::{
    DirectionLabels, EffectLabels, KeyLabels, MissingLabels, OutcomeLabels, ResultLabel,
    RolloutLabels, StateLabels, StatusLabels, StepLabels, ThreadLabels, TopicLabel, VersionLabels,
};
pub use scale::ScaleMetrics;

/// Buckets in seconds that tell 1 ms from 2 ms and still reach a minute.
const BUCKETS: [f64; 16] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// CPU seconds per attempt: a no-op handler uses tens of microseconds.
const CPU_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    5.0, 30.0,
];

fn cpu_histogram() -> Histogram {
    Histogram::new(CPU_BUCKETS)
}

/// Peak linear memory per attempt, bytes: 1 MiB to 4 GiB by doubling.
fn memory_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        f64::from(1u32 << 20),
        2.0,
        13,
    ))
}

type HistogramFamily = Family<TopicLabel, Histogram, fn() -> Histogram>;
type VersionHistogramFamily = Family<VersionLabels, Histogram, fn() -> Histogram>;

/// Every metric, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Attempts that ended, by topic and outcome.
    pub attempts: Family<OutcomeLabels, Counter>,
    /// Attempts started, by the thread they ran on.
    pub attempts_started: Family<ThreadLabels, Counter>,
    /// Jobs this process enqueued (API, follow-ups, schedules), by topic.
    pub enqueued: Family<TopicLabel, Counter>,
    /// Durable handlers' steps, by topic, recorded or replayed.
    pub steps: Family<StepLabels, Counter>,
    /// Calls of `handle-batch` (a topic with `batch`), by topic.
    pub batch_calls: Family<TopicLabel, Counter>,
    /// Jobs in those calls, by topic.
    pub batch_jobs: Family<TopicLabel, Counter>,
    /// Journaled attempts' effects, by kind, recorded or replayed.
    pub effects: Family<EffectLabels, Counter>,
    /// Journaled attempts whose handler asked for something else than the
    /// journal held.
    pub divergences: Family<TopicLabel, Counter>,
    /// Live reloads, by result.
    pub reloads: Family<ResultLabel, Counter>,
    /// Redis calls that failed (each retry counts).
    pub redis_errors: Counter,
    /// Spans not exported: the export queue was full or the collector did
    /// not take them.
    pub spans_dropped: Counter,
    /// Handlers' outbound HTTP requests, by topic and status.
    pub outbound: Family<StatusLabels, Counter>,
    /// Due → start of each attempt, seconds.
    pub lateness: HistogramFamily,
    /// How long each attempt's handler ran, seconds, per topic and version.
    pub duration: VersionHistogramFamily,
    /// CPU each attempt used, seconds, per topic and version.
    pub cpu: VersionHistogramFamily,
    /// CPU all attempts used, seconds, per topic and version.
    pub cpu_total: Family<VersionLabels, Counter<f64, AtomicU64>>,
    /// Peak linear memory of each attempt, bytes, per topic and version.
    pub memory_peak: VersionHistogramFamily,
    /// Outbound HTTP body bytes, per topic, version and direction.
    pub outbound_bytes: Family<DirectionLabels, Counter>,
    /// Rollout verdicts and pins, per topic (from Redis at scrape time: each
    /// counted once, whichever process made it).
    pub rollouts: Family<RolloutLabels, Counter>,
    /// Jobs per topic and state (from Redis at scrape time).
    pub jobs: Family<StateLabels, Gauge>,
    /// 1 while a topic is paused.
    pub paused: Family<TopicLabel, Gauge>,
    /// Instances running a handler now.
    pub instances_in_use: Gauge,
    /// Instance slots in the pool.
    pub instance_slots: Gauge,
    /// 1 for the handler version serving each topic.
    pub handler_info: Family<VersionLabels, Gauge>,
    /// `hourglass_version_missing`.
    pub version_missing: Family<MissingLabels, Gauge>,
    /// 1 while Redis answers, 0 during an outage.
    pub redis_up: Gauge,
    /// Runners whose heartbeat is alive.
    pub runners: Gauge,
    /// Flows (and batches) not finished (from Redis at scrape time).
    pub flows_open: Gauge,
    /// Flows finished with every job acked (from Redis: counted once).
    pub flows_completed: Counter,
    /// Flows finished with a job dead, or cancelled (from Redis).
    pub flows_failed: Counter,
    /// Jobs due and queued per tenant key: the top keys and `other`.
    pub key_queued: Family<KeyLabels, Gauge>,
    /// Jobs running per tenant key: the top keys and `other`.
    pub key_running: Family<KeyLabels, Gauge>,
    /// CPU per tenant key over the last minute (ms): the top keys and `other`.
    pub key_cpu: Family<KeyLabels, Gauge>,
    /// What autoscalers read (`hourglass_scale_*`, from Redis at scrape time).
    pub scale: ScaleMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `hourglass_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("hourglass");
        let m = Metrics {
            attempts: Family::default(),
            attempts_started: Family::default(),
            enqueued: Family::default(),
            steps: Family::default(),
            batch_calls: Family::default(),
            batch_jobs: Family::default(),
            effects: Family::default(),
            divergences: Family::default(),
            reloads: Family::default(),
            redis_errors: Counter::default(),
            spans_dropped: Counter::default(),
            outbound: Family::default(),
            lateness: Family::new_with_constructor(histogram),
            duration: Family::new_with_constructor(histogram),
            cpu: Family::new_with_constructor(cpu_histogram),
            cpu_total: Family::default(),
            memory_peak: Family::new_with_constructor(memory_histogram),
            outbound_bytes: Family::default(),
            rollouts: Family::default(),
            jobs: Family::default(),
            paused: Family::default(),
            instances_in_use: Gauge::default(),
            instance_slots: Gauge::default(),
            handler_info: Family::default(),
            version_missing: Family::default(),
            redis_up: Gauge::default(),
            runners: Gauge::default(),
            flows_open: Gauge::default(),
            flows_completed: Counter::default(),
            flows_failed: Counter::default(),
            key_queued: Family::default(),
            key_running: Family::default(),
            key_cpu: Family::default(),
            scale: ScaleMetrics::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "attempts",
            "Attempts that ended, by handler version and outcome (ack, retry, dead, released, cancelled, suspended; expired: not started by its deadline, ended unrun)",
            m.attempts.clone(),
        );
        r.register(
            "attempts_started",
            "Attempts started, by the thread they ran on: runner (the one that claims and commits: a handler version whose recent attempts averaged under [runner] light_cpu of CPU, 50 µs unless set) or pool (the workers of --threads: heavier or not yet measured ones, and batch calls)",
            m.attempts_started.clone(),
        );
        r.register(
            "enqueued",
            "Jobs enqueued by this process (HTTP API, follow-ups, schedules)",
            m.enqueued.clone(),
        );
        r.register(
            "batch_calls",
            "Calls of a batched topic's handle-batch",
            m.batch_calls.clone(),
        );
        r.register(
            "batch_jobs",
            "Jobs handed to handle-batch calls (over batch_calls: the mean batch)",
            m.batch_jobs.clone(),
        );
        r.register(
            "steps",
            "Durable handlers' steps: recorded (run, then written to the job's journal) or replayed (returned from it)",
            m.steps.clone(),
        );
        r.register(
            "effects",
            "Effects of attempts on journaled topics (journal = \"effects\"), by kind: recorded (done, then written to the job's journal) or replayed (answered from it)",
            m.effects.clone(),
        );
        r.register(
            "journal_divergences",
            "Attempts on journaled topics that asked for another request or follow-up than the journal held at that place",
            m.divergences.clone(),
        );
        r.register(
            "reloads",
            "Live reloads of handlers and queues.toml, by result",
            m.reloads.clone(),
        );
        r.register(
            "redis_errors",
            "Redis calls that failed (each retry counts)",
            m.redis_errors.clone(),
        );
        r.register(
            "telemetry_spans_dropped",
            "Spans not exported ([telemetry]): the export queue was full, or the collector was slow or away",
            m.spans_dropped.clone(),
        );
        r.register(
            "outbound_http_requests",
            "Handlers' outbound HTTP requests, by status (denied: no grant; error: no answer)",
            m.outbound.clone(),
        );
        r.register(
            "lateness_seconds",
            "Due time to start of each attempt",
            m.lateness.clone(),
        );
        r.register(
            "attempt_duration_seconds",
            "How long each attempt's handler ran, by handler version",
            m.duration.clone(),
        );
        r.register(
            "attempt_cpu_seconds",
            "CPU each attempt's instance used, by handler version",
            m.cpu.clone(),
        );
        r.register(
            "cpu_seconds",
            "CPU the attempts' instances used, by handler version",
            m.cpu_total.clone(),
        );
        r.register(
            "attempt_memory_peak_bytes",
            "The most linear memory each attempt's instance held, by handler version",
            m.memory_peak.clone(),
        );
        r.register(
            "outbound_http_bytes",
            "Handlers' outbound HTTP body bytes, by handler version and direction (out: sent, in: received)",
            m.outbound_bytes.clone(),
        );
        r.register(
            "rollouts",
            "Rollout verdicts (promoted, rolled_back, aborted) and pins (pinned, unpinned) of each topic's handler versions",
            m.rollouts.clone(),
        );
        r.register(
            "jobs",
            "Jobs per topic and state (scheduled, ready, running, dead; suspended: of the scheduled, durable jobs that sleep or wait for a signal)",
            m.jobs.clone(),
        );
        r.register(
            "topic_paused",
            "1 while the topic is paused",
            m.paused.clone(),
        );
        r.register(
            "instances_in_use",
            "Sandboxed instances running a handler now",
            m.instances_in_use.clone(),
        );
        r.register(
            "instance_slots",
            "Instance slots in this runner's pool",
            m.instance_slots.clone(),
        );
        r.register(
            "handler_info",
            "The handler version (content hash) serving each topic",
            m.handler_info.clone(),
        );
        r.register(
            "version_missing",
            "1 for each handler version this runner is told to serve for a topic and does not have (role stable or pinned: it claims nothing of the topic; canary: it serves the stable version only)",
            m.version_missing.clone(),
        );
        r.register(
            "redis_up",
            "1 while Redis answers, 0 during an outage",
            m.redis_up.clone(),
        );
        r.register(
            "runners_alive",
            "Runners whose heartbeat is alive",
            m.runners.clone(),
        );
        r.register(
            "key_queued",
            "Jobs due and waiting their tenant key's turn, for the top keys of topics with fairness (the rest as key=\"other\")",
            m.key_queued.clone(),
        );
        r.register(
            "key_running",
            "Jobs running per tenant key, for the top keys of topics with fairness (the rest as key=\"other\")",
            m.key_running.clone(),
        );
        r.register(
            "key_cpu_last_minute_ms",
            "CPU that each top tenant key's attempts burned over the last minute, in ms (the rest as key=\"other\")",
            m.key_cpu.clone(),
        );
        r.register(
            "flows_open",
            "Flows and batches created and not finished",
            m.flows_open.clone(),
        );
        r.register(
            "flows_completed",
            "Flows and batches finished with every job acked",
            m.flows_completed.clone(),
        );
        r.register(
            "flows_failed",
            "Flows and batches finished with a job dead-lettered, or cancelled",
            m.flows_failed.clone(),
        );
        m.scale.register(r);
        Metrics { registry, ..m }
    }

    /// The text exposition (OpenMetrics, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
