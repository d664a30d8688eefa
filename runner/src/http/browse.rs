//! A topic's jobs by state, a page at a time from a cursor
//! (`GET /api/topics/{topic}/jobs?state=dead`), and what the console does to
//! a selection of them (`POST /api/topics/{topic}/bulk`: retry, cancel,
//! purge), each one call a script can make too.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, AppState, topic_named};
use crate::clock::now_ms;
use crate::redis::{BROWSE_MOST, Browse, BrowsePage, BrowseState, check_id};

/// `?state=&cursor=&limit=&prefix=&key=&version=&error=` of a listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: BrowseState,
    cursor: Option<String>,
    #[serde(default = "fifty")]
    limit: usize,
    prefix: Option<String>,
    key: Option<String>,
    version: Option<String>,
    error: Option<String>,
}

fn fifty() -> usize {
    50
}

/// `GET /api/topics/{topic}/jobs?state=dead`: a page of the topic's jobs in
/// one state, with the cursor of the next; filters look at most 5,000 jobs
/// a page (a page that found fewer than `limit` may still have a `next`).
#[utoipa::path(
    get,
    path = "/topics/{topic}/jobs",
    operation_id = "list_jobs",
    tag = "jobs",
    params(
        super::openapi::TopicPath,
        ("state" = BrowseState, Query, description = "scheduled, ready, running, suspended, dead or ended"),
        ("cursor" = Option<String>, Query, description = "the `next` of the page before"),
        ("limit" = Option<usize>, Query, description = "at most this many, 1 to 500 (50)"),
        ("prefix" = Option<String>, Query, description = "only ids starting so"),
        ("key" = Option<String>, Query, description = "only this tenant key (`-`: jobs without one)"),
        ("version" = Option<String>, Query, description = "only jobs whose last attempt ran on this handler version"),
        ("error" = Option<String>, Query, description = "only jobs whose failure holds this text"),
    ),
    responses(
        (status = 200, description = "a page of jobs and the next page's cursor", body = BrowsePage),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn list(
    State(app): AppState,
    Path(name): Path<String>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<BrowsePage>, ApiError> {
    let Query(q) = query?;
    topic_named(&app.ops.serving(), &name)?;
    if q.limit == 0 || q.limit > BROWSE_MOST {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "limit",
            format!("between 1 and {BROWSE_MOST}"),
        ));
    }
    if let Some(version) = &q.version {
        crate::redis::check_version(version)
            .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "version", why))?;
    }
    if let Some(key) = q.key.as_deref().filter(|k| *k != "-") {
        crate::redis::check_key(key)
            .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "key", why))?;
    }
    for (field, value) in [("prefix", &q.prefix), ("error", &q.error)] {
        if value.as_ref().is_some_and(|v| v.len() > 512) {
            return Err(ApiError::field(
                StatusCode::BAD_REQUEST,
                field,
                "at most 512 bytes",
            ));
        }
    }
    let browse = Browse {
        cursor: q.cursor,
        limit: q.limit,
        prefix: q.prefix.filter(|p| !p.is_empty()),
        key: q.key.filter(|k| !k.is_empty()),
        version: q.version,
        error: q.error.filter(|e| !e.is_empty()),
    };
    let queue = &app.ops.queue;
    let page = queue
        .browse(&queue.keys(&name), q.state, &browse, now_ms())
        .await
        .map_err(|e| match e {
            crate::redis::QueueError::Invalid(why) => {
                ApiError::field(StatusCode::BAD_REQUEST, "cursor", why)
            }
            e => e.into(),
        })?;
    Ok(Json(page))
}

/// What to do to a selection of a topic's jobs.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Action {
    /// Run dead letters again (due now, attempts reset).
    Retry,
    /// Delete jobs wherever they are (a running one finishes, its outcome discarded).
    Cancel,
    /// Delete dead letters for good.
    Purge,
}

/// `{"action": "retry", "ids": [...]}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkIn {
    action: Action,
    /// 1 to 1,000 job ids.
    ids: Vec<String>,
}

/// What a bulk action did.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BulkDone {
    action: Action,
    /// The jobs it changed.
    done: Vec<String>,
    /// The jobs it left alone: not in a state the action applies to (a
    /// retry or purge of a job that is no dead letter), or gone.
    missed: Vec<String>,
}

/// Most jobs one bulk action takes.
const BULK_MOST: usize = 1000;

/// `POST /api/topics/{topic}/bulk`: retry, cancel or purge the jobs
/// named (the console's selection), and nothing else.
#[utoipa::path(
    post,
    path = "/topics/{topic}/bulk",
    operation_id = "bulk_jobs",
    tag = "jobs",
    params(
        super::openapi::TopicPath,
    ),
    request_body = BulkIn,
    responses(
        (status = 200, description = "the jobs changed and those left alone", body = BulkDone),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn bulk(
    State(app): AppState,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<BulkDone>, ApiError> {
    // read whatever the Content-Type says: a body that is no BulkIn is a 400
    let body: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let body: BulkIn = super::change::parse(body, "")?;
    let topic = topic_named(&app.ops.serving(), &name)?;
    if body.ids.is_empty() || body.ids.len() > BULK_MOST {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "ids",
            format!("1 to {BULK_MOST} job ids"),
        ));
    }
    for (i, id) in body.ids.iter().enumerate() {
        check_id(id)
            .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, format!("ids[{i}]"), why))?;
    }
    let queue = &app.ops.queue;
    let keys = queue.keys(&name);
    let now = now_ms();
    let done: Vec<String> = match body.action {
        Action::Retry => queue.dead().retry(&keys, &body.ids, now).await?,
        Action::Purge => queue.dead().purge(&keys, &body.ids).await?,
        Action::Cancel => {
            let keep = topic.and_then(|t| t.results).map(|r| r.keep);
            let was = queue.admin().cancel(&keys, &body.ids, now, keep).await?;
            body.ids
                .iter()
                .zip(was)
                .filter(|(_, was)| was.is_some())
                .map(|(id, _)| id.clone())
                .collect()
        }
    };
    let missed = body
        .ids
        .iter()
        .filter(|id| !done.contains(id))
        .cloned()
        .collect();
    tracing::info!(topic = %name, action = ?body.action, jobs = done.len(), "bulk action by the API");
    Ok(Json(BulkDone {
        action: body.action,
        done,
        missed,
    }))
}
