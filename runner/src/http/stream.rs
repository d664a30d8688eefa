//! The console's live updates: `GET /api/stream` is Server-Sent Events
//! pushing the overview (every topic with its counts and what the live
//! runners report, and the runners) whenever it changed, read at most once
//! every [`OVERVIEW_EVERY`] for every console together (a thousand consoles
//! open cost Redis what one does); with `?job=TOPIC/ID`, that job's view
//! when it changes, and with `?flow=ID`, that flow's.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ApiError, App, AppState, topic_named};
use crate::clock::now_ms;

/// How often the overview is read for all consoles.
pub(super) const OVERVIEW_EVERY: Duration = Duration::from_secs(2);
/// How often a watched job or flow is read for its console.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The overview as last read, shared by every stream.
#[derive(Default)]
pub(super) struct Overview(tokio::sync::Mutex<Option<(Instant, Arc<str>)>>);

impl Overview {
    /// The overview's JSON, read again when older than [`OVERVIEW_EVERY`]
    /// (under the lock: one read for every console waiting).
    async fn json(&self, app: &App) -> Result<Arc<str>, ApiError> {
        let mut last = self.0.lock().await;
        if let Some((at, json)) = &*last
            && at.elapsed() < OVERVIEW_EVERY - Duration::from_millis(100)
        {
            return Ok(json.clone());
        }
        let list = super::api::topic_list(app).await?;
        let runners = app.ops.queue.runners().list(now_ms()).await?;
        let json: Arc<str> = serde_json::json!({ "topics": list, "runners": runners })
            .to_string()
            .into();
        *last = Some((Instant::now(), json.clone()));
        Ok(json)
    }
}

/// `?job=TOPIC/ID&flow=ID` of the stream.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamQuery {
    job: Option<String>,
    flow: Option<String>,
}

/// `GET /api/stream`: Server-Sent Events: `overview` (`{"topics": <the
/// topic list>, "runners": [...]}`) whenever it changed, at most every 2 s;
/// with `job=TOPIC/ID`, `job` (its view, as `GET .../jobs/{id}`, or null once
/// gone) when it changes; with `flow=ID`, `flow` (as `GET /api/flows/{id}`).
#[utoipa::path(
    get,
    path = "/stream",
    operation_id = "stream",
    tag = "operate",
    params(
        ("job" = Option<String>, Query, description = "also push this job's view: `TOPIC/ID`"),
        ("flow" = Option<String>, Query, description = "also push this flow's view"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events: `overview`, `job`, `flow`", content_type = "text/event-stream", body = super::answers::StreamEventSse),
        super::openapi::BadInput,
        super::openapi::NotFound,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn stream(
    State(app): AppState,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let bad =
        |field: &str, why: String| ApiError::field(axum::http::StatusCode::BAD_REQUEST, field, why);
    let job = match &query.job {
        None => None,
        Some(path) => {
            let (topic, id) = path
                .split_once('/')
                .ok_or_else(|| bad("job", "TOPIC/ID".into()))?;
            let cfg = topic_named(&app.ops.serving(), topic)?;
            crate::redis::check_id(id).map_err(|why| bad("job", why))?;
            Some((topic.to_owned(), id.to_owned(), cfg.map(|c| c.max_attempts)))
        }
    };
    if let Some(flow) = &query.flow {
        crate::redis::flow::check_flow_id(flow).map_err(|why| bad("flow", why))?;
    }
    let state = Watching {
        app,
        job,
        flow: query.flow,
        sent: [None, None, None],
        ticks: 0,
        queue: Vec::new(),
    };
    let stream = futures::stream::unfold(state, |mut w| async move {
        loop {
            if let Some(event) = w.queue.pop() {
                return Some((Ok::<_, Infallible>(event), w));
            }
            if w.ticks > 0 {
                tokio::time::sleep(WATCH_EVERY).await;
            }
            w.ticks += 1;
            w.look().await;
        }
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// One console's stream: what it watches and what it was last sent.
struct Watching {
    app: Arc<App>,
    job: Option<(String, String, Option<u32>)>,
    flow: Option<String>,
    /// The overview, job and flow as last sent.
    sent: [Option<String>; 3],
    ticks: u64,
    queue: Vec<Event>,
}

impl Watching {
    /// Read what is due and queue what changed.
    async fn look(&mut self) {
        let app = self.app.clone();
        let every = (OVERVIEW_EVERY.as_millis() / WATCH_EVERY.as_millis()) as u64;
        if self.ticks % every == 1 {
            match app.stream.json(&app).await {
                Ok(json) => self.changed(0, "overview", json.to_string()),
                Err(e) => {
                    let error = serde_json::json!({ "error": e.message() }).to_string();
                    self.changed(0, "error", error);
                }
            }
        }
        if let Some((topic, id, max_attempts)) = &self.job {
            let q = &app.ops.queue;
            let keys = q.keys(topic);
            let read = q.job_json(&keys, topic, id, *max_attempts, now_ms());
            if let Ok(view) = read.await {
                let json = serde_json::to_string(&view).expect("a job view serializes");
                self.changed(1, "job", json);
            }
        }
        if let Some(id) = &self.flow
            && let Ok(flow) = app.ops.queue.flows().show(id).await
        {
            let json = match &flow {
                Some(f) => serde_json::to_string(&crate::flow_file::to_json(f)),
                None => Ok("null".to_owned()),
            }
            .expect("a flow serializes");
            self.changed(2, "flow", json);
        }
    }

    /// Queue `data` as event `name` unless slot `i` was last sent the same.
    fn changed(&mut self, i: usize, name: &str, data: String) {
        if self.sent[i].as_deref() != Some(data.as_str()) {
            self.queue
                .insert(0, Event::default().event(name).data(&data));
            self.sent[i] = Some(data);
        }
    }
}
