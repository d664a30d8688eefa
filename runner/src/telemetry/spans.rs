//! What each span of the runner says when it ends: its name, kind,
//! attributes, events and status, built here from plain facts so that no
//! other module names an OpenTelemetry type. One function per span: an
//! attempt ([`attempt`]), an outbound request ([`request`]), a follow-up's
//! delivery ([`follow_up`]) and an API enqueue ([`enqueue`]).
//!
//! Names, kinds and attributes follow the OpenTelemetry semantic conventions
//! [`SEMCONV`] (the scope's schema URL says so): messaging spans are named
//! `{messaging.operation.name} {destination}` and carry
//! `messaging.operation.type`; an outbound request is an HTTP client span
//! named by its method, with `server.address`, `server.port` and `url.full`.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{Event, SpanKind, Status};

use crate::redis::{Enqueued, QueueError, Usage};

/// The version of the OpenTelemetry semantic conventions the spans follow.
pub const SEMCONV: &str = "1.37.0";

/// The messaging attributes every job span carries: the system, the
/// operation (`type`: create, send, process, settle; `name`: ours) and the
/// destination (the topic).
fn messaging(kind: &'static str, name: &'static str, topic: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", "hourglass"),
        KeyValue::new("messaging.operation.type", kind),
        KeyValue::new("messaging.operation.name", name),
        KeyValue::new("messaging.destination.name", topic.to_owned()),
    ]
}

/// What a span says when it ends ([`super::Telemetry::end`]).
pub struct Ended {
    pub(super) name: Cow<'static, str>,
    pub(super) kind: SpanKind,
    pub(super) attributes: Vec<KeyValue>,
    pub(super) events: Vec<Event>,
    pub(super) status: Status,
}

impl Ended {
    /// The span of a request answered from the job's effects journal
    /// (`hourglass.replayed`: nothing was sent).
    pub fn replayed(mut self) -> Ended {
        self.attributes
            .push(KeyValue::new("hourglass.replayed", true));
        self
    }
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
    /// Suspended (a durable handler's sleep or wait) until `until_ms`.
    Suspended {
        /// When it wakes at the latest (ms).
        until_ms: u64,
    },
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
        AttemptEnd::Suspended { until_ms } => (
            "suspended",
            Some(event(
                "suspend",
                vec![KeyValue::new("hourglass.until_ms", until_ms as i64)],
            )),
            Status::Unset,
        ),
    };
    let u = attempt.usage;
    let mut attributes = messaging("process", "process", attempt.topic);
    attributes.extend([
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
    ]);
    Ended {
        name: format!("process {}", attempt.topic).into(),
        kind: SpanKind::Consumer,
        attributes,
        events: event.into_iter().collect(),
        status,
    }
}

/// Where an outbound request went, as its client span tells it.
pub struct Destination {
    /// The host (a name, or an IP address without brackets).
    pub host: String,
    /// The port (the scheme's when the request named none).
    pub port: u16,
    /// The URL, without credentials and with signature values redacted
    /// ([`url_full`]).
    pub url: String,
}

/// The client span of an outbound `method` request to `to`: its answer's
/// status code, or why it failed.
pub fn request(method: &str, to: &Destination, answer: Result<u16, String>) -> Ended {
    let mut attributes = vec![
        KeyValue::new("http.request.method", method.to_owned()),
        KeyValue::new("server.address", to.host.clone()),
        KeyValue::new("server.port", i64::from(to.port)),
        KeyValue::new("url.full", to.url.clone()),
    ];
    let status = match answer {
        Ok(code) => {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
            if code >= 500 {
                attributes.push(KeyValue::new("error.type", code.to_string()));
                Status::error(format!("status {code}"))
            } else {
                Status::Unset
            }
        }
        Err(e) => {
            attributes.push(KeyValue::new("error.type", "_OTHER"));
            Status::error(e)
        }
    };
    Ended {
        // HTTP client spans are named by the method alone when there is no
        // URL template (semantic conventions: `{method} {target}`)
        name: method.to_owned().into(),
        kind: SpanKind::Client,
        attributes,
        events: Vec::new(),
        status,
    }
}

/// How a durable handler's step ended, as its span tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Run, and its result (this many bytes) written to the journal.
    Recorded(usize),
    /// Returned from the journal (this many bytes) without running.
    Replayed(usize),
    /// Run, and nothing recorded: it failed, or its record was refused.
    Failed,
}

/// The span (`step {name}`, internal, under the attempt's) of step `name`.
pub fn step(name: &str, end: StepEnd) -> Ended {
    let (outcome, bytes, status) = match end {
        StepEnd::Recorded(n) => ("recorded", Some(n), Status::Ok),
        StepEnd::Replayed(n) => ("replayed", Some(n), Status::Ok),
        StepEnd::Failed => (
            "failed",
            None,
            Status::error("the step failed or was not recorded"),
        ),
    };
    let mut attributes = vec![
        KeyValue::new("hourglass.step.name", name.to_owned()),
        KeyValue::new("hourglass.step.outcome", outcome),
    ];
    if let Some(n) = bytes {
        attributes.push(KeyValue::new("hourglass.step.bytes", n as i64));
    }
    Ended {
        name: format!("step {name}").into(),
        kind: SpanKind::Internal,
        attributes,
        events: Vec::new(),
        status,
    }
}

/// The producer span (`send {topic}`) of follow-up `id` to `topic`,
/// delivered right after its parent's ack, or deferred to the sweep because
/// of `deferred`.
pub fn follow_up(topic: &str, id: &str, deferred: Option<&str>) -> Ended {
    let mut attributes = messaging("send", "send", topic);
    attributes.push(KeyValue::new("messaging.message.id", id.to_owned()));
    Ended {
        name: format!("send {topic}").into(),
        kind: SpanKind::Producer,
        attributes,
        events: Vec::new(),
        status: match deferred {
            None => Status::Unset,
            Some(e) => Status::error(format!("delivery deferred to the sweep: {e}")),
        },
    }
}

/// The producer span (`enqueue {topic}`) of an enqueue (the API's or the
/// CLI's) of `count` jobs into `topic` that `answers` ended: the one job's id
/// for a single job (a batch carries its size instead), and how many were
/// new, or why it failed.
pub fn enqueue(topic: &str, count: usize, answers: &Result<Vec<Enqueued>, QueueError>) -> Ended {
    let mut attributes = messaging("send", "enqueue", topic);
    match answers.as_deref() {
        Ok([one]) if count == 1 => {
            attributes.push(KeyValue::new("messaging.message.id", one.id().to_owned()));
        }
        _ if count == 1 => {}
        _ => attributes.push(KeyValue::new("messaging.batch.message_count", count as i64)),
    }
    let new = match answers {
        Ok(answers) => Ok(answers
            .iter()
            .filter(|a| matches!(a, Enqueued::New(_)))
            .count()),
        Err(e) => Err(e.to_string()),
    };
    let status = match new {
        Ok(new) => {
            attributes.push(KeyValue::new("hourglass.enqueued.new", new as i64));
            Status::Unset
        }
        Err(e) => Status::error(e),
    };
    Ended {
        name: format!("enqueue {topic}").into(),
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

/// Query parameters whose values the semantic conventions say to redact in
/// `url.full` (signatures and keys of presigned URLs).
const REDACTED_QUERY: [&str; 4] = ["AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"];

/// `url.full` of a request to `scheme://authority` with `path_and_query`:
/// without user and password, and with the values of `REDACTED_QUERY`
/// parameters replaced by `REDACTED`, as the semantic conventions ask.
pub fn url_full(scheme: &str, authority: &str, path_and_query: &str) -> String {
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let mut url = format!("{scheme}://{host}{path}");
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if REDACTED_QUERY.contains(&k) => format!("{k}=REDACTED"),
                _ => pair.to_owned(),
            })
            .collect();
        url.push('?');
        url.push_str(&pairs.join("&"));
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_full_drops_credentials_and_redacts_signatures() {
        assert_eq!(
            url_full(
                "https",
                "user:secret@api.example.com:8443",
                "/v1/x?a=1&sig=abc&b"
            ),
            "https://api.example.com:8443/v1/x?a=1&sig=REDACTED&b"
        );
        assert_eq!(url_full("http", "h", "/"), "http://h/");
    }

    #[test]
    fn a_single_enqueue_names_its_job_and_a_batch_its_size() {
        let one = enqueue("refund", 1, &Ok(vec![Enqueued::New("r-1".into())]));
        let keys = |e: &Ended| {
            e.attributes
                .iter()
                .map(|a| a.key.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(one.name, "enqueue refund");
        assert!(keys(&one).contains(&"messaging.message.id".to_owned()));
        assert!(!keys(&one).contains(&"messaging.batch.message_count".to_owned()));
        let new = |id: &str| Enqueued::New(id.into());
        let batch = enqueue("refund", 3, &Ok(vec![new("a"), new("b"), new("c")]));
        assert!(keys(&batch).contains(&"messaging.batch.message_count".to_owned()));
    }
}
