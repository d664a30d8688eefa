//! Results, progress and waiting over HTTP: a job's kept end
//! (`GET .../result`, with an optional `?wait=`), its events as Server-Sent
//! Events (`GET .../events`), and the wait behind `POST .../jobs?wait=`.
//! Every waiter shares the process's [`Waiters`]: one subscription per
//! topic, whatever their number.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::answers::{EndedNow, StillLive};
use super::{ApiError, AppState, topic_named};
use crate::config::parse_duration;
use crate::redis::{JobEvent, Standing, TopicKeys, Waited, Waiters, check_id};

/// The longest wait a request may ask for: an HTTP request held longer
/// meets proxies' idle timeouts; wait again instead.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(300);

/// `?wait=30s`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitQuery {
    wait: Option<String>,
}

impl WaitQuery {
    /// The wait asked for, if any, checked.
    pub(super) fn time(&self) -> Result<Option<Duration>, ApiError> {
        let Some(text) = &self.wait else {
            return Ok(None);
        };
        let bad = |why: String| ApiError::field(StatusCode::BAD_REQUEST, "wait", why);
        let d = parse_duration(text).map_err(|e| bad(e.to_string()))?;
        if d > MAX_WAIT {
            return Err(bad(format!(
                "at most {}; wait again for longer",
                humantime::format_duration(MAX_WAIT)
            )));
        }
        Ok(Some(d))
    }
}

/// The keys of topic `name` if it keeps results (or this process's
/// configuration names no topics), else why it cannot be waited on.
pub(super) fn keeping(app: &super::App, name: &str, id: &str) -> Result<TopicKeys, ApiError> {
    if let Some(topic) = topic_named(&app.ops.serving(), name)?
        && topic.results.is_none()
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "topic {name:?} keeps no results, so its jobs' ends cannot be read or waited for: add `results = {{ keep = \"24h\" }}` to its [[topic]] in queues.toml"
            ),
        ));
    }
    check_id(id).map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "id", why))?;
    Ok(app.ops.queue.keys(name))
}

/// Wait up to `time` for job `id`: 200 with its end, 202 with its id if it
/// is still live, 404 if there is no such job. `status` is how its enqueue
/// went, when this follows one.
pub(super) async fn answer_when_ended(
    waiters: &Waiters,
    keys: &TopicKeys,
    id: &str,
    time: Duration,
    status: Option<&'static str>,
) -> Result<Response, ApiError> {
    Ok(match waiters.wait_for(keys, id, time).await? {
        Waited::Ended(end) => {
            let end = end.shown(id);
            (StatusCode::OK, Json(EndedNow { end, status })).into_response()
        }
        Waited::TimedOut => {
            let live = StillLive {
                id: id.to_owned(),
                state: "live",
                waited_ms: Some(time.as_millis() as u64),
                progress: None,
                status,
            };
            (StatusCode::ACCEPTED, Json(live)).into_response()
        }
        Waited::Unknown => return Err(no_such_job(&keys.topic, id)),
    })
}

fn no_such_job(topic: &str, id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no job {id:?} in {topic}: never enqueued, or its end is no longer kept (results.keep)"
        ),
    )
}

/// `GET /api/topics/{topic}/jobs/{id}/result[?wait=30s]`: the job's end
/// (200), or where it stands while live (202), waiting for it first if asked.
#[utoipa::path(
    get,
    path = "/topics/{topic}/jobs/{id}/result",
    operation_id = "get_result",
    tag = "jobs",
    params(
        super::openapi::JobPath,
        ("wait" = Option<String>, Query, description = "wait up to this long for the end (\"30s\", at most 5m)"),
    ),
    responses(
        (status = 200, description = "its kept end", body = EndedNow),
        (status = 202, description = "it still lives (with its progress)", body = StillLive),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn result(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    // a query that does not parse answers as any bad input: JSON naming it
    let Query(query) = query?;
    let keys = keeping(&app, &name, &id)?;
    if let Some(time) = query.time()? {
        return answer_when_ended(&app.ops.waiters, &keys, &id, time, None).await;
    }
    match app.ops.queue.standing(&keys, &id).await? {
        Standing::Ended(end) => {
            let end = end.shown(&id);
            Ok((StatusCode::OK, Json(EndedNow { end, status: None })).into_response())
        }
        Standing::Live { running, progress } => {
            let live = StillLive {
                id,
                state: if running { "running" } else { "waiting" },
                waited_ms: None,
                progress,
                status: None,
            };
            Ok((StatusCode::ACCEPTED, Json(live)).into_response())
        }
        Standing::InFlow { .. } => {
            let live = StillLive {
                id,
                state: "waiting_in_flow",
                waited_ms: None,
                progress: None,
                status: None,
            };
            Ok((StatusCode::ACCEPTED, Json(live)).into_response())
        }
        Standing::Unknown => Err(no_such_job(&name, &id)),
    }
}

/// `GET /api/topics/{topic}/jobs/{id}/events`: Server-Sent Events until the
/// job ends: `progress` (the latest report, then each new one), `attempt`
/// (a failed attempt, with when the next is due), `end` (its kept end; the
/// stream closes).
#[utoipa::path(
    get,
    path = "/topics/{topic}/jobs/{id}/events",
    operation_id = "job_events",
    tag = "jobs",
    params(
        super::openapi::JobPath,
    ),
    responses(
        (status = 200, description = "Server-Sent Events until it ends: `progress`, `attempt`, `end`", content_type = "text/event-stream", body = super::answers::JobEventSse),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn events(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let keys = keeping(&app, &name, &id)?;
    let watch = app.ops.waiters.watch(&keys, &id).await?;
    let first = match watch.standing() {
        Standing::Unknown => return Err(no_such_job(&name, &id)),
        Standing::Ended(end) => Some(sse("end", &end.to_json(&id))),
        Standing::Live {
            progress: Some(p), ..
        } => Some(sse("progress", &json!(p))),
        Standing::Live { .. } | Standing::InFlow { .. } => None,
    };
    let ended = !matches!(
        watch.standing(),
        Standing::Live { .. } | Standing::InFlow { .. }
    );
    let stream = futures::stream::unfold(
        (Some(watch), first, ended, id),
        |(watch, first, ended, id)| async move {
            if let Some(event) = first {
                return Some((Ok::<_, Infallible>(event), (watch, None, ended, id)));
            }
            let mut watch = watch.filter(|_| !ended)?;
            let event = match watch.next().await {
                Ok(Some(JobEvent::Progress(p))) => sse("progress", &json!(p)),
                Ok(Some(JobEvent::Attempt(a))) => sse("attempt", &a),
                Ok(Some(JobEvent::End(end))) => {
                    return Some((Ok(sse("end", &end.to_json(&id))), (None, None, true, id)));
                }
                Ok(None) => return None,
                Err(e) => {
                    let e = sse("error", &json!({ "error": e.to_string() }));
                    return Some((Ok(e), (None, None, true, id)));
                }
            };
            Some((Ok(event), (Some(watch), None, false, id)))
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn sse(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}
