//! Which handler version serves a topic: its kept versions and rollout
//! (reads), and changing it by hand: promote or abort the canary, pin a kept
//! version and unpin (`hourglass versions`, `rollout`, `pin` and `unpin` over
//! HTTP). Every change is logged with who made it (`api`) and counted in
//! Redis (the scrape turns the counts into `hourglass_rollouts_total`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::answers::{Judged, Pinned, RolloutView, Versions};
use super::change::{checked, parse};
use super::{ApiError, AppState, WHO, topic_named};
use crate::clock::now_ms;
use crate::config::RolloutPolicy;
use crate::redis::{Change, QueueError, check_version};

/// `GET /api/topics/{topic}/versions`: the kept handler versions, newest
/// first, with their roles, totals and the live jobs each holds by journal,
/// and the live jobs on each path of each `patched` change; as `hourglass
/// versions TOPIC --json`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/versions",
    operation_id = "list_versions",
    tag = "rollouts",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "the kept versions, newest first, and the rollout", body = Versions),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn versions(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Versions>, ApiError> {
    topic_named(&app.ops.serving(), &name)?;
    let q = &app.ops.queue;
    let keys = q.keys(&name);
    let (rollout, mut versions) = q.rollouts().versions(&keys).await?;
    let holdings = q.upgrades().holdings(&keys).await?;
    holdings.fill(&mut versions);
    Ok(Json(Versions {
        topic: name,
        unkept: holdings.unkept(&versions),
        patches: holdings.patches,
        versions,
        rollout,
    }))
}

/// `GET /api/topics/{topic}/rollout`: the stable version, the canary with its
/// counts, a pin, the last verdict; and the topic's policy in the served
/// queues.toml (`null`: a new version replaces the old at once).
#[utoipa::path(
    get,
    path = "/topics/{topic}/rollout",
    operation_id = "get_rollout",
    tag = "rollouts",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "the rollout and the policy", body = RolloutView),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn rollout(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<RolloutView>, ApiError> {
    let policy = topic_named(&app.ops.serving(), &name)?.and_then(|t| t.rollout);
    let q = &app.ops.queue;
    let rollout = q.rollouts().get(&q.keys(&name)).await?;
    Ok(Json(RolloutView {
        topic: name,
        rollout,
        policy: policy.as_ref().map(RolloutPolicy::shown),
    }))
}

/// A refused rollout change (no canary, not pinned, a version the topic does
/// not keep) conflicts with the topic's state: 409 saying why.
fn conflict(e: QueueError, field: Option<&str>) -> ApiError {
    match (e, field) {
        (QueueError::Invalid(why), Some(field)) => {
            ApiError::field(StatusCode::CONFLICT, field, why)
        }
        (QueueError::Invalid(why), None) => ApiError::new(StatusCode::CONFLICT, why),
        (e, _) => e.into(),
    }
}

/// Judge the canary running now by hand: `change` is promote or abort.
async fn verdict(
    app: &super::App,
    name: &str,
    change: Change,
    result: &'static str,
) -> Result<Json<Judged>, ApiError> {
    let keys = checked(app, name, None)?;
    let q = &app.ops.queue;
    let before = q.rollouts().get(&keys).await?;
    // the canary read here is the one judged: one started since is refused as stale
    let Some(canary) = before.canary.map(|c| c.version) else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("topic {name:?} has no canary being rolled out"),
        ));
    };
    let reason = format!("{result} by hand");
    q.rollouts()
        .change(&keys, &change, WHO, &reason, Some(&canary), now_ms())
        .await
        .map_err(|e| conflict(e, None))?;
    let stable = if change == Change::Promote {
        Some(canary.clone())
    } else {
        before.stable
    };
    tracing::info!(
        topic = name,
        version = canary,
        who = WHO,
        "canary {canary} {reason}"
    );
    Ok(Json(Judged {
        topic: name.to_owned(),
        result,
        version: canary,
        stable,
    }))
}

/// `POST /api/topics/{topic}/rollout/promote`: make the canary the stable
/// version now.
#[utoipa::path(
    post,
    path = "/topics/{topic}/rollout/promote",
    operation_id = "promote_canary",
    tag = "rollouts",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "promoted", body = Judged),
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn promote(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Judged>, ApiError> {
    verdict(&app, &name, Change::Promote, "promoted").await
}

/// `POST /api/topics/{topic}/rollout/abort`: take the canary out now; it is
/// retired (not rolled out again).
#[utoipa::path(
    post,
    path = "/topics/{topic}/rollout/abort",
    operation_id = "abort_canary",
    tag = "rollouts",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "aborted", body = Judged),
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn abort(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Judged>, ApiError> {
    verdict(&app, &name, Change::Abort, "aborted").await
}

/// The body of a pin: `{"version": "..."}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PinIn {
    /// The version to serve: one the topic keeps.
    version: Option<String>,
}

/// `POST /api/topics/{topic}/pin` `{"version": "..."}`: every attempt runs
/// this kept version, whatever the handler file and the rollout say.
#[utoipa::path(
    post,
    path = "/topics/{topic}/pin",
    operation_id = "pin_version",
    tag = "rollouts",
    params(
        super::openapi::TopicPath,
    ),
    request_body(content = PinIn),
    responses(
        (status = 200, description = "pinned", body = Pinned),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn pin(
    State(app): AppState,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Pinned>, ApiError> {
    let keys = checked(&app, &name, None)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let Some(version) = parse::<PinIn>(value, "")?.version else {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "version",
            "missing; send one of the versions GET /api/topics/{topic}/versions lists",
        ));
    };
    check_version(&version)
        .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "version", why))?;
    let change = Change::Pin(version.clone());
    app.ops
        .queue
        .rollouts()
        .change(&keys, &change, WHO, "pinned by hand", None, now_ms())
        .await
        .map_err(|e| conflict(e, Some("version")))?;
    tracing::info!(
        topic = name,
        version,
        who = WHO,
        "pinned by hand to version {version}"
    );
    Ok(Json(Pinned {
        topic: name,
        pinned: Some(version),
    }))
}

/// `DELETE /api/topics/{topic}/pin`: the handler file and the rollout decide
/// again.
#[utoipa::path(
    delete,
    path = "/topics/{topic}/pin",
    operation_id = "unpin_version",
    tag = "rollouts",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "unpinned: `pinned` is null", body = Pinned),
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn unpin(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Pinned>, ApiError> {
    let keys = checked(&app, &name, None)?;
    app.ops
        .queue
        .rollouts()
        .change(
            &keys,
            &Change::Unpin,
            WHO,
            "unpinned by hand",
            None,
            now_ms(),
        )
        .await
        .map_err(|e| conflict(e, None))?;
    tracing::info!(topic = name, who = WHO, "unpinned by hand");
    Ok(Json(Pinned {
        topic: name,
        pinned: None,
    }))
}
