//! `GET /api/schedules`: each `[[schedule]]` of the served queues.toml with
//! its next fire times, how far the runners have enqueued it (its cursor in
//! Redis) and the job of its last fire time with how that job stands, as
//! `hourglass schedules` prints them and the console's cron view draws them.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, AppState};
use crate::clock::now_ms;
use crate::config::{ScheduleConfig, When};

/// Most upcoming fire times one call lists per schedule.
const MOST_NEXT: usize = 50;

/// `?next=3` of `GET /api/schedules`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SchedulesQuery {
    #[serde(default = "three")]
    next: usize,
}

fn three() -> usize {
    3
}

/// Every schedule of the served configuration.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ScheduleList {
    /// When this was read, ms since the Unix epoch.
    now_ms: u64,
    /// In queues.toml's order.
    schedules: Vec<ScheduleView>,
}

/// One `[[schedule]]` and how it stands.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ScheduleView {
    name: String,
    topic: String,
    /// The cron expression as written in queues.toml's terms (seconds first),
    /// for a cron schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    /// Its IANA time zone, for a cron schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    timezone: Option<String>,
    /// Its period in ms, for an `every` schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    every_ms: Option<u64>,
    /// `skip`, `latest` or `all`: what happens to fire times that pass while
    /// no runner runs.
    missed: String,
    /// The next fire times, ms since the Unix epoch.
    next_ms: Vec<u64>,
    /// The fire times up to this one are handled (enqueued, or skipped by
    /// `missed`); none: no runner has served the schedule yet.
    handled_until_ms: Option<u64>,
    /// The last fire time handled that has come, and its job.
    #[serde(skip_serializing_if = "Option::is_none")]
    last: Option<LastFire>,
}

/// A schedule's last handled fire time and what became of its job.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct LastFire {
    fire_ms: u64,
    /// Its job's id, `name@<fire time ms>`.
    job: String,
    /// How the job stands (`scheduled`, `running`, `dead`, `acked`, ...);
    /// none: the topic does not hold it (done and not kept, purged,
    /// skipped by `missed = "skip"`, or a fire time before any runner
    /// served the schedule).
    state: Option<String>,
}

/// `GET /api/schedules?next=3`: each schedule, its next fire times, its
/// cursor and its last fire time's job.
#[utoipa::path(
    get,
    path = "/schedules",
    operation_id = "list_schedules",
    tag = "operate",
    params(
        ("next" = Option<usize>, Query, description = "upcoming fire times per schedule, 0 to 50 (3)"),
    ),
    responses(
        (status = 200, description = "each schedule of the served queues.toml", body = ScheduleList),
        super::openapi::BadInput,
        super::openapi::Unavailable,
        super::openapi::NoToken,
    ),
)]
pub(super) async fn list(
    State(app): AppState,
    query: Result<Query<SchedulesQuery>, QueryRejection>,
) -> Result<Json<ScheduleList>, ApiError> {
    let Query(query) = query?;
    if query.next > MOST_NEXT {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            "next",
            format!("at most {MOST_NEXT} fire times a schedule"),
        ));
    }
    let serving = app.ops.serving();
    let now = now_ms();
    let read = serving
        .config
        .schedules
        .iter()
        .map(|s| one(&app.ops, s, query.next, now));
    let schedules = futures::future::try_join_all(read).await?;
    Ok(Json(ScheduleList {
        now_ms: now,
        schedules,
    }))
}

async fn one(
    ops: &super::Ops,
    s: &ScheduleConfig,
    next: usize,
    now: u64,
) -> Result<ScheduleView, ApiError> {
    let q = &ops.queue;
    let keys = q.keys(&s.topic);
    let handled = q.runners().schedule_cursor(&keys, &s.name).await?;
    // the last fire time come (the runners enqueue a little ahead)
    let last = match handled.and_then(|until| s.last_tick(until.min(now))) {
        Some(fire_ms) => {
            let job = s.job_id(fire_ms);
            let view = q.job_json(&keys, &s.topic, &job, None, now).await?;
            let state = view.map(|v| v.state().to_owned());
            Some(LastFire {
                fire_ms,
                job,
                state,
            })
        }
        None => None,
    };
    let (cron, timezone, every_ms) = match &s.when {
        When::Cron { expr, timezone } => (Some(expr.clone()), Some(timezone.clone()), None),
        When::Every(p) => (None, None, Some(crate::clock::millis(*p))),
    };
    Ok(ScheduleView {
        name: s.name.clone(),
        topic: s.topic.clone(),
        cron,
        timezone,
        every_ms,
        missed: format!("{:?}", s.missed).to_lowercase(),
        next_ms: s.ticks(now, u64::MAX / 4, next),
        handled_until_ms: handled,
        last,
    })
}
