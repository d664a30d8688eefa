//! What an autoscaler reads: `GET /api/scale` (every topic and the runners
//! the namespace needs) and `GET /api/topics/{topic}/scale` (one topic),
//! also exposed as `hourglass_scale_*` gauges in `/metrics`. One read a
//! topic (`scale.lua`, [`crate::redis::Queue::load`]), one for the live
//! runners' heartbeats (their recent attempt times), and for a topic with
//! fairness one for its top keys.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, AppState, Ops, topic_named};
use crate::clock::now_ms;
use crate::config::TopicConfig;
use crate::redis::scale::{self, Capacity, HORIZON_MS};
use crate::redis::{Load, QueueError, RunnerInfo};

/// Top keys of a topic with fairness listed with their backlog.
const TOP_KEYS: usize = 10;

/// The namespace's load: each topic's and the runners it takes.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ScaleView {
    /// Runners to run now for every topic together: at least the most any
    /// one topic asks for (one for a topic with work whose attempt time is
    /// not known yet), and enough for all topics' busy slots within a
    /// runner's `[runner] concurrency`. Point an autoscaler here.
    pub(super) suggested_runners: u32,
    /// Runners alive now (their heartbeats).
    pub(super) runners: usize,
    /// How far ahead jobs count as work: 60,000 ms.
    pub(super) horizon_ms: u64,
    /// Each topic of queues.toml (or, without topics, those the runners serve).
    pub(super) topics: Vec<TopicScale>,
}

/// One topic's load and the runners it takes.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TopicScale {
    pub(super) topic: String,
    /// What Redis holds: ready, the oldest ready job's age, running, suspended,
    /// due within the horizon, paused.
    #[serde(flatten)]
    pub(super) load: Load,
    /// Attempts of the topic one runner runs at once.
    pub(super) concurrency: u32,
    /// The recent mean wall time of an attempt, µs, over the live runners
    /// that report it (none: no runner ran the topic lately).
    pub(super) attempt_us: Option<u64>,
    /// Runners this topic alone needs within the horizon.
    pub(super) suggested_runners: u32,
    /// For a topic with fairness: the keys with the most jobs queued (at
    /// most 10), and what the rest hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) keys: Option<KeysBacklog>,
    /// What one runner offers it (its concurrency and rate).
    #[serde(skip)]
    capacity: Capacity,
}

/// A fair topic's backlog per top key.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KeysBacklog {
    /// The top keys, most jobs queued first.
    pub(super) top: Vec<KeyBacklog>,
    /// Jobs queued under every other key.
    pub(super) other: u64,
    /// Keys with jobs queued.
    pub(super) keys_with_jobs: u64,
}

/// One tenant key's backlog.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KeyBacklog {
    key: String,
    /// Jobs due and waiting their turn.
    queued: u64,
    running: u64,
}

/// `GET /api/scale`: every topic's load and the runners to run.
#[utoipa::path(
    get,
    path = "/scale",
    operation_id = "get_scale",
    tag = "scale",
    responses(
        (status = 200, description = "each topic's load and the runners the namespace needs", body = ScaleView),
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn all(State(app): AppState) -> Result<Json<ScaleView>, ApiError> {
    Ok(Json(read(&app.ops).await?))
}

/// `GET /api/topics/{topic}/scale`: one topic's load and the runners it takes.
#[utoipa::path(
    get,
    path = "/topics/{topic}/scale",
    operation_id = "get_topic_scale",
    tag = "scale",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "the topic's load and the runners it takes", body = TopicScale),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn topic(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<TopicScale>, ApiError> {
    let serving = app.ops.serving();
    let config = topic_named(&serving, &name)?;
    let q = &app.ops.queue;
    let now = now_ms();
    let runners = q.runners().list(now).await?;
    let default = serving.config.runner.concurrency;
    Ok(Json(
        one(&app.ops, &name, config.as_ref(), default, &runners, now).await?,
    ))
}

/// Every topic's load, and the runners they take together.
pub(super) async fn read(ops: &Ops) -> Result<ScaleView, QueueError> {
    let serving = ops.serving();
    let q = &ops.queue;
    let now = now_ms();
    let runners = q.runners().list(now).await?;
    let per_runner = serving.config.runner.concurrency;
    let names = super::topic_names(&serving, &runners);
    let topics = futures::future::try_join_all(names.iter().map(|name| {
        let config = serving.config.topic(name);
        one(ops, name, config, per_runner, &runners, now)
    }))
    .await?;
    // the topics share a runner's concurrency
    // (a topic whose attempt time is unknown asks for one runner: `most`)
    let slots: f64 = topics.iter().filter_map(|t| t.slots()).sum();
    let together = scale::runners_for(slots, per_runner);
    let most = topics
        .iter()
        .map(|t| t.suggested_runners)
        .max()
        .unwrap_or(0);
    Ok(ScaleView {
        suggested_runners: together.max(most),
        runners: runners.len(),
        horizon_ms: HORIZON_MS,
        topics,
    })
}

impl TopicScale {
    /// The busy slots it takes over the horizon, if its attempt time is known.
    fn slots(&self) -> Option<f64> {
        scale::slots(&self.load, self.capacity, self.attempt_us, HORIZON_MS)
    }
}

async fn one(
    ops: &Ops,
    name: &str,
    config: Option<&TopicConfig>,
    per_runner: u32,
    runners: &[RunnerInfo],
    now: u64,
) -> Result<TopicScale, QueueError> {
    let q = &ops.queue;
    let keys = q.keys(name);
    let load = q.load(&keys, now, HORIZON_MS).await?;
    let capacity = Capacity {
        concurrency: config.map_or(per_runner, |t| t.concurrency.min(per_runner)),
        rate_per_s: config
            .and_then(|t| t.rate.as_ref())
            .map(|r| f64::from(r.limit) / r.per.as_secs_f64().max(0.001)),
    };
    let attempt_us = attempt_time(runners, name);
    let fair = config.is_some_and(|t| t.fairness.is_some());
    let keys = match fair {
        true => {
            let stats = q.tenants().stats(&keys, now, TOP_KEYS).await?;
            let top: Vec<KeyBacklog> = stats
                .top
                .into_iter()
                .filter(|k| k.queued > 0 || k.running > 0)
                .take(TOP_KEYS)
                .map(|k| KeyBacklog {
                    key: k.key,
                    queued: k.queued,
                    running: k.running,
                })
                .collect();
            let listed: u64 = top.iter().map(|k| k.queued).sum();
            Some(KeysBacklog {
                other: stats.queued.saturating_sub(listed),
                keys_with_jobs: stats.keys_with_jobs,
                top,
            })
        }
        false => None,
    };
    Ok(TopicScale {
        topic: name.to_owned(),
        suggested_runners: scale::suggest(&load, capacity, attempt_us, HORIZON_MS),
        load,
        concurrency: capacity.concurrency,
        attempt_us,
        keys,
        capacity,
    })
}

/// The mean of the live runners' recent attempt times for `topic`.
fn attempt_time(runners: &[RunnerInfo], topic: &str) -> Option<u64> {
    let times: Vec<u64> = runners
        .iter()
        .filter_map(|r| r.meters.get(topic).and_then(|m| m.attempt_us))
        .collect();
    match times.len() {
        0 => None,
        n => Some(times.iter().sum::<u64>() / n as u64),
    }
}
