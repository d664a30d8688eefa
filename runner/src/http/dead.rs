//! The routes that change dead letters: run them again (on what the topic
//! serves, or replayed on a chosen handler version) or delete them for good.
//! Each needs the token when one is configured.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::answers::{Purged, PurgedOne, Requeued, RequeuedOne};
use super::change::{check_kept, checked, parse};
use super::{ApiError, AppState, WHO};
use crate::clock::now_ms;
use crate::redis::{DEAD_BATCH, Queue, QueueError, TopicKeys, check_version};

/// What to do with dead letters.
#[derive(Clone, Copy)]
enum Verb<'a> {
    /// Run again, on this handler version if one is given (and then with
    /// a durable job's journal dropped, if asked).
    Retry(Option<&'a str>, bool),
    /// Delete for good.
    Purge,
}

impl Verb<'_> {
    /// The version a retry runs them on, if it names one.
    fn version(self) -> Option<String> {
        match self {
            Verb::Retry(version, _) => version.map(str::to_owned),
            Verb::Purge => None,
        }
    }
}

/// Apply `verb` to dead letters: `ids`, or all when empty, in batches.
async fn dead_apply(
    q: &Queue,
    keys: &TopicKeys,
    ids: &[String],
    verb: Verb<'_>,
) -> Result<Vec<String>, QueueError> {
    async fn run(
        q: &Queue,
        keys: &TopicKeys,
        ids: &[String],
        verb: Verb<'_>,
    ) -> Result<Vec<String>, QueueError> {
        match verb {
            Verb::Retry(None, false) => q.dead().retry(keys, ids, now_ms()).await,
            Verb::Retry(None, true) => q.dead().retry_afresh(keys, ids, now_ms()).await,
            Verb::Retry(Some(version), reset) => {
                q.dead().retry_on(keys, ids, version, reset, now_ms()).await
            }
            Verb::Purge => q.dead().purge(keys, ids).await,
        }
    }
    if !ids.is_empty() {
        return run(q, keys, ids, verb).await;
    }
    let mut done = Vec::new();
    loop {
        let batch = run(q, keys, &[], verb).await?;
        let last = batch.len() < DEAD_BATCH;
        done.extend(batch);
        if last {
            return Ok(done);
        }
    }
}

/// The optional body of a dead-letter retry: `{"version": "..."}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RetryIn {
    /// Run them on this handler version (one the topic keeps): each job is
    /// pinned to it.
    version: Option<String>,
    /// Drop each job's journal (its steps and calls made again): needed
    /// with `version` for a job with one.
    #[serde(default)]
    reset_journal: bool,
}

/// The version a retry's body names, checked and kept by `topic`; `None`
/// for an empty body (today's retry, on what the topic serves).
async fn retry_version(
    q: &Queue,
    topic: &str,
    body: &Bytes,
) -> Result<(Option<String>, bool), ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((None, false));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let asked = parse::<RetryIn>(value, "")?;
    let Some(version) = asked.version else {
        return Ok((None, asked.reset_journal));
    };
    check_version(&version)
        .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "version", why))?;
    let (_, kept) = q.rollouts().versions(&q.keys(topic)).await?;
    check_kept(topic, &version, &kept, "version")?;
    Ok((Some(version), asked.reset_journal))
}

/// Log a replay on a chosen version: it changes what runs those jobs.
fn log_replay(topic: &str, verb: Verb<'_>, requeued: usize) {
    if let Verb::Retry(Some(version), _) = verb {
        tracing::info!(
            topic,
            version,
            who = WHO,
            requeued,
            "dead letters requeued on version {version}"
        );
    }
}

async fn dead_one(
    app: &super::App,
    name: &str,
    keys: &TopicKeys,
    id: String,
    verb: Verb<'_>,
) -> Result<(), ApiError> {
    let hit = dead_apply(&app.ops.queue, keys, std::slice::from_ref(&id), verb).await?;
    if hit.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no dead letter {id:?} in {name}"),
        ));
    }
    log_replay(name, verb, hit.len());
    Ok(())
}

/// Apply `verb` to every dead letter of the topic: how many it changed.
async fn dead_all(
    app: &super::App,
    name: &str,
    keys: &TopicKeys,
    verb: Verb<'_>,
) -> Result<usize, ApiError> {
    let done = dead_apply(&app.ops.queue, keys, &[], verb).await?;
    log_replay(name, verb, done.len());
    Ok(done.len())
}

/// `POST /api/topics/{topic}/dead/{id}/retry`: run a dead letter again, due
/// now, attempts reset; on a chosen handler version with a body
/// `{"version": "..."}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/dead/{id}/retry",
    operation_id = "retry_dead_one",
    tag = "dead letters",
    params(
        super::openapi::JobPath,
    ),
    request_body(content = Option<RetryIn>, description = "optional: replay on a kept version, or drop its journal"),
    responses(
        (status = 200, description = "runs again", body = RequeuedOne),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn retry(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<RequeuedOne>, ApiError> {
    let keys = checked(&app, &name, Some(&id))?;
    let (version, reset) = retry_version(&app.ops.queue, &name, &body).await?;
    let verb = Verb::Retry(version.as_deref(), reset);
    dead_one(&app, &name, &keys, id.clone(), verb).await?;
    Ok(Json(RequeuedOne {
        id,
        requeued: true,
        version: verb.version(),
    }))
}

/// `DELETE /api/topics/{topic}/dead/{id}`: delete a dead letter for good.
#[utoipa::path(
    delete,
    path = "/topics/{topic}/dead/{id}",
    operation_id = "purge_dead_one",
    tag = "dead letters",
    params(
        super::openapi::JobPath,
    ),
    responses(
        (status = 200, description = "purged", body = PurgedOne),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn purge(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<PurgedOne>, ApiError> {
    let keys = checked(&app, &name, Some(&id))?;
    dead_one(&app, &name, &keys, id.clone(), Verb::Purge).await?;
    Ok(Json(PurgedOne { id, purged: true }))
}

/// `POST /api/topics/{topic}/dead/retry`: run every dead letter again; on a
/// chosen handler version with a body `{"version": "..."}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/dead/retry",
    operation_id = "retry_dead",
    tag = "dead letters",
    params(
        super::openapi::TopicPath,
    ),
    request_body(content = Option<RetryIn>, description = "optional: replay on a kept version, or drop journals"),
    responses(
        (status = 200, description = "how many run again", body = Requeued),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn retry_all(
    State(app): AppState,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Requeued>, ApiError> {
    let keys = checked(&app, &name, None)?;
    let (version, reset) = retry_version(&app.ops.queue, &name, &body).await?;
    let verb = Verb::Retry(version.as_deref(), reset);
    let requeued = dead_all(&app, &name, &keys, verb).await?;
    Ok(Json(Requeued {
        requeued,
        version: verb.version(),
    }))
}

/// `DELETE /api/topics/{topic}/dead`: delete every dead letter.
#[utoipa::path(
    delete,
    path = "/topics/{topic}/dead",
    operation_id = "purge_dead",
    tag = "dead letters",
    params(
        super::openapi::TopicPath,
    ),
    responses(
        (status = 200, description = "how many were purged", body = Purged),
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn purge_all(
    State(app): AppState,
    Path(name): Path<String>,
) -> Result<Json<Purged>, ApiError> {
    let keys = checked(&app, &name, None)?;
    let purged = dead_all(&app, &name, &keys, Verb::Purge).await?;
    Ok(Json(Purged { purged }))
}
