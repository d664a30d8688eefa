//! `GET /metrics`: the counters and histograms the runner keeps, plus gauges
//! and the rollout counters read from Redis at most once a second however
//! often Prometheus scrapes (O(1) commands per topic, run concurrently: never
//! a scan).

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;

use super::{App, AppState, exposition};
use crate::metrics::{
    KeyLabels, RolloutLabels, StateLabels, StatusLabels, TopicLabel, VersionLabels,
};
use crate::redis::Rollout;

/// How old the Redis gauges may be.
const FRESH: Duration = Duration::from_secs(1);

/// When the Redis gauges were last read.
#[derive(Default)]
pub(super) struct Cache {
    read_at: tokio::sync::Mutex<Option<Instant>>,
}

/// The metrics in the format the `Accept` header prefers: OpenMetrics, or the
/// classic text format (no header, `*/*`, `text/plain`; [`exposition`]).
pub(super) async fn metrics(State(app): AppState, headers: HeaderMap) -> impl IntoResponse {
    // one scrape at a time: a refresh clears and refills families
    let mut read_at = app.scrape.read_at.lock().await;
    if read_at.is_none_or(|t| t.elapsed() >= FRESH) {
        refresh(&app).await;
        *read_at = Some(Instant::now());
    }
    let m = &app.ops.metrics;
    if let Some(outbound) = &app.ops.outbound {
        for ((topic, status), n) in outbound.snapshot() {
            let counter = m.outbound.get_or_create(&StatusLabels { topic, status });
            counter.inc_by(n.saturating_sub(counter.get()));
        }
    }
    let serving = app.ops.serving();
    m.handler_info.clear();
    for (topic, version) in &serving.handlers {
        m.handler_info
            .get_or_create(&VersionLabels {
                topic: topic.clone(),
                version: version.clone(),
            })
            .set(1);
    }
    let text = m.encode();
    drop(read_at);
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if exposition::wants_openmetrics(accept) {
        ([(header::CONTENT_TYPE, exposition::OPENMETRICS)], text)
    } else {
        (
            [(header::CONTENT_TYPE, exposition::CLASSIC)],
            exposition::classic(&text),
        )
    }
}

/// Each count a topic's rollout keeps in Redis, and the `result` label it is
/// exposed under.
const ROLLOUT_TOTALS: [(&str, &str); 5] = [
    ("promoted", "promoted"),
    ("rolled_back", "rolled_back"),
    ("aborted", "aborted"),
    ("pins", "pinned"),
    ("unpins", "unpinned"),
];

/// Read the depth of every topic, the paused flags, the live runners, the
/// rollouts' and the flows' counts.
async fn refresh(app: &App) {
    let m = &app.ops.metrics;
    let o = match app.ops.overview().await {
        Ok(o) => o,
        Err(e) => {
            tracing::debug!("metrics: redis unreachable: {e}");
            m.redis_up.set(0);
            return;
        }
    };
    m.redis_up.set(1);
    m.runners.set(o.runners.len() as i64);
    let q = &app.ops.queue;
    let keys: Vec<_> = o.topics.iter().map(|(topic, _)| q.keys(topic)).collect();
    let rollouts = futures::future::join_all(keys.iter().map(|k| q.rollouts().get(k))).await;
    for ((topic, _), rollout) in o.topics.iter().zip(rollouts) {
        match rollout {
            Ok(r) => count_rollouts(m, topic, &r),
            Err(e) => tracing::debug!(topic, "metrics: rollout unreadable: {e}"),
        }
    }
    match q.flows().stats().await {
        Ok(f) => {
            m.flows_open.set(f.open() as i64);
            m.flows_completed
                .inc_by(f.completed.saturating_sub(m.flows_completed.get()));
            m.flows_failed
                .inc_by(f.failed.saturating_sub(m.flows_failed.get()));
        }
        Err(e) => tracing::debug!("metrics: flow counts unreadable: {e}"),
    }
    count_keys(app).await;
    count_scale(app).await;
    m.jobs.clear();
    m.paused.clear();
    for (topic, s) in o.topics {
        for (state, n) in [
            ("scheduled", s.scheduled),
            ("ready", s.ready),
            ("running", s.running),
            ("dead", s.dead),
            ("suspended", s.suspended),
        ] {
            m.jobs
                .get_or_create(&StateLabels {
                    topic: topic.clone(),
                    state,
                })
                .set(n as i64);
        }
        m.paused
            .get_or_create(&TopicLabel { topic })
            .set(i64::from(s.paused));
    }
}

/// How many top keys of each topic with fairness get series of their own.
const TOP_KEYS: usize = 10;

/// The top tenant keys of each topic with fairness, the rest as `other`:
/// never one series per tenant.
async fn count_keys(app: &App) {
    let m = &app.ops.metrics;
    m.key_queued.clear();
    m.key_running.clear();
    m.key_cpu.clear();
    let serving = app.ops.serving();
    let now = crate::clock::now_ms();
    for topic in serving
        .config
        .topics
        .iter()
        .filter(|t| t.fairness.is_some())
    {
        let q = &app.ops.queue;
        let stats = match q.tenants().stats(&q.keys(&topic.name), now, TOP_KEYS).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(topic = %topic.name, "metrics: key counts unreadable: {e}");
                continue;
            }
        };
        let label = |key: &str| KeyLabels {
            topic: topic.name.clone(),
            key: key.to_owned(),
        };
        let (mut queued, mut running, mut cpu) = (0, 0, 0);
        for k in stats.top.iter().take(TOP_KEYS) {
            m.key_queued
                .get_or_create(&label(&k.key))
                .set(k.queued as i64);
            m.key_running
                .get_or_create(&label(&k.key))
                .set(k.running as i64);
            m.key_cpu
                .get_or_create(&label(&k.key))
                .set((k.cpu_us / 1000) as i64);
            queued += k.queued;
            running += k.running;
            cpu += k.cpu_us;
        }
        let other = label("other");
        m.key_queued
            .get_or_create(&other)
            .set(stats.queued.saturating_sub(queued) as i64);
        m.key_running
            .get_or_create(&other)
            .set(stats.running.saturating_sub(running) as i64);
        m.key_cpu
            .get_or_create(&other)
            .set((stats.cpu_us.saturating_sub(cpu) / 1000) as i64);
    }
}

/// The autoscaling gauges: one `scale.lua` read per topic (`scale.rs`).
async fn count_scale(app: &App) {
    let m = &app.ops.metrics.scale;
    let view = match super::scale::read(&app.ops).await {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!("metrics: scale unreadable: {e}");
            return;
        }
    };
    m.clear();
    m.fleet.set(i64::from(view.suggested_runners));
    for t in view.topics {
        let label = TopicLabel { topic: t.topic };
        let age = t.load.oldest_ready_age_ms.unwrap_or(0);
        m.oldest_ready
            .get_or_create(&label)
            .set(age as f64 / 1000.0);
        m.due_next_minute
            .get_or_create(&label)
            .set(t.load.due_soon as i64);
        if let Some(us) = t.attempt_us {
            m.attempt.get_or_create(&label).set(us as f64 / 1e6);
        }
        m.suggested
            .get_or_create(&label)
            .set(i64::from(t.suggested_runners));
    }
}

/// Bring `topic`'s rollout counters up to the totals Redis keeps (counted
/// there once, whichever process made the change); never down.
fn count_rollouts(m: &crate::metrics::Metrics, topic: &str, r: &Rollout) {
    for (total, result) in ROLLOUT_TOTALS {
        let n = r.totals.get(total).copied().unwrap_or(0);
        let counter = m.rollouts.get_or_create(&RolloutLabels {
            topic: topic.to_owned(),
            result,
        });
        counter.inc_by(n.saturating_sub(counter.get()));
    }
}
