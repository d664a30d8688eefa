//! Flows over the API: `POST /api/flows` creates one (the body is a flow
//! as `hourglass flow enqueue` reads it, JSON), `GET /api/flows/{id}` shows
//! it as `flow show --json` does, `POST /api/flows/{id}/cancel` cancels it;
//! for a batch, `POST /api/flows/{id}/jobs` adds jobs, `.../seal` seals it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::views::{BatchAdded, BatchSealed, FlowCancelled, FlowCreated};
use super::{ApiError, AppState};
use crate::clock::now_ms;
use crate::flow_file;
use crate::redis::QueueError;
use crate::redis::flow::check_flow_id;

/// `POST /api/flows`: 201 `{"id", "jobs", "enqueued": {topic: n}}`; 400 a
/// bad flow (a cycle, an unknown dependency or topic, a payload over the
/// limit: the error names the job), nothing enqueued; 409 its id is taken.
#[utoipa::path(
    post,
    path = "/flows",
    operation_id = "create_flow",
    tag = "flows",
    request_body(content = serde_json::Value, description = "the flow as `hourglass flow enqueue` reads it"),
    responses(
        (status = 201, description = "created", body = super::views::FlowCreated,
            links(
                ("get_flow" = (operation_id = "get_flow", parameters(("id" = "$response.body#/id")))),
                ("cancel_flow" = (operation_id = "cancel_flow", parameters(("id" = "$response.body#/id")))),
                ("add_to_batch" = (operation_id = "add_to_batch", parameters(("id" = "$response.body#/id")))),
                ("seal_batch" = (operation_id = "seal_batch", parameters(("id" = "$response.body#/id")))),
            ),
        ),
        super::openapi::BadInput,
        super::openapi::Conflict,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn create(
    State(app): AppState,
    body: Bytes,
) -> Result<(StatusCode, Json<FlowCreated>), ApiError> {
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let bad = |e: String| ApiError::field(StatusCode::BAD_REQUEST, "body", e);
    let spec = flow_file::from_json(body).map_err(bad)?;
    let serving = app.ops.serving();
    flow_file::check_against(&spec, &serving.config).map_err(bad)?;
    let plan = spec.plan().map_err(bad)?;
    let new = app.ops.queue.flows().create(&plan, now_ms()).await?;
    Ok((
        StatusCode::CREATED,
        Json(FlowCreated {
            jobs: plan.jobs.len(),
            id: plan.id,
            enqueued: new,
        }),
    ))
}

/// `POST /api/flows/{id}/jobs`: add jobs to an open batch (the body is
/// `{"jobs": [...]}`). 200 `{"id", "added", "enqueued": {topic: n}}`; 400
/// bad jobs or a batch that takes none (sealed, cancelled, not a batch, a
/// name in use), nothing added; 404 no such flow.
#[utoipa::path(
    post,
    path = "/flows/{id}/jobs",
    operation_id = "add_to_batch",
    tag = "flows",
    params(
        ("id" = String, Path, description = "the flow's id"),
    ),
    request_body(content = serde_json::Value, description = "`{\"jobs\": [...]}`"),
    responses(
        (status = 200, description = "added", body = super::views::BatchAdded),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn add(
    State(app): AppState,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<BatchAdded>), ApiError> {
    check_flow_id(&id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "body", format!("not JSON: {e}")))?;
    let bad = |e: String| ApiError::field(StatusCode::BAD_REQUEST, "body", e);
    let jobs = flow_file::jobs_from_json(body).map_err(bad)?;
    flow_file::check_added(&jobs, &app.ops.serving().config).map_err(bad)?;
    match app.ops.queue.flows().add(&id, &jobs, now_ms()).await {
        Ok(new) => Ok((
            StatusCode::OK,
            Json(BatchAdded {
                added: jobs.len(),
                id,
                enqueued: new,
            }),
        )),
        Err(QueueError::Invalid(why)) if why.starts_with("no batch") => Err(no_such_flow(&id)),
        Err(e) => Err(e.into()),
    }
}

/// `POST /api/flows/{id}/seal`: seal a batch (see `hourglass flow seal`).
/// 200 `{"id", "enqueued": {topic: n}}`; 400 not a batch; 404 none such.
#[utoipa::path(
    post,
    path = "/flows/{id}/seal",
    operation_id = "seal_batch",
    tag = "flows",
    params(
        ("id" = String, Path, description = "the flow's id"),
    ),
    responses(
        (status = 200, description = "sealed", body = super::views::BatchSealed),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn seal(
    State(app): AppState,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<BatchSealed>), ApiError> {
    check_flow_id(&id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    match app.ops.queue.flows().seal(&id, now_ms()).await? {
        Some(new) => Ok((StatusCode::OK, Json(BatchSealed { id, enqueued: new }))),
        None => Err(no_such_flow(&id)),
    }
}

/// `POST /api/flows/{id}/cancel`: every job not started is cancelled (see
/// `hourglass flow cancel`). 200 `{"id", "cancelled_in_topics": n}`; 404
/// none such.
#[utoipa::path(
    post,
    path = "/flows/{id}/cancel",
    operation_id = "cancel_flow",
    tag = "flows",
    params(
        ("id" = String, Path, description = "the flow's id"),
    ),
    responses(
        (status = 200, description = "cancelled", body = super::views::FlowCancelled),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
        super::openapi::ReadOnly,
    ),
)]
pub(super) async fn cancel(
    State(app): AppState,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<FlowCancelled>), ApiError> {
    check_flow_id(&id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let serving = app.ops.serving();
    let config = &serving.config;
    let keep = |topic: &str| config.topic(topic).and_then(|t| t.results).map(|r| r.keep);
    match app.ops.queue.flows().cancel(&id, now_ms(), &keep).await? {
        Some(n) => Ok((
            StatusCode::OK,
            Json(FlowCancelled {
                id,
                cancelled_in_topics: n,
            }),
        )),
        None => Err(no_such_flow(&id)),
    }
}

fn no_such_flow(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no flow {id:?} (or it ended longer ago than flows are kept)"),
    )
}

/// `GET /api/flows/{id}`: the flow with each job's state; 404 none such
/// (or it ended longer ago than flows are kept).
#[utoipa::path(
    get,
    path = "/flows/{id}",
    operation_id = "get_flow",
    tag = "flows",
    params(
        ("id" = String, Path, description = "the flow's id"),
    ),
    responses(
        (status = 200, description = "the flow and its jobs", body = crate::flow_file::FlowJson),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn show(
    State(app): AppState,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    check_flow_id(&id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    match app.ops.queue.flows().show(&id).await? {
        Some(flow) => Ok(Json(flow_file::to_json(&flow)).into_response()),
        None => Err(no_such_flow(&id)),
    }
}
