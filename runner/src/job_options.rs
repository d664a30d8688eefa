//! What a producer asks of one job, as written (`hourglass enqueue` flags,
//! the API's fields), checked once for both: the id, when it is due (`delay`,
//! `at` or `due_at_ms`), its attempts, `unique_for` and `replace`, a handler
//! version, an account, a tenant key, a trace context. The payload's own checks stay with its source (a file, standard
//! input, JSON); `Queue::enqueue` checks what it stores once more, for
//! producers that use the client crate directly.

use crate::clock::millis;
use crate::config::parse_duration;
use crate::redis::{
    LOWEST_PRIORITY, NewJob, TraceContext, check_account, check_id, check_key, check_version,
};

/// A job's options as a producer wrote them.
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    /// The producer's id.
    pub id: Option<String>,
    /// Run after this long ("30s", "15m").
    pub delay: Option<String>,
    /// Run at this time (RFC 3339).
    pub at: Option<String>,
    /// Run at this time (ms since the epoch).
    pub due_at_ms: Option<u64>,
    /// Attempts before dead-lettering.
    pub max_attempts: Option<u32>,
    /// Keep the id taken this long ("1h") even after the job is done.
    pub unique_for: Option<String>,
    /// Replace the waiting job with this id.
    pub replace: bool,
    /// Run every attempt on this handler version.
    pub version: Option<String>,
    /// Sum its attempts' usage under this account.
    pub account: Option<String>,
    /// Its tenant key: on a topic with fairness, keys take turns.
    pub key: Option<String>,
    /// The producer's W3C `traceparent`: its attempts continue that trace.
    pub traceparent: Option<String>,
    /// The producer's W3C `tracestate` (with `traceparent` only).
    pub tracestate: Option<String>,
    /// Not started this long after the enqueue ("30s", "5m"), it expires.
    pub expires_in: Option<String>,
    /// Not started by this time (RFC 3339), it expires.
    pub expires_at: Option<String>,
    /// Among the topic's due jobs, a higher priority starts first: 0 (the
    /// highest, the default) to 9.
    pub priority: Option<i64>,
}

/// An option that cannot be used: which (`delay`, `unique_for`, ... as the
/// API names them; the CLI shows them as flags) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadOption {
    /// The option at fault.
    pub field: &'static str,
    /// What is wrong with it.
    pub why: String,
}

impl JobOptions {
    /// Check every option and make the job that carries `payload`, due
    /// relative to `now` (ms).
    pub fn into_job(self, payload: Vec<u8>, now: u64) -> Result<NewJob, BadOption> {
        let bad = |field, why: String| BadOption { field, why };
        if let Some(id) = &self.id {
            check_id(id).map_err(|why| bad("id", why))?;
        }
        if let Some(version) = &self.version {
            check_version(version).map_err(|why| bad("version", why))?;
        }
        if let Some(account) = &self.account {
            check_account(account).map_err(|why| bad("account", why))?;
        }
        if let Some(key) = &self.key {
            check_key(key).map_err(|why| bad("key", why))?;
        }
        let trace = match (&self.traceparent, &self.tracestate) {
            (Some(parent), state) => Some(
                TraceContext::parse(parent, state.as_deref())
                    .map_err(|why| bad("traceparent", why))?,
            ),
            (None, Some(_)) => {
                return Err(bad("tracestate", "needs a traceparent".into()));
            }
            (None, None) => None,
        };
        let due_at_ms = match (self.delay, self.at, self.due_at_ms) {
            (None, None, None) => now,
            (Some(d), None, None) => {
                now + millis(parse_duration(&d).map_err(|e| bad("delay", e.to_string()))?)
            }
            (None, Some(at), None) => rfc3339("at", &at)?,
            (None, None, Some(ms)) => ms,
            _ => {
                return Err(bad(
                    "delay",
                    "give one of `delay`, `at` and `due_at_ms`".into(),
                ));
            }
        };
        if self.max_attempts == Some(0) {
            return Err(bad("max_attempts", "at least 1".into()));
        }
        let unique_for_ms = match &self.unique_for {
            Some(d) => millis(parse_duration(d).map_err(|e| bad("unique_for", e.to_string()))?),
            None => 0,
        };
        if self.id.is_none() && (unique_for_ms > 0 || self.replace) {
            let field = if self.replace {
                "replace"
            } else {
                "unique_for"
            };
            return Err(bad(field, "needs the job's `id`".into()));
        }
        let expires_at_ms = match (&self.expires_in, &self.expires_at) {
            (None, None) => None,
            (Some(d), None) => {
                Some(now + millis(parse_duration(d).map_err(|e| bad("expires_in", e.to_string()))?))
            }
            (None, Some(at)) => Some(rfc3339("expires_at", at)?),
            (Some(_), Some(_)) => {
                return Err(bad(
                    "expires_in",
                    "give one of `expires_in` and `expires_at`".into(),
                ));
            }
        };
        if let Some(deadline) = expires_at_ms {
            let field = if self.expires_in.is_some() {
                "expires_in"
            } else {
                "expires_at"
            };
            if deadline <= now {
                let why = if self.expires_in.is_some() {
                    "must be longer than 0: the job would expire before it could start"
                } else {
                    "is not after now: the job would expire before it could start"
                };
                return Err(bad(field, why.into()));
            }
            if deadline <= due_at_ms {
                return Err(bad(
                    field,
                    "comes before the job is due: it would expire unrun".into(),
                ));
            }
        }
        let priority = match self.priority {
            None => 0,
            Some(p) => u8::try_from(p)
                .ok()
                .filter(|p| *p <= LOWEST_PRIORITY)
                .ok_or_else(|| {
                    bad(
                        "priority",
                        format!(
                            "{p} is out of range: 0 (the highest, the default) to {LOWEST_PRIORITY}"
                        ),
                    )
                })?,
        };
        Ok(NewJob {
            id: self.id,
            payload,
            due_at_ms,
            max_attempts: self.max_attempts.unwrap_or(0),
            unique_for_ms,
            replace: self.replace,
            version: self.version,
            account: self.account,
            key: self.key,
            parent_result: None,
            trace,
            flow: None,
            expires_at_ms,
            priority,
        })
    }
}

/// `at`, an RFC 3339 time given as option `field`, in ms since the epoch.
fn rfc3339(field: &'static str, at: &str) -> Result<u64, BadOption> {
    let bad = |why: String| BadOption { field, why };
    let t: jiff::Timestamp = at.parse().map_err(|e| {
        bad(format!(
            "{at:?} is not an RFC 3339 time like 2026-12-01T09:00:00Z: {e}"
        ))
    })?;
    u64::try_from(t.as_millisecond()).map_err(|_| bad("is before 1970".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(o: JobOptions) -> &'static str {
        o.into_job(Vec::new(), 1_000).unwrap_err().field
    }

    #[test]
    fn each_bad_option_is_named() {
        let o = JobOptions::default;
        assert_eq!(
            field(JobOptions {
                delay: Some("soon".into()),
                ..o()
            }),
            "delay"
        );
        assert_eq!(
            field(JobOptions {
                at: Some("1969-12-31T23:59:59Z".into()),
                ..o()
            }),
            "at"
        );
        assert_eq!(
            field(JobOptions {
                delay: Some("1s".into()),
                due_at_ms: Some(5),
                ..o()
            }),
            "delay"
        );
        assert_eq!(
            field(JobOptions {
                max_attempts: Some(0),
                ..o()
            }),
            "max_attempts"
        );
        assert_eq!(
            field(JobOptions {
                replace: true,
                ..o()
            }),
            "replace"
        );
        assert_eq!(
            field(JobOptions {
                unique_for: Some("1h".into()),
                ..o()
            }),
            "unique_for"
        );
        assert_eq!(
            field(JobOptions {
                version: Some("v2".into()),
                ..o()
            }),
            "version"
        );
        assert_eq!(
            field(JobOptions {
                id: Some(String::new()),
                ..o()
            }),
            "id"
        );
    }

    #[test]
    fn due_times_from_delay_at_or_ms() {
        let due = |o: JobOptions| o.into_job(Vec::new(), 1_000).unwrap().due_at_ms;
        assert_eq!(due(JobOptions::default()), 1_000);
        assert_eq!(
            due(JobOptions {
                delay: Some("2s".into()),
                ..Default::default()
            }),
            3_000
        );
        assert_eq!(
            due(JobOptions {
                at: Some("1970-01-01T00:00:05Z".into()),
                ..Default::default()
            }),
            5_000
        );
        assert_eq!(
            due(JobOptions {
                due_at_ms: Some(7),
                ..Default::default()
            }),
            7
        );
    }
}
