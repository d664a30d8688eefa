//! A topic's tenant keys over the API: `GET /api/topics/{topic}/keys` (the
//! top keys and the totals), `POST .../keys/{key}/pause` and `/resume`,
//! `PUT .../keys/{key}/weight` with `{"weight": N}`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::change::parse;
use super::views::{KeyPaused, KeyWeighed, KeysView};
use super::{ApiError, AppState, topic_named};
use crate::clock::now_ms;
use crate::redis::{MAX_WEIGHT, TopicKeys, check_key};

/// `?top=N` of `GET /api/topics/{topic}/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TopQuery {
    top: Option<usize>,
}

/// The topic's keys, after checking the key and that the topic claims fairly.
fn fair_topic(app: &super::App, name: &str, key: Option<&str>) -> Result<TopicKeys, ApiError> {
    if let Some(key) = key {
        check_key(key).map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "key", why))?;
    }
    if let Some(topic) = topic_named(&app.ops.serving(), name)?
        && topic.fairness.is_none()
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "topic {name:?} has no `fairness` (nor key_concurrency / key_rate): its keys do not take turns"
            ),
        ));
    }
    Ok(app.ops.queue.keys(name))
}

/// `GET /api/topics/{topic}/keys?top=10`: the top keys by CPU of the last
/// minute and by jobs queued, and the totals.
#[utoipa::path(
    get,
    path = "/topics/{topic}/keys",
    operation_id = "list_keys",
    tag = "tenants",
    params(
        super::openapi::TopicPath,
        ("top" = Option<usize>, Query, description = "how many keys of each top list, 1 to 1000 (10)"),
    ),
    responses(
        (status = 200, description = "the top keys and the totals", body = super::views::KeysView),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn list(
    State(app): AppState,
    Path(name): Path<String>,
    q: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<KeysView>, ApiError> {
    // a query that does not parse answers as any bad input: JSON naming it
    let Query(q) = q?;
    let top = q.top.unwrap_or(10);
    if !(1..=1000).contains(&top) {
        return Err(ApiError::field(StatusCode::BAD_REQUEST, "top", "1 to 1000"));
    }
    topic_named(&app.ops.serving(), &name)?;
    let keys = app.ops.queue.keys(&name);
    let stats = app.ops.queue.tenants().stats(&keys, now_ms(), top).await?;
    Ok(Json(KeysView::new(name, stats)))
}

async fn set_paused(
    app: &super::App,
    name: &str,
    key: &str,
    paused: bool,
) -> Result<Json<KeyPaused>, ApiError> {
    let keys = fair_topic(app, name, Some(key))?;
    let changed = app.ops.queue.tenants().pause(&keys, key, paused).await?;
    Ok(Json(KeyPaused {
        topic: name.to_owned(),
        key: key.to_owned(),
        paused,
        changed,
    }))
}

/// `POST /api/topics/{topic}/keys/{key}/pause`: its jobs wait, other keys go on.
#[utoipa::path(
    post,
    path = "/topics/{topic}/keys/{key}/pause",
    operation_id = "pause_key",
    tag = "tenants",
    params(
        super::openapi::TopicPath,
        ("key" = String, Path, description = "the tenant key"),
    ),
    responses(
        (status = 200, description = "paused", body = super::views::KeyPaused),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn pause(
    State(app): AppState,
    Path((name, key)): Path<(String, String)>,
) -> Result<Json<KeyPaused>, ApiError> {
    set_paused(&app, &name, &key, true).await
}

/// `POST /api/topics/{topic}/keys/{key}/resume`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/keys/{key}/resume",
    operation_id = "resume_key",
    tag = "tenants",
    params(
        super::openapi::TopicPath,
        ("key" = String, Path, description = "the tenant key"),
    ),
    responses(
        (status = 200, description = "resumed", body = super::views::KeyPaused),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn resume(
    State(app): AppState,
    Path((name, key)): Path<(String, String)>,
) -> Result<Json<KeyPaused>, ApiError> {
    set_paused(&app, &name, &key, false).await
}

/// `{"weight": N}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct WeightIn {
    weight: i64,
}

/// `PUT /api/topics/{topic}/keys/{key}/weight` with `{"weight": 3}`.
#[utoipa::path(
    put,
    path = "/topics/{topic}/keys/{key}/weight",
    operation_id = "weigh_key",
    tag = "tenants",
    params(
        super::openapi::TopicPath,
        ("key" = String, Path, description = "the tenant key"),
    ),
    request_body(content = WeightIn),
    responses(
        (status = 200, description = "weighed", body = super::views::KeyWeighed),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn weight(
    State(app): AppState,
    Path((name, key)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<KeyWeighed>, ApiError> {
    let keys = fair_topic(&app, &name, Some(&key))?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")))?;
    let w: WeightIn = parse(value, "")?;
    let weight = u32::try_from(w.weight)
        .ok()
        .filter(|w| (1..=MAX_WEIGHT).contains(w))
        .ok_or_else(|| {
            ApiError::field(
                StatusCode::BAD_REQUEST,
                "weight",
                format!("{} is not 1 to {MAX_WEIGHT}", w.weight),
            )
        })?;
    app.ops
        .queue
        .tenants()
        .set_weight(&keys, &key, weight)
        .await?;
    Ok(Json(KeyWeighed {
        topic: name,
        key,
        weight,
    }))
}
