//! `POST /api/topics/{topic}/upgrade`: move in-flight journaled jobs to
//! another handler version, each only if a replay check of its journal on
//! it passes (`hourglass upgrade` over HTTP). Served by a runner, whose
//! runtime runs the checks; `hourglass serve` runs no handlers and says so.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::change::parse;
use super::{ApiError, AppState, topic_named};
use crate::redis::check_version;
use crate::upgrade::{Report, UpgradeError, Which};

/// The body of an upgrade.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct UpgradeIn {
    /// The version to move the jobs to: one the topic keeps.
    to: String,
    /// The jobs to check and move, by id (or `all`).
    #[serde(default)]
    ids: Vec<String>,
    /// Every job of the topic with a journal.
    #[serde(default)]
    all: bool,
    /// Check only: report which jobs would move, move none.
    #[serde(default)]
    dry_run: bool,
}

/// `POST /api/topics/{topic}/upgrade` `{"to": "...", "all": true,
/// "dry_run": true}` (or `"ids": [...]`): the jobs moved (or, in a dry run,
/// movable) and each left where it is with its first difference. 400 bad
/// input naming the field; 404 no such topic; 409 a version the topic does
/// not keep, or a process that runs no handlers.
#[utoipa::path(
    post,
    path = "/topics/{topic}/upgrade",
    operation_id = "upgrade_jobs",
    tag = "durable",
    params(
        super::openapi::TopicPath,
    ),
    request_body(content = UpgradeIn),
    responses(
        (status = 200, description = "the jobs moved and those left, each with why", body = Report),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn upgrade(
    State(app): AppState,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Report>, ApiError> {
    let topic = topic_named(&app.ops.serving(), &name)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let asked: UpgradeIn = parse(value, "")?;
    check_version(&asked.to).map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "to", why))?;
    let which = match (asked.all, asked.ids.is_empty()) {
        (true, true) => Which::All,
        (false, false) => {
            for id in &asked.ids {
                crate::redis::check_id(id)
                    .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "ids", why))?;
            }
            Which::Ids(asked.ids)
        }
        (true, false) => {
            return Err(ApiError::field(
                StatusCode::BAD_REQUEST,
                "ids",
                "give ids or `all`, not both",
            ));
        }
        (false, true) => {
            return Err(ApiError::field(
                StatusCode::BAD_REQUEST,
                "ids",
                "missing: the jobs to move, or `\"all\": true`",
            ));
        }
    };
    let (Some(topic), Some(service)) = (topic, &app.ops.upgrades) else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this process runs no handlers (`hourglass serve`): ask a runner's API, or run `hourglass upgrade` where the versions are kept",
        ));
    };
    match service.run(&topic, &asked.to, which, asked.dry_run).await {
        Ok(report) => Ok(Json(report)),
        Err(UpgradeError::Version(why)) => Err(ApiError::field(StatusCode::CONFLICT, "to", why)),
        Err(UpgradeError::Queue(e)) => Err(e.into()),
    }
}
