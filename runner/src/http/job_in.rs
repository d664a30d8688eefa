//! One job as an enqueue request gives it (`POST /topics/{topic}/jobs`,
//! alone or in a bulk list), checked through the same [`JobOptions`] as
//! `hourglass enqueue`'s flags.

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::ApiError;
use crate::job_options::JobOptions;
use crate::redis::NewJob;

/// One job as a request gives it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Job)]
pub(super) struct JobIn {
    /// Your id; a live job with it makes this a duplicate.
    id: Option<String>,
    /// A string is the payload as is; any other JSON value is stored as JSON text.
    #[schema(value_type = Object)]
    payload: Value,
    /// Run after this long ("30s", "15m").
    delay: Option<String>,
    /// Run at this time (RFC 3339).
    at: Option<String>,
    /// Run at this time (ms since the epoch).
    due_at_ms: Option<u64>,
    /// Attempts before dead-lettering (default: the topic's).
    max_attempts: Option<u32>,
    /// Keep the id taken this long ("1h") even after the job is done.
    unique_for: Option<String>,
    /// Replace the waiting job with this id (payload and due time).
    #[serde(default)]
    replace: bool,
    /// Run every attempt on this handler version (one the topic keeps).
    version: Option<String>,
    /// Sum its usage under this account.
    account: Option<String>,
    /// Its tenant key: on a topic with fairness, keys take turns.
    key: Option<String>,
    /// Not started this long after the enqueue ("30s", "5m"), it expires:
    /// it is not run, and is dead-lettered or dropped (the topic's `on_expire`).
    expires_in: Option<String>,
    /// Not started by this time (RFC 3339), it expires.
    expires_at: Option<String>,
    /// Among the topic's due jobs, a higher priority starts first: 0 (the
    /// highest, the default) to 9.
    priority: Option<i64>,
}

impl JobIn {
    /// Check and convert; errors name the field under `path` (e.g. `jobs[3]`).
    pub(super) fn into_new(
        self,
        path: &str,
        now: u64,
        max_payload: u64,
    ) -> Result<NewJob, ApiError> {
        let bad = |field: &str, why: String| {
            ApiError::field(StatusCode::BAD_REQUEST, format!("{path}{field}"), why)
        };
        let payload = match self.payload {
            Value::String(s) => s.into_bytes(),
            Value::Null => {
                return Err(bad(
                    "payload",
                    "is null; send a string or any JSON value".into(),
                ));
            }
            v => v.to_string().into_bytes(),
        };
        if payload.len() as u64 > max_payload {
            return Err(bad(
                "payload",
                format!(
                    "{} bytes, over the limit of {max_payload} ([runner] max_payload)",
                    payload.len()
                ),
            ));
        }
        let options = JobOptions {
            id: self.id,
            delay: self.delay,
            at: self.at,
            due_at_ms: self.due_at_ms,
            max_attempts: self.max_attempts,
            unique_for: self.unique_for,
            replace: self.replace,
            version: self.version,
            account: self.account,
            key: self.key,
            traceparent: None,
            tracestate: None,
            expires_in: self.expires_in,
            expires_at: self.expires_at,
            priority: self.priority,
        };
        options
            .into_job(payload, now)
            .map_err(|e| bad(e.field, e.why))
    }
}
