//! What each span of the runner says when it ends: its name, kind,
//! attributes, events and status, built here from plain facts so that no
//! other module names an OpenTelemetry type. One function per span: an
//! attempt ([`attempt`]), an outbound request ([`request`]), a follow-up's
//! delivery ([`follow_up`]) and an API enqueue ([`enqueue`]).

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{Event, SpanKind, Status};

use crate::redis::Usage;

/// What a span says when it ends ([`super::Telemetry::end`]).
pub struct Ended {
    pub(super) name: Cow<'static, str>,
    pub(super) kind: SpanKind,
    pub(super) attributes: Vec<KeyValue>,
    pub(super) events: Vec<Event>,
    pub(super) status: Status,
}

/// How an attempt ended, as its span tells it.
#[derive(Debug, Clone, Copy)]
pub enum AttemptEnd<'a> {
    /// Acked.
    Acked,
    /// To be retried at `next_due_ms`, because of `reason`.
    Retry {
        /// Why it failed.
        reason: &'a str,
        /// When the next attempt is due (ms).
        next_due_ms: u64,
    },
    /// Dead-lettered because of `reason`.
    Dead {
        /// Why.
        reason: &'a str,
    },
    /// Given back uncounted.
    Released,
}

/// The facts of one attempt its span carries.
pub struct AttemptFacts<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The job's id.
    pub id: &'a str,
    /// The attempt's number.
    pub number: u32,
    /// The handler version that ran it.
    pub version: &'a str,
    /// How long after its due time it started (ms).
    pub late_ms: u64,
    /// What it used.
    pub usage: &'a Usage,
}

/// The `hourglass.attempt` span of `attempt`, ended as `end`.
pub fn attempt(attempt: &AttemptFacts<'_>, end: AttemptEnd<'_>) -> Ended {
    let (outcome, event, status) = match end {
        AttemptEnd::Acked => ("acked", None, Status::Ok),
        AttemptEnd::Retry {
            reason,
            next_due_ms,
        } => (
            "retry",
            Some(event(
                "retry",
                vec![
                    KeyValue::new("hourglass.reason", reason.to_owned()),
                    KeyValue::new("hourglass.next_due_ms", next_due_ms as i64),
                ],
            )),
            Status::error(reason.to_owned()),
        ),
        AttemptEnd::Dead { reason } => (
            "dead",
            Some(event(
                "dead",
                vec![KeyValue::new("hourglass.reason", reason.to_owned())],
            )),
            Status::error(reason.to_owned()),
        ),
        AttemptEnd::Released => (
            "released",
            Some(event("release", Vec::new())),
            Status::Unset,
        ),
    };
    let u = attempt.usage;
    Ended {
        name: "hourglass.attempt".into(),
        kind: SpanKind::Consumer,
        attributes: vec![
            KeyValue::new("messaging.system", "hourglass"),
            KeyValue::new("messaging.destination.name", attempt.topic.to_owned()),
            KeyValue::new("messaging.message.id", attempt.id.to_owned()),
            KeyValue::new("hourglass.attempt", i64::from(attempt.number)),
            KeyValue::new("hourglass.handler.version", attempt.version.to_owned()),
            KeyValue::new("hourglass.outcome", outcome),
            KeyValue::new("hourglass.lateness_ms", attempt.late_ms as i64),
            KeyValue::new("hourglass.cpu_us", u.cpu_us as i64),
            KeyValue::new("hourglass.wall_us", u.wall_us as i64),
            KeyValue::new("hourglass.memory_peak_bytes", u.memory_peak as i64),
            KeyValue::new("hourglass.start_us", u.start_us as i64),
            KeyValue::new("hourglass.http.requests", i64::from(u.requests)),
        ],
        events: event.into_iter().collect(),
        status,
    }
}

/// The client span of an outbound `method` request to `authority`: its
/// answer's status code, or why it failed.
pub fn request(method: &str, authority: &str, answer: Result<u16, String>) -> Ended {
    let mut attributes = vec![
        KeyValue::new("http.request.method", method.to_owned()),
        KeyValue::new("server.address", authority.to_owned()),
    ];
    let status = match answer {
        Ok(code) => {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
            if code >= 500 {
                Status::error(format!("status {code}"))
            } else {
                Status::Unset
            }
        }
        Err(e) => Status::error(e),
    };
    Ended {
        name: format!("{method} {authority}").into(),
        kind: SpanKind::Client,
        attributes,
        events: Vec::new(),
        status,
    }
}

/// The `hourglass.follow_up` span of follow-up `id` to `topic`, delivered
/// right after its parent's ack, or deferred to the sweep because of `deferred`.
pub fn follow_up(topic: &str, id: &str, deferred: Option<&str>) -> Ended {
    Ended {
        name: "hourglass.follow_up".into(),
        kind: SpanKind::Producer,
        attributes: vec![
            KeyValue::new("messaging.system", "hourglass"),
            KeyValue::new("messaging.destination.name", topic.to_owned()),
            KeyValue::new("messaging.message.id", id.to_owned()),
        ],
        events: Vec::new(),
        status: match deferred {
            None => Status::Unset,
            Some(e) => Status::error(format!("delivery deferred to the sweep: {e}")),
        },
    }
}

/// The `hourglass.enqueue` span of an API call that put `count` jobs into
/// `topic`: the one job's id when there was one, and how many were new, or
/// why it failed.
pub fn enqueue(topic: &str, count: usize, one: Option<&str>, new: Result<usize, String>) -> Ended {
    let mut attributes = vec![
        KeyValue::new("messaging.system", "hourglass"),
        KeyValue::new("messaging.destination.name", topic.to_owned()),
        KeyValue::new("messaging.batch.message_count", count as i64),
    ];
    if let Some(id) = one {
        attributes.push(KeyValue::new("messaging.message.id", id.to_owned()));
    }
    let status = match new {
        Ok(new) => {
            attributes.push(KeyValue::new("hourglass.enqueued.new", new as i64));
            Status::Unset
        }
        Err(e) => Status::error(e),
    };
    Ended {
        name: "hourglass.enqueue".into(),
        kind: SpanKind::Producer,
        attributes,
        events: Vec::new(),
        status,
    }
}

/// An event at `now` with `attributes`.
fn event(name: &'static str, attributes: Vec<KeyValue>) -> Event {
    Event::new(name, SystemTime::now(), attributes, 0)
}
