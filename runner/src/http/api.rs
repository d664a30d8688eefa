//! The read-only routes: topics, one job, dead letters, stats, runners,
//! reloads, health.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::answers::{
    AccountHour, AccountTotal, DeadLetterView, ReloadList, ReloadView, RunnerList, StatsMap,
    UsageView,
};
use super::views::{DeadPage, TopicList, TopicView};
use super::{ApiError, AppState, topic_named};
use crate::clock::now_ms;
use crate::redis::{JobJson, check_id};

/// `GET /api/topics`: every topic with its counts.
#[utoipa::path(
    get,
    path = "/topics",
    operation_id = "list_topics",
    tag = "topics",
    responses(
        (status = 200, description = "every topic: settings, version, counts, totals, lateness", body = super::views::TopicList),
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn topics(State(app): AppState) -> Result<Json<TopicList>, ApiError> {
    Ok(Json(topic_list(&app).await?))
}

/// Every topic with its counts: the topic list and the console's overview.
pub(super) async fn topic_list(app: &super::App) -> Result<TopicList, ApiError> {
    let o = app.ops.overview().await?;
    let topics = o
        .topics
        .iter()
        .map(|(n, s)| TopicView::new(&o.serving, &o.runners, n, s))
        .collect();
    Ok(TopicList {
        topics,
        runs_jobs: o.serving.runs_jobs,
    })
}

/// `GET /api/topics/{topic}`.
#[utoipa::path(
    get,
    path = "/topics/{topic}",
    operation_id = "get_topic",
    tag = "topics",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "the topic", body = super::views::TopicView),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn topic(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    let serving = app.ops.serving();
    topic_named(&serving, &name)?;
    let q = &app.ops.queue;
    let now = now_ms();
    let runners = q.runners().list(now).await?;
    let stats = q.stats(&q.keys(&name), now).await?;
    Ok(Json(TopicView::new(&serving, &runners, &name, &stats)))
}

/// `GET /api/topics/{topic}/jobs/{id}`: where the job is, its attempts and last failure.
/// Once the job has left the pipeline, its kept end (a topic with
/// `results`) as `/result` shows it.
#[utoipa::path(
    get,
    path = "/topics/{topic}/jobs/{id}",
    operation_id = "get_job",
    tag = "jobs",
    params(
        super::openapi::JobPath,
    ),
    responses(
        (status = 200, description = "the job, or its kept end", body = crate::redis::JobJson),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn job(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<JobJson>, ApiError> {
    let topic = topic_named(&app.ops.serving(), &name)?;
    check_id(&id).map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "id", why))?;
    let q = &app.ops.queue;
    let max_attempts = topic.map(|t| t.max_attempts);
    match q
        .job_json(&q.keys(&name), &name, &id, max_attempts, now_ms())
        .await?
    {
        Some(view) => Ok(Json(view)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no job {id:?} in {name} (never enqueued, done and not kept, cancelled or purged)"
            ),
        )),
    }
}

/// `?offset=&limit=` of a listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Page {
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    50
}

/// Most items one page holds.
const MAX_PAGE: usize = 500;

/// `GET /api/topics/{topic}/dead?offset=0&limit=50`: dead letters, newest first.
#[utoipa::path(
    get,
    path = "/topics/{topic}/dead",
    operation_id = "list_dead",
    tag = "dead letters",
    params(
        super::openapi::TopicPath,
        ("offset" = Option<usize>, Query, description = "skip this many, newest first"),
        ("limit" = Option<usize>, Query, description = "at most this many, 1 to 500 (50)"),
    ),
    responses(
        (status = 200, description = "a page of dead letters with `total`", body = super::views::DeadPage,
            links(
                ("retry_dead_one" = (operation_id = "retry_dead_one", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/letters/0/id")))),
                ("purge_dead_one" = (operation_id = "purge_dead_one", parameters(("topic" = "$request.path.topic"), ("id" = "$response.body#/letters/0/id")))),
            ),
        ),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn dead(
    State(app): AppState,
    Path(name): Path<String>,
    page: Result<Query<Page>, QueryRejection>,
) -> Result<Json<DeadPage>, ApiError> {
    let Query(page) = page?;
    topic_named(&app.ops.serving(), &name)?;
    if page.limit == 0 || page.limit > MAX_PAGE {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "limit",
            format!("between 1 and {MAX_PAGE}"),
        ));
    }
    let q = &app.ops.queue;
    let keys = q.keys(&name);
    let total = q.stats(&keys, now_ms()).await?.dead;
    let letters = q.dead().list(&keys, page.offset, page.limit).await?;
    let letters = letters
        .into_iter()
        .map(|(id, info)| DeadLetterView { id, info })
        .collect();
    Ok(Json(DeadPage {
        topic: name,
        total,
        offset: page.offset,
        limit: page.limit,
        letters,
    }))
}

/// `GET /api/stats`: counts per topic, as `hourglass stats --json`.
#[utoipa::path(
    get,
    path = "/stats",
    operation_id = "stats",
    tag = "operate",
    responses(
        (status = 200, description = "counts per topic, by name", body = std::collections::BTreeMap<String, crate::redis::TopicStats>),
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn stats(State(app): AppState) -> Result<Json<StatsMap>, ApiError> {
    let o = app.ops.overview().await?;
    Ok(Json(o.topics.into_iter().collect()))
}

/// `GET /api/runners`: the runners alive now.
#[utoipa::path(
    get,
    path = "/runners",
    operation_id = "list_runners",
    tag = "operate",
    responses(
        (status = 200, description = "the live runners", body = RunnerList),
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn runners(State(app): AppState) -> Result<Json<RunnerList>, ApiError> {
    let runners = app.ops.queue.runners().list(now_ms()).await?;
    Ok(Json(RunnerList { runners }))
}

/// `GET /api/reloads`: this runner's recent reloads, newest first.
#[utoipa::path(
    get,
    path = "/reloads",
    operation_id = "list_reloads",
    tag = "operate",
    responses(
        (status = 200, description = "this runner's recent reloads", body = ReloadList),
        super::openapi::NoToken,
    ),
)]
pub(super) async fn reloads(State(app): AppState) -> Json<ReloadList> {
    let records = app.ops.reloads.as_ref().map(|f| f()).unwrap_or_default();
    let reloads = records
        .into_iter()
        .map(|r| {
            use crate::reload::Notice;
            let (kind, path, detail) = match r.notice {
                Notice::Loaded { path, hash } => ("handler_loaded", Some(path), Some(hash)),
                Notice::Rejected { path, error } => ("handler_rejected", Some(path), Some(error)),
                Notice::Missing { path } => ("handler_missing", Some(path), None),
                Notice::ConfigApplied => ("config_applied", None, None),
                Notice::ConfigRejected { error } => ("config_rejected", None, Some(error)),
            };
            ReloadView {
                at_ms: r.at_ms,
                result: kind,
                path: path.map(|p| p.display().to_string()),
                detail,
            }
        })
        .collect();
    Json(ReloadList { reloads })
}

/// `GET /healthz`: the process answers.
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({ "alive": true }))
}

/// `GET /readyz`: Redis answers and every topic has a handler loaded.
pub(super) async fn readyz(State(app): AppState) -> (StatusCode, Json<Value>) {
    let serving = app.ops.serving();
    let mut problems = Vec::new();
    if let Err(e) = app.ops.queue.ping().await {
        problems.push(format!("redis: {e}"));
    }
    if serving.runs_jobs {
        for t in &serving.config.topics {
            if !serving.handlers.contains_key(&t.name) {
                problems.push(format!("topic {}: no handler loaded", t.name));
            }
        }
    }
    let status = if problems.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({ "ready": problems.is_empty(), "problems": problems })),
    )
}

/// Any other path under `/api/`.
pub(super) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such route; see the HTTP API page of the docs (docs/src/http-api.md)",
    )
}

/// `?since=24h&account=acme` of `GET /api/usage`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UsageQuery {
    #[serde(default = "day")]
    since: String,
    account: Option<String>,
}

fn day() -> String {
    "24h".into()
}

/// `GET /api/usage`: what the jobs tagged with each account used, per hour
/// and in total, over `since` (default 24h, at most 35d).
#[utoipa::path(
    get,
    path = "/usage",
    operation_id = "usage",
    tag = "operate",
    params(
        ("since" = Option<String>, Query, description = "this far back, at most 35d (24h)"),
        ("account" = Option<String>, Query, description = "only this account"),
    ),
    responses(
        (status = 200, description = "usage per account and per hour", body = UsageView),
        super::openapi::BadInput,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn usage(
    State(app): AppState,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Json<UsageView>, ApiError> {
    let Query(query) = query?;
    let bad = |field: &str, why: String| ApiError::field(StatusCode::BAD_REQUEST, field, why);
    let since =
        crate::config::parse_duration(&query.since).map_err(|e| bad("since", e.to_string()))?;
    if since > crate::redis::USAGE_KEEP {
        return Err(bad("since", "at most 35d (hours are kept 35 days)".into()));
    }
    if let Some(account) = &query.account {
        crate::redis::check_account(account).map_err(|why| bad("account", why))?;
    }
    let now = now_ms();
    let q = &app.ops.queue;
    let usage = q
        .runners()
        .usage(
            now.saturating_sub(crate::clock::millis(since)),
            now,
            query.account.as_deref(),
        )
        .await?;
    let accounts = crate::redis::totals(&usage)
        .into_iter()
        .map(|(account, usage)| AccountTotal {
            account: account.to_owned(),
            usage,
        })
        .collect();
    let hours = usage
        .into_iter()
        .map(|((hour_ms, account), usage)| AccountHour {
            account,
            hour_ms,
            usage,
        })
        .collect();
    Ok(Json(UsageView {
        since: query.since,
        accounts,
        hours,
    }))
}
