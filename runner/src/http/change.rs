//! The routes that change jobs and topics: enqueue, cancel, pause and
//! resume (dead letters in `dead.rs`, handler versions in `rollout.rs`).
//! Each needs the token when one is configured.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::job_in::JobIn;
use super::views::{EnqueuedMany, EnqueuedOne, JobCancelled, Paused};
use super::wait::{WaitQuery, answer_when_ended, keeping};
use super::{ApiError, AppState, topic_named};
use crate::clock::now_ms;
use crate::redis::{Cancelled, Enqueued, TopicKeys, TraceContext, VersionInfo, check_id};
use crate::telemetry::spans;
use axum::http::HeaderMap;

/// Most jobs one bulk call takes.
pub const MAX_BULK: usize = 10_000;

/// Parse `value` as `T`, naming the failing field's path under `prefix`.
pub(super) fn parse<T: serde::de::DeserializeOwned>(
    value: Value,
    prefix: &str,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        // serde places a missing field at the object that lacks it: name
        // the field itself (`payload`, `[3].payload`)
        let why = e.inner().to_string();
        let missing = why
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name);
        let field = match (prefix, path.as_str(), missing) {
            (p, ".", Some(name)) => format!("{p}{name}"),
            (p, ".", None) => p.trim_end_matches('.').to_owned(),
            (p, path, Some(name)) => format!("{p}{path}.{name}"),
            (p, path, None) => format!("{p}{path}"),
        };
        let field = if field.is_empty() {
            "body".to_owned()
        } else {
            field
        };
        ApiError::field(StatusCode::BAD_REQUEST, field, e.into_inner().to_string())
    })
}

fn status(e: &Enqueued) -> EnqueuedOne {
    let (status, replaced) = match e {
        Enqueued::New(_) => ("new", None),
        Enqueued::Duplicate(_) => ("duplicate", None),
        Enqueued::Replaced(_) => ("replaced", None),
        Enqueued::Running(_) => ("running", Some(false)),
        Enqueued::Journaled(_) => ("journaled", Some(false)),
    };
    EnqueuedOne {
        id: e.id().to_owned(),
        status,
        replaced,
    }
}

/// What an enqueue takes: one job, or an array of up to 10,000 (the
/// description's only; the handler reads the body itself).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum JobOrJobs {
    One(Box<JobIn>),
    Many(Vec<JobIn>),
}

/// `POST /api/topics/{topic}/jobs`: one job (an object) or many (an array,
/// up to 10,000), answered per job with its id and `new` or `duplicate`.
/// `?wait=30s` (one job, a topic that keeps results) answers when the job
/// ends (200 with its end) or the time runs out (202 with its id).
#[utoipa::path(
    post,
    path = "/topics/{topic}/jobs",
    operation_id = "enqueue",
    tag = "jobs",
    params(
        super::openapi::TopicPath,
        ("wait" = Option<String>, Query, description = "one job, a topic with `results`: answer with its end once it ends, up to this long (\"30s\")"),
    ),
    request_body(content = JobOrJobs, description = "one job (an object) or up to 10,000 (an array)"),
    responses(
        (status = 201, description = "new (one job)", body = super::views::EnqueuedOne,
            links(
                ("get_job" = (operation_id = "get_job", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/id")))),
                ("get_result" = (operation_id = "get_result", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/id")))),
                ("job_events" = (operation_id = "job_events", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/id")))),
                ("cancel_job" = (operation_id = "cancel_job", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/id")))),
                ("wake_job" = (operation_id = "wake_job", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/id")))),
                ("send_signal" = (operation_id = "send_signal", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/id"), ("name" = "go")))),
            ),
        ),
        (status = 200, description = "a duplicate or a replace (one job), the answers of many, or with `wait` its end", body = super::openapi::EnqueuedAny),
        (status = 202, description = "`wait` ran out while the job lives", body = super::answers::StillLive),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn enqueue(
    State(app): AppState,
    Path(name): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    // a query that does not parse answers as any bad input: JSON naming it
    let Query(query) = query?;
    let serving = app.ops.serving();
    let topic = topic_named(&serving, &name)?;
    let wait = query.time()?;
    if wait.is_some() && topic.is_some_and(|t| t.results.is_none()) {
        // the same refusal as the result and events routes
        keeping(&app, &name, "-")?;
    }
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let max_payload = serving.config.runner.max_payload;
    let now = now_ms();
    let (jobs, one) = match body {
        Value::Array(items) => {
            if items.is_empty() || items.len() > MAX_BULK {
                return Err(ApiError::field(
                    StatusCode::BAD_REQUEST,
                    "body",
                    format!("{} jobs; send 1 to {MAX_BULK} per call", items.len()),
                ));
            }
            let mut jobs = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let path = format!("[{i}].");
                let job: JobIn = parse(item, &path)?;
                jobs.push(job.into_new(&path, now, max_payload)?);
            }
            (jobs, false)
        }
        value @ Value::Object(_) => (
            vec![parse::<JobIn>(value, "")?.into_new("", now, max_payload)?],
            true,
        ),
        _ => {
            return Err(ApiError::field(
                StatusCode::BAD_REQUEST,
                "body",
                "send a job object or an array of them",
            ));
        }
    };
    if wait.is_some() && !one {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "wait",
            "waits for one job: send an object, not an array",
        ));
    }
    // the caller's trace: this enqueue is a span in it (when spans are
    // exported), and the jobs' attempts continue from there
    let incoming = trace_of(&headers);
    let span = app.ops.telemetry.begin(incoming.as_ref());
    let trace = span.as_ref().map(|s| s.trace_context()).or(incoming);
    let mut jobs = jobs;
    if let Some(trace) = &trace {
        for job in jobs.iter_mut() {
            job.trace = Some(trace.clone());
        }
    }
    let q = app.ops.queue.clone().with_max_payload(max_payload);
    let keys = q.keys(&name);
    if jobs.iter().any(|j| j.version.is_some()) {
        let (_, kept) = q.rollouts().versions(&keys).await?;
        for (i, job) in jobs.iter().enumerate() {
            if let Some(version) = &job.version {
                let field = if one {
                    "version".to_owned()
                } else {
                    format!("[{i}].version")
                };
                check_kept(&name, version, &kept, &field)?;
            }
        }
    }
    let answers = q.enqueue(&keys, &jobs, now).await;
    if let Some(span) = &span {
        app.ops
            .telemetry
            .end(span, spans::enqueue(&name, jobs.len(), &answers));
    }
    let answers = answers?;
    let new = answers
        .iter()
        .filter(|a| matches!(a, Enqueued::New(_)))
        .count();
    app.ops
        .metrics
        .enqueued
        .get_or_create(&crate::metrics::TopicLabel {
            topic: name.clone(),
        })
        .inc_by(new as u64);
    if one {
        let code = if new == 1 {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        let answer = status(&answers[0]);
        if let Some(time) = wait {
            let (id, status) = (answers[0].id(), Some(answer.status));
            return answer_when_ended(&app.ops.waiters, &keys, id, time, status).await;
        }
        return Ok((code, Json(answer)).into_response());
    }
    let many = EnqueuedMany {
        new,
        duplicate: answers.len() - new,
        jobs: answers.iter().map(status).collect(),
    };
    Ok((StatusCode::OK, Json(many)).into_response())
}

/// The W3C trace context of a request's `traceparent` / `tracestate`
/// headers; one that does not parse is ignored, as the specification asks.
fn trace_of(headers: &HeaderMap) -> Option<TraceContext> {
    let parent = headers.get("traceparent")?.to_str().ok()?;
    let state = headers.get("tracestate").and_then(|s| s.to_str().ok());
    TraceContext::parse(parent, state).ok()
}

/// Refuse `version` (given at `field`) unless `topic` keeps it: a job pinned
/// to a version no runner has would only fail.
pub(super) fn check_kept(
    topic: &str,
    version: &str,
    kept: &[VersionInfo],
    field: &str,
) -> Result<(), ApiError> {
    if kept.iter().any(|v| v.version == version) {
        return Ok(());
    }
    let list: Vec<&str> = kept.iter().map(|v| v.version.as_str()).collect();
    Err(ApiError::field(
        StatusCode::BAD_REQUEST,
        field,
        format!(
            "topic {topic:?} keeps no version {version} (kept: {})",
            if list.is_empty() {
                "none yet".to_owned()
            } else {
                list.join(", ")
            }
        ),
    ))
}

pub(super) fn checked(
    app: &super::App,
    name: &str,
    id: Option<&str>,
) -> Result<TopicKeys, ApiError> {
    topic_named(&app.ops.serving(), name)?;
    if let Some(id) = id {
        check_id(id).map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "id", why))?;
    }
    Ok(app.ops.queue.keys(name))
}

/// `DELETE /api/topics/{topic}/jobs/{id}`: delete the job wherever it is.
#[utoipa::path(
    delete,
    path = "/topics/{topic}/jobs/{id}",
    operation_id = "cancel_job",
    tag = "jobs",
    params(
        super::openapi::JobPath,
    ),
    responses(
        (status = 200, description = "cancelled", body = super::views::JobCancelled),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn cancel(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<JobCancelled>, ApiError> {
    let keys = checked(&app, &name, Some(&id))?;
    let keep = topic_named(&app.ops.serving(), &name)?
        .and_then(|t| t.results)
        .map(|r| r.keep);
    let was = app
        .ops
        .queue
        .admin()
        .cancel(&keys, std::slice::from_ref(&id), now_ms(), keep)
        .await?;
    let was = match was.first().copied().flatten() {
        Some(Cancelled::Pending) => "waiting",
        Some(Cancelled::Running) => "running (the attempt finishes; its outcome is discarded)",
        Some(Cancelled::Dead) => "dead",
        None => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no job {id:?} in {name}"),
            ));
        }
    };
    Ok(Json(JobCancelled {
        id,
        cancelled: true,
        was: was.to_owned(),
    }))
}

async fn set_paused(app: &super::App, name: &str, paused: bool) -> Result<Json<Paused>, ApiError> {
    let keys = checked(app, name, None)?;
    let changed = app.ops.queue.admin().set_paused(&keys, paused).await?;
    Ok(Json(Paused {
        topic: name.to_owned(),
        paused,
        changed,
    }))
}

/// `POST /api/topics/{topic}/pause`: stop claiming on every runner.
#[utoipa::path(
    post,
    path = "/topics/{topic}/pause",
    operation_id = "pause_topic",
    tag = "topics",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "paused", body = super::views::Paused),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn pause(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Paused>, ApiError> {
    set_paused(&app, &name, true).await
}

/// `POST /api/topics/{topic}/resume`: claim again.
#[utoipa::path(
    post,
    path = "/topics/{topic}/resume",
    operation_id = "resume_topic",
    tag = "topics",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "resumed", body = super::views::Paused),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn resume(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Paused>, ApiError> {
    set_paused(&app, &name, false).await
}
