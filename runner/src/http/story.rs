//! What the console draws beyond a job's state: its logs
//! (`GET /api/topics/{topic}/jobs/{id}/logs`), topics' history by the
//! minute (`GET /api/history`), the recent flows (`GET /api/flows`).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, AppState, topic_named};
use crate::clock::now_ms;
use crate::redis::flow::RecentFlow;
use crate::redis::{JobLogs, MINUTES_KEEP, Minute, check_id};

/// `GET /api/topics/{topic}/jobs/{id}/logs`: what the job's handler logged
/// in each attempt (its log functions, stdout, stderr), oldest first; a
/// live or dead job's, or those kept with its end.
#[utoipa::path(
    get,
    path = "/topics/{topic}/jobs/{id}/logs",
    operation_id = "get_job_logs",
    tag = "jobs",
    params(
        super::openapi::JobPath,
    ),
    responses(
        (status = 200, description = "its lines, and the bytes dropped to keep within `logs.keep`", body = JobLogs),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn logs(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<JobLogs>, ApiError> {
    topic_named(&app.ops.serving(), &name)?;
    check_id(&id).map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "id", why))?;
    let q = &app.ops.queue;
    match q.logs(&q.keys(&name), &id).await? {
        Some(logs) => Ok(Json(logs)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no logs of job {id:?} in {name} (it logged nothing, its topic keeps none, it acked on a topic without results, or it is gone)"
            ),
        )),
    }
}

/// `?topics=a,b&since=3h` of `GET /api/history`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryQuery {
    topics: Option<String>,
    #[serde(default = "three_hours")]
    since: String,
}

fn three_hours() -> String {
    "3h".into()
}

/// Most topics one history call reads.
const HISTORY_TOPICS: usize = 100;

/// Topics' history by the minute.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct History {
    /// How far back.
    since_ms: u64,
    /// Topic → its minutes that hold anything, oldest first.
    topics: std::collections::BTreeMap<String, Vec<Minute>>,
}

/// `GET /api/history?topics=a,b&since=3h`: each topic's minutes (what every
/// runner did: acks, failures, dead letters, CPU, starts and their lateness;
/// the counts once a minute), kept 25 hours; every configured topic when
/// `topics` is left out (at most 100).
#[utoipa::path(
    get,
    path = "/history",
    operation_id = "history",
    tag = "operate",
    params(
        ("topics" = Option<String>, Query, description = "comma-separated topics (every configured one)"),
        ("since" = Option<String>, Query, description = "this far back, at most 24h (3h)"),
    ),
    responses(
        (status = 200, description = "each topic's minutes", body = History),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn history(
    State(app): AppState,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<History>, ApiError> {
    let Query(query) = query?;
    let bad = |field: &str, why: String| ApiError::field(StatusCode::BAD_REQUEST, field, why);
    let since =
        crate::config::parse_duration(&query.since).map_err(|e| bad("since", e.to_string()))?;
    if since > MINUTES_KEEP - std::time::Duration::from_secs(3600) {
        return Err(bad(
            "since",
            "at most 24h (minutes are kept 25 hours)".into(),
        ));
    }
    let serving = app.ops.serving();
    let names: Vec<String> = match &query.topics {
        Some(list) => list
            .split(',')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        None => serving
            .config
            .topics
            .iter()
            .map(|t| t.name.clone())
            .collect(),
    };
    if names.len() > HISTORY_TOPICS {
        return Err(bad("topics", format!("at most {HISTORY_TOPICS} a call")));
    }
    for name in &names {
        topic_named(&serving, name)?;
    }
    let now = now_ms();
    let since_ms = now.saturating_sub(crate::clock::millis(since));
    let q = &app.ops.queue;
    let read = names.iter().map(|n| q.minutes(n, since_ms, now));
    let minutes = futures::future::try_join_all(read).await?;
    Ok(Json(History {
        since_ms,
        topics: names.into_iter().zip(minutes).collect(),
    }))
}

/// `?before=&limit=` of `GET /api/flows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FlowsQuery {
    before: Option<u64>,
    #[serde(default = "fifty")]
    limit: usize,
}

fn fifty() -> usize {
    50
}

/// The recent flows.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct FlowList {
    /// Newest first.
    flows: Vec<RecentFlow>,
}

/// `GET /api/flows?before=&limit=50`: the flows created most recently (the
/// newest 1,000 are listed), newest first, with how far each got; `before`
/// (ms) pages back.
#[utoipa::path(
    get,
    path = "/flows",
    operation_id = "list_flows",
    tag = "flows",
    params(
        ("before" = Option<u64>, Query, description = "only flows created before this (ms): the last `created_ms` of the page before"),
        ("limit" = Option<usize>, Query, description = "at most this many, 1 to 500 (50)"),
    ),
    responses(
        (status = 200, description = "recent flows, newest first", body = FlowList),
        super::openapi::BadInput,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn flows(
    State(app): AppState,
    query: Result<Query<FlowsQuery>, QueryRejection>,
) -> Result<Json<FlowList>, ApiError> {
    let Query(query) = query?;
    if query.limit == 0 || query.limit > 500 {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "limit",
            "between 1 and 500",
        ));
    }
    let flows = app
        .ops
        .queue
        .flows()
        .recent(query.before, query.limit)
        .await?;
    Ok(Json(FlowList { flows }))
}
