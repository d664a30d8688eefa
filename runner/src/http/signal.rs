//! Durable handlers' jobs from outside: `POST …/jobs/{id}/signals/{name}`
//! (the body is the payload) and `POST …/jobs/{id}/wake`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::change::checked;
use super::views::{Delivered, JobWoken};
use super::{ApiError, AppState};
use crate::clock::now_ms;
use crate::redis::{Signalled, Woken};

/// `POST /api/topics/{topic}/jobs/{id}/signals/{name}`: send signal `name`
/// with the body as its payload. 200 `{"delivered": "woken" | "kept" |
/// "duplicate"}`; 404 no such live job; 409 a dead letter; 400 a bad name
/// or a payload over 64 KiB.
#[utoipa::path(
    post,
    path = "/topics/{topic}/jobs/{id}/signals/{name}",
    operation_id = "send_signal",
    tag = "durable",
    params(
        super::openapi::JobPath,
        ("name" = String, Path, description = "the signal's name"),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "its payload, at most 64 KiB"),
    responses(
        (status = 200, description = "delivered: woken, kept or duplicate", body = super::views::Delivered),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn signal(
    State(app): AppState,
    Path((name, id, signal)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Json<Delivered>, ApiError> {
    let keys = checked(&app, &name, Some(&id))?;
    let answer = app
        .ops
        .queue
        .signal(&keys, &id, &signal, &body, now_ms())
        .await?;
    let delivered = match answer {
        Signalled::Woken => "woken",
        Signalled::Kept => "kept",
        Signalled::Duplicate => "duplicate",
        Signalled::Dead => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("job {id:?} of {name} is dead-lettered: retry it first"),
            ));
        }
        Signalled::NoSuchJob => return Err(no_such_job(&name, &id)),
    };
    Ok(Json(Delivered {
        id,
        signal,
        delivered: delivered.to_owned(),
    }))
}

/// `POST /api/topics/{topic}/jobs/{id}/wake`: a suspended job runs now (its
/// sleep ends, a wait for a signal times out). 404 no such live job; 409
/// not suspended.
#[utoipa::path(
    post,
    path = "/topics/{topic}/jobs/{id}/wake",
    operation_id = "wake_job",
    tag = "durable",
    params(
        super::openapi::JobPath,
    ),
    responses(
        (status = 200, description = "woken", body = super::views::JobWoken),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn wake(
    State(app): AppState,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<JobWoken>, ApiError> {
    let keys = checked(&app, &name, Some(&id))?;
    match app.ops.queue.wake(&keys, &id, now_ms()).await? {
        Woken::Woken => Ok(Json(JobWoken { id, woken: true })),
        Woken::NotSuspended => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("job {id:?} of {name} is not suspended"),
        )),
        Woken::NoSuchJob => Err(no_such_job(&name, &id)),
    }
}

fn no_such_job(topic: &str, id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no job {id:?} in {topic} (never enqueued, done or cancelled)"),
    )
}
